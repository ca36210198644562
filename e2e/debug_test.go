package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	oai "github.com/openai/openai-go/v3"
	oaiopt "github.com/openai/openai-go/v3/option"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/syncbuf"
	"github.com/layer0ai/layer0/internal/trace"
)

const (
	debugKey = "l0-debug-key"
	plainKey = "l0-plain-key"
	adminKey = "l0-admin-key"
)

// debugConfig has a primary that answers 529 and falls back, traces of the last 8 requests, a
// key allowed to ask for its trace, one that is not, and one that reads every key's traces; admin
// (when not empty) under server, and extra at the top level.
func debugConfig(t *testing.T, admin string, extra ...string) string {
	return strings.Join(extra, "\n") + fmt.Sprintf(`
server:
  addr: 127.0.0.1:0
%s
debug: {requests: 8}
keys:
  - {name: dbg, hash: %s, debug: true}
  - {name: plain, hash: %s}
  - {name: ops, hash: %s, admin: true}
engines:
  primary: {kind: sim, sim: {fail: {status: 529, message: "primary overloaded"}}}
  backup: {kind: sim}
models:
  chat: {engines: [primary], fallback: [backup]}
  backup: {engines: [backup]}
`, admin, authHash(debugKey), authHash(plainKey), authHash(adminKey))
}

func serveAdmin(t *testing.T, g *layer0.Gateway) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: g.AdminHandler(), ReadHeaderTimeout: time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends at Close
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

func getJSON(t *testing.T, url, key string, v any) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if key != "" {
		req.Header.Set("X-Api-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v: %s", url, err, b)
		}
	}
	return resp.StatusCode
}

