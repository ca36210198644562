package layer0_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	oai "github.com/openai/openai-go/v3"
	oaiopt "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/metrics"
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/upstream/fake"
)

// serveGateway serves cfg on a real loopback listener and returns the gateway and its base URL.
func serveGateway(t testing.TB, cfg *config.Config, opts ...layer0.Option) (*layer0.Gateway, string) {
	t.Helper()
	g, err := layer0.New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.HTTPServer(g, server.ListenOptions{ReadHeaderTimeout: 5 * time.Second})
	go srv.Serve(ln) //nolint:errcheck // ends at Close
	t.Cleanup(func() {
		srv.Close()
		g.Close()
	})
	return g, "http://" + ln.Addr().String()
}

func parseConfig(t testing.TB, text string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(text))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// metricValue reads one sample from the gateway's /metrics: the series named name whose labels
// include every pair in labels (`reason="overloaded"`). It fails the test when there is none.
func metricValue(t testing.TB, base, name string, labels ...string) float64 {
	t.Helper()
	v, ok := findMetric(t, base, name, labels...)
	if !ok {
		t.Fatalf("metric %s%v not found", name, labels)
	}
	return v
}

func findMetric(t testing.TB, base, name string, labels ...string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
next:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		for _, l := range labels {
			if !strings.Contains(line, l) {
				continue next
			}
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		return v, true
	}
	return 0, false
}

