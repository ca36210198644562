package e2e

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/llm"
)

// discardWriter is a minimal http.ResponseWriter so the benchmark measures layer0, not the recorder.
type discardWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(s int)           { w.status = s }
func (w *discardWriter) Write(b []byte) (int, error) { w.n += len(b); return len(b), nil }
func (w *discardWriter) Flush()                      {}

// The deadlines a real connection's writer supports (the server bounds body reads and writes).
func (w *discardWriter) SetReadDeadline(time.Time) error  { return nil }
func (w *discardWriter) SetWriteDeadline(time.Time) error { return nil }

var benchBody = []byte(`{"model":"sim","max_tokens":20,"system":"You are terse.","messages":[{"role":"user","content":"Summarise the benefits of a single-process gateway."}]}`)

// BenchmarkServeHTTPNonStreaming is one non-streaming Anthropic request through the whole
// in-process path — decode, pipeline, sim with zero delays, encode — without a network.
func BenchmarkServeHTTPNonStreaming(b *testing.B) {
	g, err := layer0.New(nil)
	if err != nil {
		b.Fatal(err)
	}
	benchServe(b, g, benchBody)
}

// benchServe serves body to g as a POST /v1/messages, b.N times, each answer a 200.
func benchServe(b *testing.B, g *layer0.Gateway, body []byte) {
	b.Helper()
	r := httptest.NewRequest(http.MethodPost, "/v1/messages", nil)
	r.Header.Set("Content-Type", "application/json")
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		r.Body = readCloser{bytes.NewReader(body)}
		r.ContentLength = int64(len(body))
		clear(w.h)
		g.ServeHTTP(w, r)
		if w.status != http.StatusOK {
			b.Fatalf("status %d", w.status)
		}
	}
}

// BenchmarkServeHTTPStreaming is the same request streamed as SSE.
func BenchmarkServeHTTPStreaming(b *testing.B) {
	g, err := layer0.New(nil)
	if err != nil {
		b.Fatal(err)
	}
	benchServe(b, g, bytes.Replace(benchBody, []byte(`"max_tokens":20`), []byte(`"max_tokens":20,"stream":true`), 1))
}

// BenchmarkDo is the zero-hop library path: a canonical request, the pipeline, the sim.
func BenchmarkDo(b *testing.B) {
	g, err := layer0.New(nil)
	if err != nil {
		b.Fatal(err)
	}
	req := &layer0.Request{Model: "sim", MaxTokens: 20, Messages: []llm.Message{{
		Role: llm.RoleUser, Content: []llm.Block{{Text: "Summarise the benefits of a single-process gateway."}},
	}}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		var c layer0.Collector
		if err := g.Do(ctx, req, &c); err != nil {
			b.Fatal(err)
		}
	}
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// BenchmarkServeHTTPDebugTrace is BenchmarkServeHTTPNonStreaming with the decision traces off
// (debug.requests: 0, the default) and on (the last 1000 requests kept): the difference is what
// keeping a trace costs a request.
func BenchmarkServeHTTPDebugTrace(b *testing.B) {
	for _, n := range []int{0, 1000} {
		b.Run("requests="+strconv.Itoa(n), func(b *testing.B) {
			cfg := layer0.DefaultConfig()
			cfg.Debug.Requests = n
			g, err := layer0.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			benchServe(b, g, benchBody)
		})
	}
}
