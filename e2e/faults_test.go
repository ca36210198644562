package e2e

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	oai "github.com/openai/openai-go/v3"
	oaiopt "github.com/openai/openai-go/v3/option"

	"github.com/layer0ai/layer0/internal/upstream/fake"
)

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