// TestGatewayExample drives examples/gateway.yaml with the official SDK and plain HTTP: alpha's
// sixth request in a minute gets 429 with retry-after and the rate-limit headers, beta on chat
// gets 403, chat is served by its fallback and counted, small serves.
func TestGatewayExample(t *testing.T) {
	cfg, err := layer0.LoadConfig("examples/gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, base := serveGateway(t, cfg)
	ctx := context.Background()
	alpha := anthropicClient(base, option.WithAPIKey("l0-demo-alpha"))
	beta := anthropicClient(base, option.WithAPIKey("l0-demo-beta"))
	params := func(model string) anthropic.MessageNewParams {
		return anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 4, Messages: userText("Hello, gateway.")}
	}

	// small is fine, for beta too, streamed or not.
	if _, err := beta.Messages.New(ctx, params("small")); err != nil {
		t.Fatalf("beta on small: %v", err)
	}
	s := beta.Messages.NewStreaming(ctx, params("small"))
	for s.Next() {
	}
	if err := s.Err(); err != nil {
		t.Fatalf("beta streaming small: %v", err)
	}

	// beta sees only the model it may use, and may not use chat.
	var seen []string
	for it := beta.Models.ListAutoPaging(ctx, anthropic.ModelListParams{}); it.Next(); {
		seen = append(seen, it.Current().ID)
	}
	if len(seen) != 1 || seen[0] != "small" {
		t.Errorf("beta's models: got %v, want [small]", seen)
	}
	if _, err := beta.Models.Get(ctx, "chat", anthropic.ModelGetParams{}); err == nil {
		t.Error("beta got model chat, want a permission error")
	}
	if _, err := beta.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{
		Model: "chat", Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
	}); err == nil {
		t.Error("beta counted tokens on chat, want a permission error")
	}
	_, err = beta.Messages.New(ctx, params("chat"))
	assertAPIError(t, err, 403, "permission_error")

	// chat: the primary answers 529, the fallback serves; the fallback is counted.
	before := metricValue(t, base, "layer0_fallback_total", `reason="overloaded"`)
	var resp *http.Response
	msg, err := alpha.Messages.New(ctx, params("chat"), option.WithResponseInto(&resp))
	if err != nil {
		t.Fatalf("alpha on chat: %v", err)
	}
	if got := resp.Header.Get("X-Layer0-Engine"); got != "fallback" {
		t.Errorf("chat served by %q, want the fallback sim", got)
	}
	// A successful answer carries the key's rate-limit state, as the Anthropic API's do.
	if got := resp.Header.Get("anthropic-ratelimit-requests-limit"); got != "5" {
		t.Errorf("anthropic-ratelimit-requests-limit on success: got %q, want 5", got)
	}
	if got := resp.Header.Get("anthropic-ratelimit-requests-remaining"); got != "4" {
		t.Errorf("anthropic-ratelimit-requests-remaining on success: got %q, want 4", got)
	}
	if resp.Header.Get("x-ratelimit-limit-requests") == "" {
		t.Error("x-ratelimit-limit-requests missing on success")
	}
	if msg.Model != "chat" || len(msg.Content) == 0 {
		t.Errorf("chat answer: model %q content %+v", msg.Model, msg.Content)
	}
	if got := metricValue(t, base, "layer0_fallback_total", `reason="overloaded"`); got != before+1 {
		t.Errorf("layer0_fallback_total{reason=overloaded}: got %v, want %v", got, before+1)
	}

	// alpha: four more requests fit its 5 per minute; the sixth is refused.
	for i := range 4 {
		if _, err := alpha.Messages.New(ctx, params("small")); err != nil {
			t.Fatalf("alpha request %d: %v", i+2, err)
		}
	}
	_, err = alpha.Messages.New(ctx, params("small"))
	assertAPIError(t, err, 429, "rate_limit_error")
	var ae *anthropic.Error
	if errors.As(err, &ae) {
		h := ae.Response.Header
		if ra, err := strconv.Atoi(h.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
			t.Errorf("retry-after: got %q, want 1..60 seconds", h.Get("Retry-After"))
		}
		for k, want := range map[string]string{
			"Anthropic-Ratelimit-Requests-Limit":     "5",
			"Anthropic-Ratelimit-Requests-Remaining": "0",
			"X-Ratelimit-Limit-Requests":             "5",
			"X-Ratelimit-Remaining-Requests":         "0",
		} {
			if got := h.Get(k); got != want {
				t.Errorf("%s: got %q, want %q", k, got, want)
			}
		}
		if _, err := time.Parse(time.RFC3339, h.Get("Anthropic-Ratelimit-Requests-Reset")); err != nil {
			t.Errorf("anthropic-ratelimit-requests-reset %q: %v", h.Get("Anthropic-Ratelimit-Requests-Reset"), err)
		}
	}
	if got := metricValue(t, base, "layer0_rate_limited_total", `key="alpha"`); got != 1 {
		t.Errorf("layer0_rate_limited_total{key=alpha}: got %v, want 1", got)
	}

	// curl's view: a Bearer token works, no key is a 401 in the Anthropic format.
	body := `{"model":"small","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`
	for _, tt := range []struct {
		auth   string
		status int
		want   string
	}{
		{"Bearer l0-demo-beta", 200, `"type":"message"`},
		{"", 401, `"type":"authentication_error"`},
		{"Bearer l0-demo-gamma", 401, `"type":"authentication_error"`},
	} {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if tt.auth != "" {
			req.Header.Set("Authorization", tt.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status || !strings.Contains(string(b), tt.want) {
			t.Errorf("auth %q: got %d %s, want %d with %s", tt.auth, resp.StatusCode, b, tt.status, tt.want)
		}
	}
}

// faultConfig has one model per way an engine fails, each falling back to the healthy model
// "backup". Ejection is off so every request meets its failure.
const faultConfig = `
engines:
  ok: {kind: sim}
  e429: {kind: sim, sim: {fail: {status: 429, message: "slow down"}}}
  e529: {kind: sim, sim: {fail: {status: 529}}}
  e500: {kind: sim, sim: {fail: {status: 500}}}
  oom: {kind: sim, sim: {fail: {status: 500, message: "CUDA out of memory. Tried to allocate 20.00 MiB"}}}
  hang: {kind: sim, timeouts: {first_byte: 150ms}, sim: {fail: {hang: true}}}
  mid: {kind: sim, sim: {fail: {after_tokens: 3, message: "engine fell over"}}}
  small: {kind: sim, sim: {context_window: 30}}
models:
  backup: {engines: [ok]}
  p429: {engines: [e429], fallback: [backup]}
  p529: {engines: [e529], fallback: [backup]}
  p500: {engines: [e500], fallback: [backup]}
  poom: {engines: [oom], fallback: [backup]}
  phang: {engines: [hang], fallback: [backup]}
  pmid: {engines: [mid], fallback: [backup]}
  pctx: {engines: [small], fallback: [backup], context_window: 1000}
routing:
  ejection: {consecutive_failures: -1}
  breaker: {failure_ratio: 2}
`

// TestGatewayFaults sends each failure through real listeners with the official SDK, streamed
// and not: which replica served (X-Layer0-Engine), the fallbacks counted by reason, and for a
// stream broken after content, one message_start, the deltas sent once, and the error event.
func TestGatewayFaults(t *testing.T) {
	_, base := serveGateway(t, parseConfig(t, faultConfig))
	c := anthropicClient(base)
	long := strings.Repeat("This prompt is longer than the small engine's window. ", 4)
	tests := []struct {
		model, prompt string
		reason        string // the fallback reason counted; "" for none
		engine        string // the replica that serves
	}{
		{"p429", "hi", "rate_limit", "ok"},
		{"p529", "hi", "overloaded", "ok"},
		{"p500", "hi", "server_error", "ok"},
		{"poom", "hi", "oom", "ok"},
		{"phang", "hi", "timeout", "ok"},
		{"pctx", long, "context_length", "ok"},
		{"pctx", "hi", "", "small"},
	}
	for _, tt := range tests {
		for _, stream := range []bool{false, true} {
			t.Run(tt.model+"/stream="+strconv.FormatBool(stream), func(t *testing.T) {
				var before float64
				if tt.reason != "" {
					before = metricValue(t, base, "layer0_fallback_total", `reason="`+tt.reason+`"`)
				}
				p := anthropic.MessageNewParams{Model: anthropic.Model(tt.model), MaxTokens: 8, Messages: userText(tt.prompt)}
				var resp *http.Response
				var text string
				if stream {
					s := c.Messages.NewStreaming(context.Background(), p, option.WithResponseInto(&resp))
					var acc anthropic.Message
					starts := 0
					for s.Next() {
						ev := s.Current()
						if ev.Type == "message_start" {
							starts++
						}
						if err := acc.Accumulate(ev); err != nil {
							t.Fatal(err)
						}
					}
					if err := s.Err(); err != nil {
						t.Fatal(err)
					}
					if starts != 1 || len(acc.Content) != 1 {
						t.Fatalf("got %d message_start and content %+v, want one start and one block", starts, acc.Content)
					}
					text = acc.Content[0].Text
				} else {
					msg, err := c.Messages.New(context.Background(), p, option.WithResponseInto(&resp))
					if err != nil {
						t.Fatal(err)
					}
					text = msg.Content[0].Text
				}
				if got := resp.Header.Get("X-Layer0-Engine"); got != tt.engine {
					t.Errorf("served by %q, want %q", got, tt.engine)
				}
				if text == "" {
					t.Error("empty answer")
				}
				if tt.reason != "" {
					if got := metricValue(t, base, "layer0_fallback_total", `reason="`+tt.reason+`"`); got != before+1 {
						t.Errorf("layer0_fallback_total{reason=%q}: got %v, want %v", tt.reason, got, before+1)
					}
				}
			})
		}
	}

	// Broken after content, streamed: no retry; the deltas arrive once, then the error event.
	t.Run("mid-stream", func(t *testing.T) {
		var resp *http.Response
		s := c.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{
			Model: "pmid", MaxTokens: 50, Messages: userText("go on then"),
		}, option.WithResponseInto(&resp))
		counts := map[string]int{}
		var text strings.Builder
		for s.Next() {
			ev := s.Current()
			counts[string(ev.Type)]++
			if ev.Type == "content_block_delta" {
				text.WriteString(ev.Delta.Text)
			}
		}
		if err := s.Err(); err == nil || !strings.Contains(err.Error(), "engine fell over") {
			t.Errorf("stream error: got %v, want the engine's failure", err)
		}
		if counts["message_start"] != 1 || counts["content_block_delta"] != 3 {
			t.Errorf("events: got %v, want one message_start and three deltas", counts)
		}
		if got := resp.Header.Get("X-Layer0-Engine"); got != "mid" {
			t.Errorf("served by %q, want mid", got)
		}
		// The same prompt on the healthy sim starts with the same three tokens: nothing was
		// lost or repeated.
		full, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{
			Model: "backup", MaxTokens: 3, Messages: userText("go on then")})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := text.String(), full.Content[0].Text; got != want {
			t.Errorf("streamed before the break: got %q, want %q", got, want)
		}
	})

	// Broken after content, not streamed: nothing reached the client, so it falls back.
	t.Run("mid-stream not streamed", func(t *testing.T) {
		before := metricValue(t, base, "layer0_fallback_total", `reason="server_error"`)
		var resp *http.Response
		if _, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{
			Model: "pmid", MaxTokens: 50, Messages: userText("go on then"),
		}, option.WithResponseInto(&resp)); err != nil {
			t.Fatal(err)
		}
		if got := resp.Header.Get("X-Layer0-Engine"); got != "ok" {
			t.Errorf("served by %q, want ok", got)
		}
		if got := metricValue(t, base, "layer0_fallback_total", `reason="server_error"`); got != before+1 {
			t.Errorf("fallbacks: got %v, want %v", got, before+1)
		}
	})
}

