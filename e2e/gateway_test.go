package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
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
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/upstream/fake"
)

// serveGateway serves cfg on a real loopback listener, with the lean HTTP/1.1 server, and
// returns the gateway and its base URL.
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
	// The lean HTTP/1.1 server here, net/http's (the default) where `layer0 serve` runs and in
	// the listener's protections, which run with both: the SDK tests drive both servers.
	srv := server.HTTPServer(g, server.ListenOptions{ReadHeaderTimeout: 30 * time.Second, // generous: a loaded CI machine starves clients
		HTTP1: server.HTTP1Lean})
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
	v, ok, err := tryMetric(base, name, labels...)
	if err != nil {
		t.Fatal(err)
	}
	return v, ok
}

// tryMetric is findMetric for a poll that may meet a transport error (a gateway under test with
// a short write timeout, on a busy machine) and tries again.
func tryMetric(base, name string, labels ...string) (float64, bool, error) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return 0, false, err
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
			return 0, false, fmt.Errorf("metric line %q: %w", line, err)
		}
		return v, true, nil
	}
	return 0, false, nil
}

// TestGatewayExample drives examples/gateway.yaml with the official SDK and plain HTTP: alpha's
// 21st request in a minute gets 429 with retry-after and the rate-limit headers, beta on chat
// gets 403, chat is served by its fallback and counted, small serves.
func TestGatewayExample(t *testing.T) {
	cfg, err := layer0.LoadConfig("../examples/gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The clock stands still: alpha's 20 a minute refill one every 3s, which a slow run
	// (the race detector, a busy machine) would otherwise see as a 21st request allowed.
	start := time.Now()
	_, base := serveGateway(t, cfg, layer0.WithClock(func() time.Time { return start }))
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
	if got := resp.Header.Get("anthropic-ratelimit-requests-limit"); got != "20" {
		t.Errorf("anthropic-ratelimit-requests-limit on success: got %q, want 20", got)
	}
	if got := resp.Header.Get("anthropic-ratelimit-requests-remaining"); got != "19" {
		t.Errorf("anthropic-ratelimit-requests-remaining on success: got %q, want 19", got)
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

	// alpha: 19 more requests fit its 20 per minute; the 21st is refused.
	for i := range 19 {
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
			"Anthropic-Ratelimit-Requests-Limit":     "20",
			"Anthropic-Ratelimit-Requests-Remaining": "0",
			"X-Ratelimit-Limit-Requests":             "20",
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

// TestGatewayPassThroughContentType checks the headers the real server sends on the pass-through
// path, for both formats, whole and streamed: the engine's bytes come through unchanged, the
// headers are layer0's (the engine's own Content-Type never decides them).
func TestGatewayPassThroughContentType(t *testing.T) {
	oaiUp := fake.NewOpenAI(fake.Script{})
	defer oaiUp.Close()
	antUp := fake.NewAnthropic(fake.Script{})
	defer antUp.Close()
	_, base := serveGateway(t, parseConfig(t, `
engines:
  gpt: {kind: openai, url: "`+oaiUp.URL+`"}
  claude: {kind: anthropic, url: "`+antUp.URL+`"}
models:
  gpt-4o: {engines: [gpt]}
  sonnet: {engines: [claude]}
`))
	for _, tc := range []struct {
		path, body, wantType string
		stream               bool
	}{
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, "application/json", false},
		{"/v1/chat/completions", `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`, "text/event-stream; charset=utf-8", true},
		{"/v1/messages", `{"model":"sonnet","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, "application/json", false},
		{"/v1/messages", `{"model":"sonnet","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, "text/event-stream; charset=utf-8", true},
	} {
		req, _ := http.NewRequest(http.MethodPost, base+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s stream=%v: %d %s", tc.path, tc.stream, resp.StatusCode, body)
		}
		if got := resp.Header.Get("Content-Type"); got != tc.wantType {
			t.Errorf("%s stream=%v: Content-Type %q, want %q", tc.path, tc.stream, got, tc.wantType)
		}
		if tc.stream {
			if resp.Header.Get("Cache-Control") != "no-cache" || resp.ContentLength != -1 {
				t.Errorf("%s: a stream with Cache-Control %q and length %d", tc.path, resp.Header.Get("Cache-Control"), resp.ContentLength)
			}
		} else if resp.ContentLength != int64(len(body)) {
			t.Errorf("%s: a whole answer of %d bytes sent with Content-Length %d", tc.path, len(body), resp.ContentLength)
		}
		if resp.Header.Get("X-Request-Id") == "" || resp.Header.Get("X-Response-Time") == "" {
			t.Errorf("%s: layer0's headers missing: %v", tc.path, resp.Header)
		}
	}
}

// A chain of layer0s still tells the client its answer came from a simulator: the front's
// engine is another layer0 (and an OpenAI-kind engine on another layer0) serving its sim.
func TestGatewaySimulatedThroughAChain(t *testing.T) {
	_, peer := serveGateway(t, parseConfig(t, `
engines: {sim: {kind: sim}}
models: {sim: {engines: [sim]}}
`))
	_, front := serveGateway(t, parseConfig(t, `
engines:
  peer: {kind: layer0, url: "`+peer+`"}
  oai: {kind: openai, url: "`+peer+`/v1"}
models:
  chain: {engines: [peer], upstream_model: sim}
  oaichain: {engines: [oai], upstream_model: sim}
`))
	for _, tc := range []struct{ path, model, extra string }{
		{"/v1/messages", "chain", ""},
		{"/v1/messages", "chain", `"stream":true,`},
		{"/v1/chat/completions", "oaichain", ""},
		{"/v1/chat/completions", "oaichain", `"stream":true,`},
		{"/v1/messages", "oaichain", `"stream":true,`},
	} {
		body := `{"model":"` + tc.model + `",` + tc.extra + `"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
		req, _ := http.NewRequest(http.MethodPost, front+tc.path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s %s: %d %s", tc.path, tc.model, tc.extra, resp.StatusCode, b)
		}
		if got := resp.Header.Get("X-Layer0-Simulated"); got != "true" {
			t.Errorf("%s %s %s: X-Layer0-Simulated %q, want true", tc.path, tc.model, tc.extra, got)
		}
	}
}
