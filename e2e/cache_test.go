package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	oai "github.com/openai/openai-go/v3"
	oaiopt "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/client"
	"github.com/layer0ai/layer0/internal/fakeclock"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/upstream/fake"
)

// cacheGateway serves the sim as "sim" and a fake OpenAI-compatible engine as "vllm" (whose
// requests can be counted), both caching; "vllm" caches sampled answers too, so that the binary
// protocol's version 1 (which has no temperature) is cached.
func cacheGateway(t *testing.T, opts ...layer0.Option) (string, *fake.Server) {
	t.Helper()
	vllm := fake.NewOpenAI(fake.Script{Text: "Hello from the fake engine, cached.", CachedTokens: 3})
	t.Cleanup(vllm.Close)
	_, base := serveGateway(t, parseConfig(t, fmt.Sprintf(`
engines:
  sim: {kind: sim}
  vllm: {kind: openai, url: %q}
models:
  sim: {engines: [sim], cache: {enabled: true, ttl: 1m}}
  vllm: {engines: [vllm], cache: {enabled: true, ttl: 1m, cache_sampled: true}}
  nocache: {engines: [vllm]}
`, vllm.URL)), opts...)
	return base, vllm
}

// cacheHeaders are a response's X-Cache and X-Layer0-Cache.
func cacheHeaders(r *http.Response) string {
	if r == nil {
		return "no response"
	}
	return r.Header.Get("X-Cache") + " " + r.Header.Get("X-Layer0-Cache")
}

// TestCacheReplaysInEveryFormatSDK asks the same question twice in each client format, through
// the official SDKs, of the sim and of an OpenAI-compatible engine (whose pass-through path a
// cacheable request does not take): the second answer is a hit, and the client sees the same
// answer but for its id.
func TestCacheReplaysInEveryFormatSDK(t *testing.T) {
	base, vllm := cacheGateway(t)
	ctx := context.Background()
	for _, model := range []string{"sim", "vllm"} {
		for _, format := range []string{"anthropic", "openai"} {
			for _, stream := range []bool{false, true} {
				for _, tools := range []bool{false, true} {
					name := fmt.Sprintf("%s/%s/stream=%v/tools=%v", model, format, stream, tools)
					before := len(vllm.Requests())
					var turns [2]turn
					var resps [2]*http.Response
					for i := range 2 {
						prompt := "Say hello for " + name
						if tools {
							prompt = toolPrompt + " (" + name + ")"
						}
						if format == "anthropic" {
							c := anthropicClient(base, option.WithResponseInto(&resps[i]))
							p := anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 200, Temperature: anthropic.Float(0),
								Messages: userText(prompt), System: []anthropic.TextBlockParam{{Text: "You are terse."}}}
							if tools {
								p.Tools = []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "get_weather",
									Description: anthropic.String("Current weather"),
									InputSchema: anthropic.ToolInputSchemaParam{Properties: weatherSchema["properties"], Required: []string{"city"}}}}}
							}
							_, turns[i] = anthropicCall(ctx, t, &c, p, stream)
						} else {
							c := oai.NewClient(oaiopt.WithBaseURL(base+"/v1"), oaiopt.WithAPIKey("test-key"), oaiopt.WithMaxRetries(0),
								oaiopt.WithResponseInto(&resps[i]))
							p := oai.ChatCompletionNewParams{Model: model, MaxTokens: oai.Int(200), Temperature: oai.Float(0),
								Messages: []oai.ChatCompletionMessageParamUnion{oai.SystemMessage("You are terse."), oai.UserMessage(prompt)}}
							if tools {
								p.Tools = []oai.ChatCompletionToolUnionParam{oai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
									Name: "get_weather", Description: oai.String("Current weather"), Parameters: weatherSchema})}
							}
							_, turns[i] = openAICall(ctx, t, &c, p, stream)
						}
					}
					if got := [2]string{cacheHeaders(resps[0]), cacheHeaders(resps[1])}; got != [2]string{"MISS miss", "HIT hit"} {
						t.Errorf("%s: cache headers %q, want a miss then a hit", name, got)
					}
					if turns[0].id == turns[1].id {
						t.Errorf("%s: the hit has the miss's id %q", name, turns[0].id)
					}
					miss, hit := turns[0], turns[1]
					miss.id, hit.id = "", ""
					if miss != hit || miss.text == "" && miss.toolArgs == "" {
						t.Errorf("%s: hit %+v\nmiss %+v", name, hit, miss)
					}
					if tools && model == "vllm" && miss.toolName != "get_weather" {
						t.Errorf("%s: no tool call in %+v", name, miss)
					}
					if model == "vllm" {
						if n := len(vllm.Requests()) - before; n != 1 {
							t.Errorf("%s: %d engine requests, want 1", name, n)
						}
						// A cacheable request takes the event path: the id is layer0's own.
						for _, id := range []string{turns[0].id, turns[1].id} {
							if id == "chatcmpl-8d2f0c5b1e7a4c3f9b6a2d1e0f3c4b5a" {
								t.Errorf("%s: the pass-through answered a cacheable request", name)
							}
						}
					}
				}
			}
		}
	}
}