// TestGatewayHTTPEngineErrorBeforeContent uses real HTTP engines that answer 200 and then an
// error before any content — vLLM's role chunk then an error chunk, the Messages API's
// message_start, content_block_start and ping then an overloaded error event; for a request that
// is not streamed, an error object with the 200 — for every pair of client and engine format,
// translated and passed through, streamed and not: the request falls back, the client sees one
// clean answer from the fallback (one prelude, no error, its own model name), and the fallback
// is counted. An error after content is not retried: the client gets the content once, then
// its format's error event.
func TestGatewayHTTPEngineErrorBeforeContent(t *testing.T) {
	vllm := fake.NewOpenAI(fake.Script{ErrorAfter: 1})
	defer vllm.Close()
	claude := fake.NewAnthropic(fake.Script{ErrorAfter: 3})
	defer claude.Close()
	_, base := serveGateway(t, parseConfig(t, `
engines:
  vllm: {kind: openai, url: "`+vllm.URL+`"}
  claude: {kind: anthropic, url: "`+claude.URL+`"}
  ok: {kind: sim}
models:
  m: {engines: [vllm], fallback: [backup]}
  a: {engines: [claude], fallback: [backup]}
  backup: {engines: [ok]}
routing:
  ejection: {consecutive_failures: -1}
  breaker: {failure_ratio: 2}
`))
	post := func(t *testing.T, path, model string, stream bool) (*http.Response, string) {
		t.Helper()
		body := `{"model":"` + model + `","max_tokens":8,"stream":` + strconv.FormatBool(stream) +
			`,"messages":[{"role":"user","content":"hello"}]}`
		req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}
	const (
		chat     = "/v1/chat/completions"
		messages = "/v1/messages"
	)
	tests := []struct {
		name   string
		path   string
		model  string
		up     *fake.Server
		reason string
	}{
		{"anthropic client, openai engine (translated)", messages, "m", vllm, "server_error"},
		{"openai client, openai engine (passed through)", chat, "m", vllm, "server_error"},
		{"anthropic client, anthropic engine (passed through)", messages, "a", claude, "overloaded"},
		{"openai client, anthropic engine (translated)", chat, "a", claude, "overloaded"},
	}
	for _, tt := range tests {
		for _, stream := range []bool{true, false} {
			t.Run(tt.name+"/stream="+strconv.FormatBool(stream), func(t *testing.T) {
				calls := len(tt.up.Requests())
				before, _ := findMetric(t, base, "layer0_fallback_total", `reason="`+tt.reason+`"`)
				resp, body := post(t, tt.path, tt.model, stream)
				if resp.StatusCode != 200 || resp.Header.Get("X-Layer0-Engine") != "ok" {
					t.Fatalf("got %d from %q, want 200 from the fallback ok:\n%s", resp.StatusCode, resp.Header.Get("X-Layer0-Engine"), body)
				}
				if strings.Contains(body, `"error"`) || !strings.Contains(body, `"model":"`+tt.model+`"`) {
					t.Errorf("got an error or another model name in the answer:\n%s", body)
				}
				switch {
				case stream && tt.path == chat:
					if n := strings.Count(body, `"role":"assistant"`); n != 1 || !strings.HasSuffix(body, "data: [DONE]\n\n") {
						t.Errorf("got %d role chunks, want one clean stream:\n%s", n, body)
					}
				case stream:
					if n := strings.Count(body, "event: message_start\n"); n != 1 || !strings.HasSuffix(body, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n") {
						t.Errorf("got %d message_start, want one clean stream:\n%s", n, body)
					}
				}
				if got := len(tt.up.Requests()) - calls; got != 1 {
					t.Errorf("failing engine calls: got %d, want 1", got)
				}
				if got := metricValue(t, base, "layer0_fallback_total", `reason="`+tt.reason+`"`); got != before+1 {
					t.Errorf("layer0_fallback_total{reason=%q}: got %v, want %v", tt.reason, got, before+1)
				}
			})
		}
	}

	// After content the attempt is committed: the content arrives once, then the error event
	// in the client's format, from the engine that failed; nothing falls back.
	vllm.SetScript(fake.Script{ErrorAfter: 3})   // the role chunk and two words
	claude.SetScript(fake.Script{ErrorAfter: 5}) // the prelude and two words
	for _, tt := range []struct {
		name, path, model, engine, want, reason string
	}{
		{"openai", chat, "m", "vllm", `data: {"error":`, "server_error"},
		{"anthropic", messages, "a", "claude", "event: error\n", "overloaded"},
	} {
		t.Run("after content/"+tt.name, func(t *testing.T) {
			before, _ := findMetric(t, base, "layer0_fallback_total", `reason="`+tt.reason+`"`)
			resp, body := post(t, tt.path, tt.model, true)
			if resp.StatusCode != 200 || resp.Header.Get("X-Layer0-Engine") != tt.engine {
				t.Fatalf("got %d from %q, want 200 from %s", resp.StatusCode, resp.Header.Get("X-Layer0-Engine"), tt.engine)
			}
			i, hello := strings.Index(body, tt.want), strings.Index(body, `"Hello"`)
			if hello < 0 || i < hello || strings.Count(body, "Hello") != 1 || !strings.Contains(body, `" from"`) ||
				strings.Contains(body, "[DONE]") || strings.Contains(body, "message_stop") {
				t.Errorf("got a stream without the content once then the error event:\n%s", body)
			}
			if after, _ := findMetric(t, base, "layer0_fallback_total", `reason="`+tt.reason+`"`); after != before {
				t.Errorf("layer0_fallback_total{reason=%q}: got %v, want %v (no fallback)", tt.reason, after, before)
			}
		})
	}
}

