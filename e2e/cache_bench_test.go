//go:build unix

package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/tokenizer"
	"github.com/layer0ai/layer0/internal/wire/anthropic"
)

// benchCacheHit serves body again and again from the response cache, through the whole
// in-process path: read and decode the body, auth-free admission and limits, the key, the lookup,
// and the replay through the client's encoder.
func benchCacheHit(b *testing.B, body []byte) {
	cfg := parseConfig(b, "engines:\n  sim: {kind: sim}\nmodels:\n  sim: {engines: [sim], cache: {enabled: true, ttl: 1h}}\n")
	g, err := layer0.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	r := httptest.NewRequest(http.MethodPost, "/v1/messages", nil)
	r.Header.Set("Content-Type", "application/json")
	w := &discardWriter{h: http.Header{}}
	serve := func() {
		r.Body = readCloser{bytes.NewReader(body)}
		r.ContentLength = int64(len(body))
		clear(w.h)
		g.ServeHTTP(w, r)
		if w.status != http.StatusOK {
			b.Fatalf("status %d", w.status)
		}
	}
	serve() // the miss that stores the answer
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		serve()
		if w.h.Get("X-Cache") != "HIT" {
			b.Fatalf("X-Cache %q", w.h.Get("X-Cache"))
		}
	}
}

// BenchmarkServeHTTPCacheHit is BenchmarkServeHTTPNonStreaming's request at temperature 0,
// answered from the cache.
func BenchmarkServeHTTPCacheHit(b *testing.B) {
	benchCacheHit(b, bytes.Replace(benchBody, []byte(`"max_tokens":20`), []byte(`"max_tokens":20,"temperature":0`), 1))
}

// BenchmarkServeHTTPCacheHitStreaming is the same hit replayed as SSE.
func BenchmarkServeHTTPCacheHitStreaming(b *testing.B) {
	benchCacheHit(b, bytes.Replace(benchBody, []byte(`"max_tokens":20`), []byte(`"max_tokens":20,"temperature":0,"stream":true`), 1))
}

// BenchmarkServeHTTPCacheHit2kTokens is a hit for a conversation of about 2,000 tokens.
func BenchmarkServeHTTPCacheHit2kTokens(b *testing.B) {
	para := "The quick brown fox jumps over the lazy dog while the committee reviews the quarterly report, " +
		"noting that revenue grew by 12% and that the new caching layer reduced latency considerably. "
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	req := struct {
		Model       string  `json:"model"`
		MaxTokens   int     `json:"max_tokens"`
		Temperature float64 `json:"temperature"`
		System      string  `json:"system"`
		Messages    []msg   `json:"messages"`
	}{Model: "sim", MaxTokens: 20, System: strings.Repeat(para, 8)}
	for i := range 6 {
		req.Messages = append(req.Messages, msg{Role: [2]string{"user", "assistant"}[i%2], Content: strings.Repeat(para, 8)})
	}
	req.Messages = append(req.Messages, msg{Role: "user", Content: "Summarise."})
	body, err := json.Marshal(req)
	if err != nil {
		b.Fatal(err)
	}
	decoded, err := anthropic.DecodeRequest(body)
	if err != nil {
		b.Fatal(err)
	}
	if n := tokenizer.Default().CountRequest(decoded); n < 1900 || n > 2300 {
		b.Fatalf("the request is %d tokens, want about 2000", n)
	}
	benchCacheHit(b, body)
}

// reportCPU reports the process's CPU time per operation beside the wall time: on a machine
// shared with other work the wall time counts the waits for a core, the CPU time only the work.
// Call it as defer reportCPU(b)() before the loop.
func reportCPU(b *testing.B) func() {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	start := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return func() {
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		used := time.Duration(ru.Utime.Nano()+ru.Stime.Nano()) - start
		b.ReportMetric(float64(used.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}