// TestCacheSharedAcrossFormats stores an answer asked in Anthropic JSON and replays it to the
// same conversation asked in every other format: OpenAI JSON and SSE, Anthropic SSE, and the
// binary protocol's versions 1 and 2 (token ids and text frames).
func TestCacheSharedAcrossFormats(t *testing.T) {
	base, vllm := cacheGateway(t)
	ctx := context.Background()
	const prompt = "Tell me something cacheable."
	var first *http.Response
	ac := anthropicClient(base, option.WithResponseInto(&first))
	_, want := anthropicCall(ctx, t, &ac, anthropic.MessageNewParams{Model: "vllm", MaxTokens: 200, Messages: userText(prompt)}, false)
	if cacheHeaders(first) != "MISS miss" {
		t.Fatalf("first: %s", cacheHeaders(first))
	}
	want.id = ""
	check := func(name string, got turn, resp *http.Response) {
		t.Helper()
		got.id = ""
		if got != want {
			t.Errorf("%s: %+v, want %+v", name, got, want)
		}
		if h := cacheHeaders(resp); h != "HIT hit" {
			t.Errorf("%s: cache headers %q", name, h)
		}
	}
	for _, stream := range []bool{false, true} {
		var resp *http.Response
		oc := oai.NewClient(oaiopt.WithBaseURL(base+"/v1"), oaiopt.WithAPIKey("test-key"), oaiopt.WithMaxRetries(0), oaiopt.WithResponseInto(&resp))
		_, got := openAICall(ctx, t, &oc, oai.ChatCompletionNewParams{Model: "vllm", MaxTokens: oai.Int(200),
			Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage(prompt)}}, stream)
		check(fmt.Sprintf("openai stream=%v", stream), got, resp)
	}
	var resp *http.Response
	ac = anthropicClient(base, option.WithResponseInto(&resp))
	_, got := anthropicCall(ctx, t, &ac, anthropic.MessageNewParams{Model: "vllm", MaxTokens: 200, Messages: userText(prompt)}, true)
	check("anthropic stream", got, resp)
	for _, proto := range []client.Protocol{client.Binary1, client.Binary2, client.Binary2Text} {
		c, err := client.New(client.Options{BaseURL: base, Protocol: proto})
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.Stream(ctx, &client.Request{Model: "vllm", MaxTokens: 200, Messages: []client.Message{{Role: llm.RoleUser,
			Content: []client.Block{{Type: llm.BlockText, Text: prompt}}}}})
		if err != nil {
			t.Fatalf("%s: %v", proto, err)
		}
		var col llm.Collector
		for ev, err := range s.Events() {
			if err != nil {
				t.Fatalf("%s: %v", proto, err)
			}
			_ = col.Send(ev)
		}
		s.Close()
		r := col.Response
		got := turn{stop: r.Stop.String(), input: int64(r.Usage.InputTokens + r.Usage.CacheReadInputTokens), output: int64(r.Usage.OutputTokens)}
		for _, b := range r.Content {
			got.text += b.Text
		}
		if proto == client.Binary1 {
			// Version 1's usage frame carries the uncached input and a cache-hit ratio, not the
			// cached count (the engine reports 3 cached tokens).
			got.input += 3
		}
		check(proto.String(), got, s.HTTPResponse())
		c.CloseIdleConnections()
	}
	if n := len(vllm.Requests()); n != 1 {
		t.Errorf("%d engine requests for one conversation in seven formats, want 1", n)
	}
}