// TestGatewayPassThroughModelName checks the promise of docs/engines.md on the pass-through
// path: the client sees its own model id in every answer, when the engines report another name
// (a dated id) and pretty-print their JSON as the hosted OpenAI API does.
func TestGatewayPassThroughModelName(t *testing.T) {
	oaiUp := fake.NewOpenAI(fake.Script{Model: "gpt-4o-2024-08-06", Pretty: true})
	defer oaiUp.Close()
	antUp := fake.NewAnthropic(fake.Script{Model: "claude-sonnet-4-5-20250929", Pretty: true})
	defer antUp.Close()
	_, base := serveGateway(t, parseConfig(t, `
engines:
  gpt: {kind: openai, url: "`+oaiUp.URL+`"}
  claude: {kind: anthropic, url: "`+antUp.URL+`"}
models:
  gpt-4o: {engines: [gpt]}
  sonnet: {engines: [claude], upstream_model: claude-sonnet-4-5}
`))
	ctx := context.Background()
	oc := oai.NewClient(oaiopt.WithBaseURL(base+"/v1"), oaiopt.WithAPIKey("k"), oaiopt.WithMaxRetries(0))
	op := oai.ChatCompletionNewParams{Model: "gpt-4o", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}}
	cc, err := oc.Chat.Completions.New(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	models := []string{cc.Model}
	st := oc.Chat.Completions.NewStreaming(ctx, op)
	for st.Next() {
		models = append(models, st.Current().Model)
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	for i, m := range models {
		if m != "gpt-4o" {
			t.Errorf("OpenAI answer %d: got model %q, want gpt-4o", i, m)
		}
	}

	ac := anthropicClient(base)
	ap := anthropic.MessageNewParams{Model: "sonnet", MaxTokens: 8, Messages: userText("hi")}
	msg, err := ac.Messages.New(ctx, ap)
	if err != nil {
		t.Fatal(err)
	}
	var acc anthropic.Message
	as := ac.Messages.NewStreaming(ctx, ap)
	for as.Next() {
		if err := acc.Accumulate(as.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := as.Err(); err != nil {
		t.Fatal(err)
	}
	if msg.Model != "sonnet" || acc.Model != "sonnet" {
		t.Errorf("Anthropic answers: got models %q and %q (streamed), want sonnet", msg.Model, acc.Model)
	}
}

const reloadConfigA = `
keys:
  - {name: a, hash: %s, limits: {requests_per_minute: 100000}}
engines:
  s1: {kind: sim}
  s2: {kind: sim}
models:
  m: {engines: [s1, s2]}
  n: {engines: [s2]}
`

const reloadConfigB = `
keys:
  - {name: a, hash: %s, limits: {requests_per_minute: 100000, concurrent: 1000}}
  - {name: b, hash: 0000000000000000000000000000000000000000000000000000000000000001}
engines:
  s1: {kind: sim}
  s2: {kind: sim, sim: {mode: echo}}
  s3: {kind: sim}
models:
  m: {engines: [s1, s3]}
  n: {engines: [s2], upstream_model: other}
aliases: {latest: m}
`

// TestGatewayReloadUnderLoad reloads the configuration 100 times, alternating two versions,
// while clients keep sending requests (streamed and not, to models both versions serve): not
// one request fails.
func TestGatewayReloadUnderLoad(t *testing.T) {
	hash := authHash("l0-reload-key")
	cfgs := [2]*config.Config{parseConfig(t, fmt.Sprintf(reloadConfigA, hash)), parseConfig(t, fmt.Sprintf(reloadConfigB, hash))}
	g, base := serveGateway(t, cfgs[0])

	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	deadline := time.Now().Add(60 * time.Second)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := &http.Client{Timeout: 10 * time.Second}
			for i := 0; time.Now().Before(deadline); i++ {
				select {
				case <-stop:
					return
				default:
				}
				model := [2]string{"m", "n"}[(w+i)%2]
				stream := i%3 == 0
				body := `{"model":"` + model + `","max_tokens":6,"stream":` + strconv.FormatBool(stream) +
					`,"messages":[{"role":"user","content":"reload ` + strconv.Itoa(i) + `"}]}`
				req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(body))
				req.Header.Set("X-Api-Key", "l0-reload-key")
				resp, err := hc.Do(req)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				good := resp.StatusCode == 200 && (!stream || bytes.Contains(b, []byte("event: message_stop")))
				if !good {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, strconv.Itoa(resp.StatusCode)+" "+string(b))
					continue
				}
				ok.Add(1)
			}
		}()
	}
	for i := range 100 {
		if err := g.Reload(cfgs[(i+1)%2]); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Errorf("%d of %d requests failed during reloads; first: %v", n, n+ok.Load(), firstErr.Load())
	}
	if ok.Load() < 100 {
		t.Errorf("only %d requests completed during 100 reloads", ok.Load())
	}
}

