package enginetok

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/layer0ai/layer0/internal/llm"
)

// fakeEngine answers /tokenize with one token per byte of the messages' JSON, and counts the
// requests.
func fakeEngine(t testing.TB, calls *atomic.Int64) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var body struct {
			Model    string          `json:"model"`
			Messages json.RawMessage `json:"messages"`
			Gen      bool            `json:"add_generation_prompt"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || !body.Gen || body.Model != "m" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		toks := make([]uint32, len(body.Messages))
		for i, b := range body.Messages {
			toks[i] = uint32(b)
		}
		_ = json.NewEncoder(w).Encode(Answer{Tokens: toks, Count: len(toks), MaxModelLen: 4096})
	}))
	t.Cleanup(srv.Close)
	return srv
}

func request(system, user string) *llm.Request {
	return &llm.Request{Model: "client-name", System: []llm.Block{{Type: llm.BlockText, Text: system}},
		Messages: []llm.Message{llm.TextMessage(llm.RoleUser, user)}}
}

// TestTokenizerCache: a prompt is asked of the engine once per tenant scope; another tenant's
// rendering is not reused; the cache stays within its bound.
func TestTokenizerCache(t *testing.T) {
	var calls atomic.Int64
	srv := fakeEngine(t, &calls)
	tk := New(Options{URL: srv.URL + "/tokenize", Model: "m", CacheTokens: 1000})
	ctx := context.Background()
	req := request("You are terse.", "hello")
	a, err := tk.RenderScoped(ctx, nil, req, "alice")
	if err != nil || len(a) == 0 {
		t.Fatalf("%v, %d tokens", err, len(a))
	}
	b, _ := tk.RenderScoped(ctx, nil, req, "alice")
	if calls.Load() != 1 || len(b) != len(a) {
		t.Fatalf("%d calls for one prompt of one tenant", calls.Load())
	}
	if _, err := tk.RenderScoped(ctx, nil, req, "bob"); err != nil || calls.Load() != 2 {
		t.Fatalf("another tenant: %v, %d calls", err, calls.Load())
	}
	for i := range 50 {
		_, _ = tk.RenderScoped(ctx, nil, request("You are terse.", strings.Repeat("x", i)), "alice")
	}
	if st := tk.Stats(); st.CachedTokens > 1000 || st.Hits != 1 || st.Failures != 0 {
		t.Fatalf("%+v", st)
	}
	bad := New(Options{URL: srv.URL + "/tokenize", Model: "other"})
	if _, err := bad.RenderScoped(ctx, nil, req, ""); err == nil || !strings.Contains(err.Error(), "status 400") {
		t.Fatalf("an engine's refusal: %v", err)
	}
}

// TestBody: the request is the Chat Completions rendering of the prompt, without sampling
// parameters, with add_generation_prompt; no model when none is configured.
func TestBody(t *testing.T) {
	req := request("sys", "hi")
	req.MaxTokens, req.Stream = 10, true
	got := string(Body(nil, req, "m"))
	want := `{"model":"m","messages":[{"role":"system","content":"sys"},{"role":"user","content":"hi"}],"add_generation_prompt":true}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if got := string(Body(nil, req, "")); got != `{"messages":[{"role":"system","content":"sys"},{"role":"user","content":"hi"}],"add_generation_prompt":true}` {
		t.Fatalf("without a model: %s", got)
	}
}

// BenchmarkRenderCached is the cost per request of a prompt the tokenizer rendered before: the
// request body built and hashed, the cache probed, 4,000 token ids copied.
func BenchmarkRenderCached(b *testing.B) {
	var calls atomic.Int64
	srv := fakeEngine(b, &calls)
	tk := New(Options{URL: srv.URL + "/tokenize", Model: "m"})
	req := request(strings.Repeat("You answer questions about routers. ", 100), "What should I check first?")
	ctx := context.Background()
	dst, _ := tk.RenderScoped(ctx, nil, req, "k")
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		dst, _ = tk.RenderScoped(ctx, dst[:0], req, "k")
	}
	b.ReportMetric(float64(len(dst)), "tokens")
}

// BenchmarkRenderMiss is the cost of a prompt not seen before: one round trip to a local
// engine (here a fake answering at once; a real engine adds its tokenizer's time).
func BenchmarkRenderMiss(b *testing.B) {
	var calls atomic.Int64
	srv := fakeEngine(b, &calls)
	tk := New(Options{URL: srv.URL + "/tokenize", Model: "m", CacheTokens: -1})
	req := request(strings.Repeat("You answer questions about routers. ", 100), "What should I check first?")
	ctx := context.Background()
	var dst []uint32
	b.ReportAllocs()
	for range b.N {
		dst, _ = tk.RenderScoped(ctx, dst[:0], req, "k")
	}
}