// A request that failed over is explained by its trace on the admin listener: the 529 of the
// primary, the fallback and the replica that served, each attempt with its time. The debug
// header gets the trace id only for a key with debug.
func TestDecisionTraceOnAdminListener(t *testing.T) {
	g, base := serveGateway(t, parseConfig(t, debugConfig(t, "  admin_addr: 127.0.0.1:0",
		"routing: {ejection: {consecutive_failures: 1, base_time: 7s}}")))
	admin := serveAdmin(t, g)

	var traceID string
	c := anthropicClient(base, option.WithAPIKey(debugKey), option.WithHeader("X-Layer0-Debug", "1"),
		option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			resp, err := next(r)
			if resp != nil {
				traceID = resp.Header.Get("X-Layer0-Trace-Id")
			}
			return resp, err
		}))
	s := c.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{
		Model: "chat", MaxTokens: 20, Messages: userText("hello"),
	})
	for s.Next() {
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if traceID == "" {
		t.Fatal("no X-Layer0-Trace-Id for a debug key asking for it")
	}

	var tr trace.Trace
	deadline := time.Now().Add(5 * time.Second)
	for getJSON(t, admin+"/debug/requests/"+traceID, "", &tr) != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatalf("trace %s never appeared", traceID)
		}
		time.Sleep(5 * time.Millisecond) // the trace is kept as the handler returns, after the last byte
	}
	if tr.ID != traceID || tr.Key != "dbg" || tr.Model != "chat" || tr.Served != "backup" || tr.Status != 200 || !tr.Stream {
		t.Fatalf("trace: %+v", tr)
	}
	if len(tr.Attempts) != 2 || tr.AttemptsTotal != 2 {
		t.Fatalf("attempts: %+v", tr.Attempts)
	}
	first, second := tr.Attempts[0], tr.Attempts[1]
	if first.Replica != "primary" || !strings.Contains(first.Error, "primary overloaded") || first.Ms <= 0 || first.EjectedMs != 7000 {
		t.Errorf("first attempt: %+v, want primary failing with its 529, ejected for 7s", first)
	}
	if second.Replica != "backup" || second.Model != "backup" || second.Fallback == "" || second.Error != "" {
		t.Errorf("second attempt: %+v, want the fallback to backup, served", second)
	}
	if tr.Times.TotalMs <= 0 || tr.Times.EngineMs <= 0 || tr.Times.TTFTMs <= 0 || tr.Usage.Output == 0 {
		t.Errorf("times and usage: %+v %+v", tr.Times, tr.Usage)
	}
	lines := strings.Join(tr.Lines(), "\n")
	for _, want := range []string{"[DEBUG] auth: key dbg", "[DEBUG] attempt 1: chat on primary at +", "status 529\n[DEBUG] ejection: primary ejected for 7s at +",
		"[DEBUG] attempt 2: backup on backup (fallback: ", "[DEBUG] served: backup by backup"} {
		if !strings.Contains(lines, want) {
			t.Errorf("lines lack %q:\n%s", want, lines)
		}
	}

	// A key without debug gets no trace id; its request is kept all the same.
	plain := anthropicClient(base, option.WithAPIKey(plainKey), option.WithHeader("X-Layer0-Debug", "1"),
		option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			resp, err := next(r)
			if resp != nil && resp.Header.Get("X-Layer0-Trace-Id") != "" {
				t.Error("X-Layer0-Trace-Id sent to a key without debug")
			}
			return resp, err
		}))
	if _, err := plain.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model: "backup", MaxTokens: 5, Messages: userText("hi"),
	}); err != nil {
		t.Fatal(err)
	}

	var list struct{ Requests []trace.Summary }
	deadline = time.Now().Add(5 * time.Second)
	for getJSON(t, admin+"/debug/requests?model=backup", "", &list); len(list.Requests) < 2; getJSON(t, admin+"/debug/requests?model=backup", "", &list) {
		if time.Now().After(deadline) {
			t.Fatalf("list: %+v", list.Requests)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if list.Requests[0].Key != "plain" || list.Requests[1].ID != traceID {
		t.Errorf("list by model, newest first: %+v", list.Requests)
	}
	if getJSON(t, admin+"/debug/requests?status=5xx", "", &list); len(list.Requests) != 0 {
		t.Errorf("status=5xx: %+v, want none", list.Requests)
	}
	if code := getJSON(t, admin+"/debug/requests?status=teapot", "", nil); code != http.StatusBadRequest {
		t.Errorf("status=teapot: %d, want 400", code)
	}
	if code := getJSON(t, admin+"/debug/requests/req_unknown", "", nil); code != http.StatusNotFound {
		t.Errorf("unknown id: %d, want 404", code)
	}
	// With an admin address, the main listener has no traces, whatever the key.
	if code := getJSON(t, base+"/debug/requests", debugKey, nil); code != http.StatusNotFound {
		t.Errorf("main listener with an admin address: %d, want 404", code)
	}
}

// Without an admin address the main listener serves the traces, to keys with debug only: a
// debug key reads its own requests' traces and no other key's, an admin key reads every key's.
func TestDecisionTraceOnMainListener(t *testing.T) {
	_, base := serveGateway(t, parseConfig(t, debugConfig(t, "")))
	ids := map[string]string{} // the request id of each key's request
	for _, key := range []string{plainKey, debugKey} {
		var resp *http.Response
		c := anthropicClient(base, option.WithAPIKey(key), option.WithResponseInto(&resp))
		if _, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{
			Model: "backup", MaxTokens: 5, Messages: userText("hi"),
		}); err != nil {
			t.Fatal(err)
		}
		ids[key] = resp.Header.Get("Request-Id")
	}
	if code := getJSON(t, base+"/debug/requests", plainKey, nil); code != http.StatusForbidden {
		t.Errorf("key without debug: %d, want 403", code)
	}
	if code := getJSON(t, base+"/debug/requests", "", nil); code != http.StatusUnauthorized {
		t.Errorf("no key: %d, want 401", code)
	}
	var list struct{ Requests []trace.Summary }
	deadline := time.Now().Add(5 * time.Second)
	for getJSON(t, base+"/debug/requests", adminKey, &list); len(list.Requests) < 2; getJSON(t, base+"/debug/requests", adminKey, &list) {
		if time.Now().After(deadline) {
			t.Fatalf("admin key: listed %+v, want both keys' requests", list.Requests)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if r := list.Requests[1]; r.Key != "plain" || r.Model != "backup" || r.Status != 200 || r.Path != "/v1/messages" {
		t.Errorf("listed: %+v", r)
	}
	for _, r := range list.Requests {
		if strings.HasPrefix(r.Path, "/debug/") {
			t.Errorf("the trace endpoints are traced: %+v", r)
		}
	}
	if code := getJSON(t, base+"/debug/requests/"+ids[plainKey], adminKey, nil); code != http.StatusOK {
		t.Errorf("admin key reading another key's trace: %d, want 200", code)
	}

	// The debug key sees its own request, not the other key's, in the list or by id.
	getJSON(t, base+"/debug/requests", debugKey, &list)
	if len(list.Requests) != 1 || list.Requests[0].Key != "dbg" || list.Requests[0].ID != ids[debugKey] {
		t.Errorf("debug key: listed %+v, want its own request only", list.Requests)
	}
	if code := getJSON(t, base+"/debug/requests?model=backup&limit=100", debugKey, &list); code != http.StatusOK || len(list.Requests) != 1 {
		t.Errorf("debug key, filtered: %d %+v, want its own request only", code, list.Requests)
	}
	var tr trace.Trace
	if code := getJSON(t, base+"/debug/requests/"+ids[debugKey], debugKey, &tr); code != http.StatusOK || tr.Key != "dbg" {
		t.Errorf("debug key reading its own trace: %d %+v", code, tr)
	}
	if code := getJSON(t, base+"/debug/requests/"+ids[plainKey], debugKey, nil); code != http.StatusNotFound {
		t.Errorf("debug key reading another key's trace: %d, want 404", code)
	}
}

// A stream asked for with X-Layer0-Debug by a key with debug ends with its trace as an SSE
// comment line, which both official SDKs skip: their streams end cleanly with the whole answer.
func TestDecisionTraceInlineInStreams(t *testing.T) {
	_, base := serveGateway(t, parseConfig(t, debugConfig(t, "")))
	ctx := context.Background()

	ac := anthropicClient(base, option.WithAPIKey(debugKey), option.WithHeader("X-Layer0-Debug", "1"))
	as := ac.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "chat", MaxTokens: 20, Messages: userText("hello")})
	var msg anthropic.Message
	for as.Next() {
		if err := msg.Accumulate(as.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := as.Err(); err != nil || len(msg.Content) == 0 || msg.Content[0].Text == "" || msg.StopReason == "" {
		t.Fatalf("anthropic SDK: err %v, message %+v", err, msg)
	}

	oc := oai.NewClient(oaiopt.WithBaseURL(base+"/v1"), oaiopt.WithAPIKey(debugKey), oaiopt.WithMaxRetries(0),
		oaiopt.WithHeader("X-Layer0-Debug", "1"))
	os := oc.Chat.Completions.NewStreaming(ctx, oai.ChatCompletionNewParams{Model: "chat",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hello")}})
	var acc oai.ChatCompletionAccumulator
	for os.Next() {
		acc.AddChunk(os.Current())
	}
	if err := os.Err(); err != nil || len(acc.Choices) == 0 || acc.Choices[0].Message.Content == "" {
		t.Fatalf("openai SDK: err %v, completion %+v", err, acc.ChatCompletion)
	}

	// On the wire the trace is the stream's last line, after the format's own end.
	for _, tc := range []struct{ path, body, end string }{
		{"/v1/messages", `{"model":"chat","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, "event: message_stop"},
		{"/v1/chat/completions", `{"model":"chat","stream":true,"messages":[{"role":"user","content":"hi"}]}`, "data: [DONE]"},
	} {
		for _, key := range []string{debugKey, plainKey} {
			req, _ := http.NewRequest(http.MethodPost, base+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Layer0-Debug", "1")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
			last := lines[len(lines)-1]
			tr, ok := strings.CutPrefix(last, ": layer0-trace ")
			if key == plainKey {
				if ok || strings.Contains(string(raw), "layer0-trace") {
					t.Errorf("%s: a key without debug got the trace", tc.path)
				}
				continue
			}
			if !ok || !strings.Contains(string(raw), tc.end) || strings.Index(string(raw), tc.end) > strings.Index(string(raw), last) {
				t.Fatalf("%s: the stream does not end with the trace after %q:\n%s", tc.path, tc.end, raw)
			}
			var got trace.Trace
			if err := json.Unmarshal([]byte(tr), &got); err != nil {
				t.Fatalf("%s: trace: %v", tc.path, err)
			}
			if got.ID != resp.Header.Get("Request-Id") || got.Served != "backup" || len(got.Attempts) != 2 || got.Status != 200 {
				t.Errorf("%s: inline trace %+v", tc.path, got)
			}
		}
	}
}

// The ring is sized at start: a reload that changes debug.requests says so, and traces go on.
func TestDecisionTraceRingSurvivesReload(t *testing.T) {
	var logs syncbuf.Buffer
	g, base := serveGateway(t, parseConfig(t, debugConfig(t, "")),
		layer0.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	cfg := parseConfig(t, strings.Replace(debugConfig(t, ""), "requests: 8", "requests: 100", 1))
	if err := g.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "debug.requests applies only after a restart") {
		t.Errorf("no warning about debug.requests: %s", logs.String())
	}
	c := anthropicClient(base, option.WithAPIKey(plainKey))
	for range 10 {
		if _, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{
			Model: "backup", MaxTokens: 5, Messages: userText("hi"),
		}); err != nil {
			t.Fatal(err)
		}
	}
	var list struct{ Requests []trace.Summary }
	deadline := time.Now().Add(5 * time.Second)
	for getJSON(t, base+"/debug/requests", adminKey, &list); len(list.Requests) < 8; getJSON(t, base+"/debug/requests", adminKey, &list) {
		if time.Now().After(deadline) {
			t.Fatalf("listed %d", len(list.Requests))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(list.Requests) != 8 {
		t.Errorf("listed %d requests, want the 8 the ring was sized for at start", len(list.Requests))
	}
}