// TestGatewayReloadKeepsState checks what survives a reload: a key's spent rate while its limit
// is unchanged (and not once it changes), and an ejected replica whose engine is unchanged. A
// configuration the gateway cannot serve is refused and the old one keeps serving.
func TestGatewayReloadKeepsState(t *testing.T) {
	const text = `
keys:
  - {name: a, hash: %s, limits: {requests_per_minute: %d}}
engines:
  bad: {kind: sim, sim: {fail: {status: 529}}}
  good: {kind: sim}
models:
  m: {engines: [good]}
  p: {engines: [bad], fallback: [m]}
  %s: {engines: [good]}
routing: {ejection: {consecutive_failures: 2}}
`
	hash := authHash("l0-state")
	g, base := serveGateway(t, parseConfig(t, fmt.Sprintf(text, hash, 3, "x")))
	c := anthropicClient(base, option.WithAPIKey("l0-state"))
	ctx := context.Background()
	p := func(model string) anthropic.MessageNewParams {
		return anthropic.MessageNewParams{Model: anthropic.Model(model), MaxTokens: 2, Messages: userText("hi")}
	}
	// Two requests to p eject the bad primary; a third would be one too many for the limit.
	for range 2 {
		if _, err := c.Messages.New(ctx, p("p")); err != nil {
			t.Fatal(err)
		}
	}
	if got := metricValue(t, base, "layer0_engine_ejected", `engine="bad"`); got != 1 {
		t.Fatalf("bad ejected: got %v, want 1", got)
	}

	// An unrelated change: the limit's state and the ejection carry over.
	if err := g.Reload(parseConfig(t, fmt.Sprintf(text, hash, 3, "y"))); err != nil {
		t.Fatal(err)
	}
	if got := metricValue(t, base, "layer0_engine_ejected", `engine="bad"`); got != 1 {
		t.Errorf("after reload, bad ejected: got %v, want 1 (state kept)", got)
	}
	before := metricValue(t, base, "layer0_fallback_total", `reason="unavailable"`)
	if _, err := c.Messages.New(ctx, p("p")); err != nil { // the third of 3
		t.Fatal(err)
	}
	if got := metricValue(t, base, "layer0_fallback_total", `reason="unavailable"`); got != before+1 {
		t.Errorf("request to the ejected primary: unavailable fallbacks %v, want %v", got, before+1)
	}
	_, err := c.Messages.New(ctx, p("m"))
	assertAPIError(t, err, 429, "rate_limit_error")

	// The limit changes: a fresh allowance.
	if err := g.Reload(parseConfig(t, fmt.Sprintf(text, hash, 4, "y"))); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Messages.New(ctx, p("m")); err != nil {
		t.Errorf("after the limit changed: got %v, want served", err)
	}

	// No keys on a non-loopback address: refused, the running configuration keeps serving.
	bad := parseConfig(t, "server: {addr: '0.0.0.0:8080'}\n")
	if err := g.Reload(bad); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Errorf("reload without keys on 0.0.0.0: got %v, want refused", err)
	}
	if _, err := c.Messages.New(ctx, p("y")); err != nil {
		t.Errorf("after a refused reload: got %v, want the old configuration serving", err)
	}
}