// TestCacheSingleFlightHTTP sends 100 identical requests at once to an engine that takes its
// time: one engine request serves them all.
func TestCacheSingleFlightHTTP(t *testing.T) {
	vllm := fake.NewOpenAI(fake.Script{Text: "One answer for everyone.", FirstByte: 300 * time.Millisecond})
	t.Cleanup(vllm.Close)
	base := startGateway(t, fmt.Sprintf(`
engines:
  vllm: {kind: openai, url: %q}
models:
  vllm: {engines: [vllm], cache: {enabled: true}}
`, vllm.URL))
	body := []byte(`{"model":"vllm","max_tokens":50,"temperature":0,"messages":[{"role":"user","content":"same question"}]}`)
	const n = 100
	var wg sync.WaitGroup
	texts, heads := make([]string, n), make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(base+"/v1/messages", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			var m struct {
				Content []struct{ Text string } `json:"content"`
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || json.Unmarshal(b, &m) != nil || len(m.Content) != 1 {
				t.Errorf("request %d: %d %s", i, resp.StatusCode, b)
				return
			}
			texts[i], heads[i] = m.Content[0].Text, cacheHeaders(resp)
		}()
	}
	wg.Wait()
	count := map[string]int{}
	for i := range n {
		count[heads[i]]++
		if texts[i] != "One answer for everyone." {
			t.Errorf("request %d: %q", i, texts[i])
		}
	}
	if got := len(vllm.Requests()); got != 1 {
		t.Errorf("%d engine requests for %d identical requests, want 1", got, n)
	}
	if count["MISS miss"] != 1 || count["HIT coalesced"]+count["HIT hit"] != n-1 {
		t.Errorf("cache headers: %v", count)
	}
}

// TestCacheControlAndTTLHTTP checks the client's Cache-Control and the TTL on the injected clock.
func TestCacheControlAndTTLHTTP(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	base, vllm := cacheGateway(t, layer0.WithClock(clk.Now))
	ctx := context.Background()
	ask := func(model, control string) string {
		var resp *http.Response
		opts := []option.RequestOption{option.WithResponseInto(&resp)}
		if control != "" {
			opts = append(opts, option.WithHeader("Cache-Control", control))
		}
		c := anthropicClient(base, opts...)
		anthropicCall(ctx, t, &c, anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 100, Temperature: anthropic.Float(0),
			Messages: userText("What time is it?")}, false)
		return cacheHeaders(resp)
	}
	for i, s := range []struct {
		model, control string
		advance        time.Duration
		want           string
		requests       int
	}{
		{"vllm", "no-store", 0, "MISS bypass", 1},
		{"vllm", "", 0, "MISS miss", 2},
		{"vllm", "", 59 * time.Second, "HIT hit", 2},
		{"vllm", "no-cache", 0, "MISS refresh", 3},
		{"vllm", "", 59 * time.Second, "HIT hit", 3}, // the refresh stored a new answer
		{"vllm", "", time.Second, "MISS miss", 4},    // which expired
		{"nocache", "", 0, " ", 5},                   // no cache headers for a model without a cache
	} {
		clk.Advance(s.advance)
		if got := ask(s.model, s.control); got != s.want || len(vllm.Requests()) != s.requests {
			t.Errorf("step %d: %q and %d engine requests, want %q and %d", i, got, len(vllm.Requests()), s.want, s.requests)
		}
	}
}