// TestGatewayStartWithoutKeys checks the rule for serving without auth.
func TestGatewayStartWithoutKeys(t *testing.T) {
	tests := []struct {
		addr    string
		keys    bool
		wantErr bool
	}{
		{"127.0.0.1:8080", false, false},
		{"[::1]:8080", false, false},
		{"localhost:8080", false, false},
		{"0.0.0.0:8080", false, true},
		{":8080", false, true},
		{"10.1.2.3:8080", false, true},
		{"0.0.0.0:8080", true, false},
	}
	for _, tt := range tests {
		text := "server: {addr: '" + tt.addr + "'}\n"
		if tt.keys {
			text += "keys: [{name: k, hash: " + authHash("l0-x") + "}]\n"
		}
		g, err := layer0.New(parseConfig(t, text))
		if (err != nil) != tt.wantErr {
			t.Errorf("%s keys=%v: got %v, want error %v", tt.addr, tt.keys, err, tt.wantErr)
		}
		if err == nil {
			if g.Authless() == tt.keys {
				t.Errorf("%s keys=%v: Authless() = %v", tt.addr, tt.keys, g.Authless())
			}
			g.Close()
		}
	}
}

func TestGatewayNegotiate(t *testing.T) {
	_, base := serveGateway(t, parseConfig(t, `
keys:
  - {name: any, hash: `+authHash("l0-any")+`}
  - {name: limited, hash: `+authHash("l0-limited")+`, models: [local]}
engines:
  sim: {kind: sim}
  vllm: {kind: openai, url: "http://10.9.8.7:8000"}
models:
  local: {engines: [sim]}
  remote: {engines: [vllm]}
`))
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	tests := []struct {
		method, query, body, key string
		status                   int
		location                 string
	}{
		{"GET", "?model=local", "", "l0-any", 302, "/v1/messages"},
		{"GET", "?model=remote", "", "l0-any", 302, "http://10.9.8.7:8000"},
		{"POST", "", `{"model":"remote","max_tokens":1,"messages":[]}`, "l0-any", 302, "http://10.9.8.7:8000"},
		{"GET", "?model=remote", "", "", 401, ""},
		{"GET", "?model=remote", "", "l0-limited", 403, ""},
		{"GET", "?model=nope", "", "l0-any", 404, ""},
		{"GET", "", "", "l0-any", 400, ""},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, base+"/v1/layer/negotiate"+tt.query, strings.NewReader(tt.body))
		if tt.key != "" {
			req.Header.Set("X-Api-Key", tt.key)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("%s %s: got %d, want %d", tt.method, tt.query, resp.StatusCode, tt.status)
			continue
		}
		if tt.status != 302 {
			continue
		}
		if got := resp.Header.Get("Location"); got != tt.location {
			t.Errorf("%s %s: location %q, want %q", tt.method, tt.query, got, tt.location)
		}
		if got := resp.Header.Get("Deprecation"); got != "true" {
			t.Errorf("deprecation: got %q, want true", got)
		}
		if _, err := http.ParseTime(resp.Header.Get("Sunset")); err != nil {
			t.Errorf("sunset %q is not an HTTP date: %v", resp.Header.Get("Sunset"), err)
		}
	}
}

// TestGatewayUtilizationAndHealth checks the background loop: an engine whose vLLM metrics say
// it is saturated is skipped while another replica can serve, one whose health checks fail is
// taken out, and an embedded sim's load is served in the vLLM format for others to scrape.
func TestGatewayUtilizationAndHealth(t *testing.T) {
	busy := fake.NewOpenAI(fake.Script{})
	defer busy.Close()
	busyMetrics := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			w.Write(metrics.AppendVLLM(nil, "m", metrics.Load{Running: 12, KVCacheUsage: 0.97})) //nolint:errcheck
			return
		}
		busy.Config.Handler.ServeHTTP(w, r)
	}))
	defer busyMetrics.Close()
	sick := fake.NewOpenAI(fake.Script{})
	defer sick.Close()
	sickHealth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		sick.Config.Handler.ServeHTTP(w, r)
	}))
	defer sickHealth.Close()

	_, base := serveGateway(t, parseConfig(t, `
engines:
  busy: {kind: openai, url: "`+busyMetrics.URL+`", metrics_path: /metrics}
  sick: {kind: openai, url: "`+sickHealth.URL+`", health_path: /health}
  idle: {kind: sim}
models:
  m: {engines: [busy, sick, idle]}
routing:
  picker: round_robin
  utilization_interval: 20ms
  health: {interval: 20ms, unhealthy_threshold: 2}
`))
	waitFor(t, "busy's utilisation scraped and sick marked down", func() bool {
		u, _ := findMetric(t, base, "layer0_engine_utilization", `engine="busy"`)
		up, _ := findMetric(t, base, "layer0_engine_up", `engine="sick"`)
		return u == 0.97 && up == 0
	})
	c := anthropicClient(base)
	for i := range 6 {
		var resp *http.Response
		if _, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "m", MaxTokens: 3,
			Messages: userText("hi")}, option.WithResponseInto(&resp)); err != nil {
			t.Fatal(err)
		}
		if got := resp.Header.Get("X-Layer0-Engine"); got != "idle" {
			t.Errorf("request %d served by %q, want idle", i, got)
		}
	}
	if n := len(busy.Requests()) + len(sick.Requests()); n != 0 {
		t.Errorf("busy and sick engines got %d requests, want 0", n)
	}

	// The sim's load, as another layer0 or a test would scrape it.
	resp, err := http.Get(base + "/metrics/engines/idle")
	if err != nil {
		t.Fatal(err)
	}
	l, err := metrics.ParseVLLM(resp.Body)
	resp.Body.Close()
	if err != nil || l.Utilization() != 0 {
		t.Errorf("idle sim's load: got %+v %v, want parsed and idle", l, err)
	}
}

// waitFor polls cond every 10ms for up to 5s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestGatewaySecretsNotLogged captures the process log and the access log of a gateway that
// sees valid, wrong and missing keys, an engine that echoes its credential in an error, and a
// reload — and checks that no API key and no engine credential appears in either.
func TestGatewaySecretsNotLogged(t *testing.T) {
	const (
		alphaKey  = "l0-secret-alpha-5Yx9Qm2"
		wrongKey  = "l0-wrong-key-Zz81Kq"
		engineKey = "sk-engine-credential-3fJ8Lw"
	)
	t.Setenv("L0_TEST_ENGINE_KEY", engineKey)
	vendor := fake.NewOpenAI(fake.Script{Key: "a-different-credential"}) // answers 401 echoing what it got
	defer vendor.Close()
	var proc, access syncBuffer
	logger := slog.New(slog.NewJSONHandler(&proc, &slog.HandlerOptions{Level: slog.LevelDebug}))
	text := `
keys:
  - {name: alpha, hash: ` + authHash(alphaKey) + `}
engines:
  sim: {kind: sim}
  vendor: {kind: openai, url: "` + vendor.URL + `", api_key_env: L0_TEST_ENGINE_KEY}
models:
  sim: {engines: [sim]}
  vendor: {engines: [vendor], fallback: [sim]}
  vendor-only: {engines: [vendor]}
log: {level: debug}
`
	g, base := serveGateway(t, parseConfig(t, text), layer0.WithLogger(logger), layer0.WithAccessLog(&access))
	ctx := context.Background()
	good := anthropicClient(base, option.WithAPIKey(alphaKey))
	if _, err := good.Messages.New(ctx, anthropic.MessageNewParams{Model: "sim", MaxTokens: 3, Messages: userText("hi")}); err != nil {
		t.Fatal(err)
	}
	_, err := good.Messages.New(ctx, anthropic.MessageNewParams{Model: "vendor-only", MaxTokens: 3, Messages: userText("hi")})
	if err == nil {
		t.Fatal("the engine refusing its credential: got success")
	}
	if _, err := good.Messages.New(ctx, anthropic.MessageNewParams{Model: "vendor", MaxTokens: 3, Messages: userText("hi")}); err != nil {
		t.Fatal(err)
	}
	wrong := anthropicClient(base, option.WithAPIKey(wrongKey))
	_, err = wrong.Messages.New(ctx, anthropic.MessageNewParams{Model: "sim", MaxTokens: 3, Messages: userText("hi")})
	assertAPIError(t, err, 401, "authentication_error")
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+wrongKey)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	if err := g.Reload(parseConfig(t, text)); err != nil {
		t.Fatal(err)
	}
	g.Close() // writes the queued access log records
	if len(vendor.Requests()) == 0 {
		t.Fatal("the vendor engine was never called")
	}

	logs := proc.String() + access.String()
	if !strings.Contains(logs, `"key":"alpha"`) {
		t.Errorf("the access log does not name the key (want \"key\":\"alpha\"):\n%s", logs)
	}
	for _, secret := range []string{alphaKey, wrongKey, engineKey} {
		if strings.Contains(logs, secret) {
			t.Errorf("the logs contain the secret %q:\n%s", secret, logs)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the loggers' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestGatewayMetrics checks the per-request metrics written from the record.
func TestGatewayMetrics(t *testing.T) {
	_, base := serveGateway(t, parseConfig(t, testConfig))
	c := anthropicClient(base)
	for range 3 {
		if _, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "sim", MaxTokens: 5,
			Messages: userText("count me")}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "e400", MaxTokens: 5, Messages: userText("x")})
	assertAPIError(t, err, 400, "invalid_request_error")
	for _, m := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"layer0_requests_total", []string{`model="sim"`, `outcome="ok"`, `format="anthropic"`}, 3},
		{"layer0_requests_total", []string{`model="e400"`, `outcome="invalid"`}, 1},
		{"layer0_tokens_total", []string{`model="sim"`, `kind="output"`}, 15},
		{"layer0_request_duration_seconds_count", []string{`model="sim"`}, 3},
		{"layer0_time_to_first_token_seconds_count", []string{`model="sim"`}, 3},
		{"layer0_overhead_seconds_count", nil, 4},
		{"layer0_engine_up", []string{`engine="sim"`}, 1},
	} {
		if got := metricValue(t, base, m.name, m.labels...); got != m.want {
			t.Errorf("%s%v: got %v, want %v", m.name, m.labels, got, m.want)
		}
	}
}