// TestCacheInProcessAndReload serves hits on the in-process path (Do), and keeps the stored
// answers across a reload that leaves the model's cache settings alone, but not across one that
// changes them.
func TestCacheInProcessAndReload(t *testing.T) {
	vllm := fake.NewOpenAI(fake.Script{Text: "Kept across reloads."})
	t.Cleanup(vllm.Close)
	conf := func(ttl string) *layer0.Config {
		return parseConfig(t, fmt.Sprintf("engines:\n  vllm: {kind: openai, url: %q}\nmodels:\n  vllm: {engines: [vllm], cache: {enabled: true, ttl: %s}}\n",
			vllm.URL, ttl))
	}
	g, err := layer0.New(conf("1m"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	zero := 0.0
	req := &layer0.Request{Model: "vllm", MaxTokens: 50, Temperature: &zero, Messages: []llm.Message{{Role: llm.RoleUser,
		Content: []llm.Block{{Type: llm.BlockText, Text: "Remember me."}}}}}
	ids := map[string]bool{} // a hit's id is its own (the fake engine's misses all have one id)
	ask := func(step string, wantRequests int) {
		t.Helper()
		var c layer0.Collector
		if err := g.Do(context.Background(), req, &c); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		hit := strings.HasPrefix(step, "hit")
		if r := c.Response; len(r.Content) != 1 || r.Content[0].Text != "Kept across reloads." || r.ID == "" || hit && ids[r.ID] {
			t.Errorf("%s: %+v (ids so far %v)", step, r, ids)
		}
		ids[c.Response.ID] = true
		if n := len(vllm.Requests()); n != wantRequests {
			t.Errorf("%s: %d engine requests, want %d", step, n, wantRequests)
		}
	}
	ask("miss", 1)
	ask("hit", 1)
	if err := g.Reload(conf("1m")); err != nil {
		t.Fatal(err)
	}
	ask("hit after a reload", 1)
	if err := g.Reload(conf("2m")); err != nil {
		t.Fatal(err)
	}
	ask("miss after the policy changed", 2)
}

// TestCacheKeyHasTruncate checks that the truncate directive is part of the cache key: context
// planning cuts by it what the engine is sent, after the lookup. Tenant a sends a prompt too long
// for the model's window with <|truncate:15|>; the same prompt from tenant b without the
// directive is refused as too long, not answered with a's cut answer, and with another budget it
// is a miss. So is the same prompt from a itself without the directive.
func TestCacheKeyHasTruncate(t *testing.T) {
	base := startGateway(t, fmt.Sprintf(`
keys:
  - {name: a, hash: %s}
  - {name: b, hash: %s}
engines: {sim: {kind: sim}}
models:
  tiny: {engines: [sim], context_window: 60, cache: {enabled: true, ttl: 1m}}
`, authHash("l0-a"), authHash("l0-b")))
	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 30)
	ask := func(key, system string) (string, error) {
		var resp *http.Response
		c := anthropicClient(base, option.WithAPIKey(key), option.WithResponseInto(&resp))
		p := anthropic.MessageNewParams{Model: "tiny", MaxTokens: 20, Temperature: anthropic.Float(0), Messages: userText(long)}
		if system != "" {
			p.System = []anthropic.TextBlockParam{{Text: system}}
		}
		_, err := c.Messages.New(context.Background(), p)
		return cacheHeaders(resp), err
	}
	if got, err := ask("l0-a", "<|truncate:15|>"); err != nil || got != "MISS miss" {
		t.Fatalf("a with <|truncate:15|>: %q %v, want a miss served", got, err)
	}
	if got, err := ask("l0-a", "<|truncate:15|>"); err != nil || got != "HIT hit" {
		t.Fatalf("a again: %q %v, want a hit", got, err)
	}
	for _, key := range []string{"l0-b", "l0-a"} {
		got, err := ask(key, "")
		var e *anthropic.Error
		if !errors.As(err, &e) || e.StatusCode != 400 || !strings.Contains(e.RawJSON(), "prompt is too long") {
			t.Errorf("%s without the directive: %q %v, want a 400 prompt is too long", key, got, err)
		}
	}
	if got, err := ask("l0-b", "<|truncate|>"); err != nil || got != "MISS miss" {
		t.Errorf("b with <|truncate|> (the window's budget): %q %v, want a miss", got, err)
	}
}

// cachedPair starts a gateway that serves the OpenAI-format engine vllm as "vllm" and the
// Anthropic engine claude as "claude", both with the response cache on.
func cachedPair(t *testing.T, vllm, claude *fake.Server) string {
	t.Helper()
	return startGateway(t, fmt.Sprintf(`
engines:
  vllm: {kind: openai, url: %q}
  claude: {kind: anthropic, url: %q}
models:
  vllm: {engines: [vllm], cache: {enabled: true, ttl: 1m}}
  claude: {engines: [claude], cache: {enabled: true, ttl: 1m}}
`, vllm.URL, claude.URL))
}

// TestCacheRefusalNotStored checks that an answer an engine stopped for its content keeps that
// reason in each client's format — content_filter for OpenAI clients, refusal for Anthropic's —
// and is never stored: asked again, by any client, it goes to the engine again.
func TestCacheRefusalNotStored(t *testing.T) {
	vllm := fake.NewOpenAI(fake.Script{Text: "I cannot help", Stop: "content_filter"})
	claude := fake.NewAnthropic(fake.Script{Text: "I cannot help", Stop: "refusal"})
	t.Cleanup(vllm.Close)
	t.Cleanup(claude.Close)
	base := cachedPair(t, vllm, claude)
	ctx := context.Background()
	for _, tc := range []struct {
		model  string
		engine *fake.Server
	}{{"vllm", vllm}, {"claude", claude}} {
		for _, format := range []string{"anthropic", "openai"} {
			for _, stream := range []bool{false, true} {
				name := fmt.Sprintf("%s/%s/stream=%v", tc.model, format, stream)
				before := len(tc.engine.Requests())
				for i := range 2 {
					var resp *http.Response
					var tr turn
					if format == "anthropic" {
						c := anthropicClient(base, option.WithResponseInto(&resp))
						_, tr = anthropicCall(ctx, t, &c, anthropic.MessageNewParams{Model: anthropic.Model(tc.model), MaxTokens: 50,
							Temperature: anthropic.Float(0), Messages: userText("Something forbidden")}, stream)
					} else {
						c := oai.NewClient(oaiopt.WithBaseURL(base+"/v1"), oaiopt.WithAPIKey("test-key"), oaiopt.WithMaxRetries(0),
							oaiopt.WithResponseInto(&resp))
						_, tr = openAICall(ctx, t, &c, oai.ChatCompletionNewParams{Model: tc.model, MaxTokens: oai.Int(50),
							Temperature: oai.Float(0), Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Something forbidden")}}, stream)
					}
					if tr.stop != "refusal" {
						t.Errorf("%s #%d: stop %q, want the engine's refusal", name, i, tr.stop)
					}
					if got := cacheHeaders(resp); got != "MISS miss" {
						t.Errorf("%s #%d: cache %q, want a miss", name, i, got)
					}
				}
				if n := len(tc.engine.Requests()) - before; n != 2 {
					t.Errorf("%s: %d engine requests, want 2 (a refusal is not stored)", name, n)
				}
			}
		}
	}
}

// TestCacheFieldsOutsideTheKey checks the rule that every field reaching the engine is in the
// key or the request is not cached: a field the canonical request does not carry (OpenAI's seed,
// logprobs, presence_penalty; Anthropic's thinking) makes the request bypass the cache, so it
// takes the pass-through path and the engine gets the field, every time.
func TestCacheFieldsOutsideTheKey(t *testing.T) {
	vllm := fake.NewOpenAI(fake.Script{Text: "Seeded answer"})
	claude := fake.NewAnthropic(fake.Script{Text: "Thought answer"})
	t.Cleanup(vllm.Close)
	t.Cleanup(claude.Close)
	base := cachedPair(t, vllm, claude)
	ctx := context.Background()
	for i := range 2 {
		var resp *http.Response
		c := oai.NewClient(oaiopt.WithBaseURL(base+"/v1"), oaiopt.WithAPIKey("test-key"), oaiopt.WithMaxRetries(0), oaiopt.WithResponseInto(&resp))
		if _, err := c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "vllm", Temperature: oai.Float(0), Seed: oai.Int(7),
			Logprobs: oai.Bool(true), TopLogprobs: oai.Int(2), PresencePenalty: oai.Float(0.5),
			Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Pick a number")}}); err != nil {
			t.Fatal(err)
		}
		if got := resp.Header.Get("X-Layer0-Cache"); got != "bypass" {
			t.Errorf("openai #%d: X-Layer0-Cache %q, want bypass", i, got)
		}
		body := lastBody(t, vllm)
		if body["seed"] != 7.0 || body["logprobs"] != true || body["top_logprobs"] != 2.0 || body["presence_penalty"] != 0.5 {
			t.Errorf("openai #%d: the engine got %v, want seed, logprobs, top_logprobs and presence_penalty", i, body)
		}

		ac := anthropicClient(base, option.WithResponseInto(&resp))
		if _, err := ac.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude", MaxTokens: 2048, Temperature: anthropic.Float(0),
			Thinking: anthropic.ThinkingConfigParamOfEnabled(1024), Messages: userText("Think first")}); err != nil {
			t.Fatal(err)
		}
		if got := resp.Header.Get("X-Layer0-Cache"); got != "bypass" {
			t.Errorf("anthropic #%d: X-Layer0-Cache %q, want bypass", i, got)
		}
		if body := lastBody(t, claude); body["thinking"] == nil {
			t.Errorf("anthropic #%d: the engine got %v, want thinking", i, body)
		}
	}
	if n, m := len(vllm.Requests()), len(claude.Requests()); n != 2 || m != 2 {
		t.Errorf("engine requests: openai %d, anthropic %d; want 2 each", n, m)
	}
}