func authHash(key string) string { return auth.HashHex(key) }

// TestGatewayOpenAIClients checks that auth and limits answer OpenAI clients in OpenAI's own
// error format, with OpenAI's rate-limit headers.
func TestGatewayOpenAIClients(t *testing.T) {
	_, base := serveGateway(t, parseConfig(t, `
keys:
  - {name: alpha, hash: `+authHash("l0-oai-alpha")+`, limits: {requests_per_minute: 1}}
  - {name: beta, hash: `+authHash("l0-oai-beta")+`, models: [small]}
engines:
  sim: {kind: sim}
models:
  small: {engines: [sim]}
  chat: {engines: [sim]}
`))
	ctx := context.Background()
	call := func(key, model string) (*oai.Error, error) {
		c := oai.NewClient(oaiopt.WithBaseURL(base+"/v1"), oaiopt.WithAPIKey(key), oaiopt.WithMaxRetries(0))
		_, err := c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: shared.ChatModel(model), MaxTokens: oai.Int(3),
			Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}})
		var e *oai.Error
		errors.As(err, &e)
		return e, err
	}
	if _, err := call("l0-oai-alpha", "chat"); err != nil {
		t.Fatalf("alpha's first request: %v", err)
	}
	for _, tt := range []struct {
		key, model string
		status     int
	}{
		{"l0-oai-nobody", "chat", 401},
		{"l0-oai-beta", "chat", 403},
		{"l0-oai-alpha", "chat", 429},
	} {
		e, err := call(tt.key, tt.model)
		if e == nil {
			t.Errorf("%s on %s: got %v, want an OpenAI error %d", tt.key, tt.model, err, tt.status)
			continue
		}
		if e.StatusCode != tt.status || e.Message == "" || strings.Contains(e.Message, tt.key) {
			t.Errorf("%s on %s: got %d %q, want %d with a message that does not echo the key", tt.key, tt.model,
				e.StatusCode, e.Message, tt.status)
		}
		if tt.status == 429 {
			h := e.Response.Header
			if h.Get("X-Ratelimit-Limit-Requests") != "1" || h.Get("X-Ratelimit-Remaining-Requests") != "0" ||
				h.Get("X-Ratelimit-Reset-Requests") == "" || h.Get("Retry-After") == "" {
				t.Errorf("429 headers: got %v, want OpenAI's x-ratelimit-* and retry-after", h)
			}
		}
	}

	// The models list without a key: a 401 in OpenAI's shape (no anthropic-version header).
	resp, err := http.Get(base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 || !strings.HasPrefix(string(b), `{"error":{`) {
		t.Errorf("models without a key: got %d %s, want 401 in OpenAI's error shape", resp.StatusCode, b)
	}
}

// TestGatewayDo checks the in-process path: the application is trusted whatever keys exist, and
// a collected answer moves to the fallback even after the primary broke mid-answer.
func TestGatewayDo(t *testing.T) {
	g, err := layer0.New(parseConfig(t, `
keys: [{name: k, hash: `+authHash("l0-do")+`}]
engines:
  mid: {kind: sim, sim: {fail: {after_tokens: 2}}}
  ok: {kind: sim}
models:
  m: {engines: [mid], fallback: [backup]}
  backup: {engines: [ok]}
`))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	req := &layer0.Request{Model: "m", MaxTokens: 8, Messages: []layer0.Message{{Content: []layer0.Block{{Text: "in process"}}}}}
	var c layer0.Collector
	if err := g.Do(context.Background(), req, &c); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.Response.ID, "msg_") || len(c.Response.Content) != 1 || c.Response.Usage.OutputTokens != 8 {
		t.Errorf("got %+v, want the fallback's whole answer with a msg_ id", c.Response)
	}
}
