package e2e

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/config"
)

// benchGatewayConfig turns every policy layer on: a key, its limits in every dimension and
// global ones (never reached), size limits, and a fallback chain behind the model.
var benchGatewayConfig = `
keys:
  - name: bench
    hash: ` + auth.HashHex("l0-bench-key") + `
    models: [sim, "sim-*"]
    limits: {requests_per_minute: 1000000000, input_tokens_per_minute: 1000000000000, output_tokens_per_minute: 1000000000000, concurrent: 100000}
limits:
  global: {requests_per_minute: 1000000000, concurrent: 100000}
  max_messages: 100
  max_content_bytes: 100000
engines:
  sim: {kind: sim}
  backup: {kind: sim}
models:
  sim: {engines: [sim], fallback: [sim-backup]}
  sim-backup: {engines: [backup]}
`

// benchGateway runs one request shape through ServeHTTP with auth and limits on, and the
// configuration's extra sections.
func benchGateway(b *testing.B, extra string, body []byte) {
	cfg, err := config.Parse([]byte(extra + benchGatewayConfig))
	if err != nil {
		b.Fatal(err)
	}
	g, err := layer0.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	r := httptest.NewRequest(http.MethodPost, "/v1/messages", nil)
	r.Header.Set("X-Api-Key", "l0-bench-key")
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

// BenchmarkServeHTTPGatewayNonStreaming is BenchmarkServeHTTPNonStreaming with auth, rate limits
// in every dimension, size limits and a fallback chain configured.
func BenchmarkServeHTTPGatewayNonStreaming(b *testing.B) { benchGateway(b, "", benchBody) }

// BenchmarkServeHTTPGatewayStreaming is the same request streamed as SSE.
func BenchmarkServeHTTPGatewayStreaming(b *testing.B) { benchGateway(b, "", benchStreamBody) }

var benchStreamBody = bytes.Replace(benchBody, []byte(`"max_tokens":20`), []byte(`"max_tokens":20,"stream":true`), 1)

// BenchmarkServeHTTPGatewayTraced is BenchmarkServeHTTPGatewayNonStreaming with every request
// traced (sample_ratio 1), its spans exported to an OTLP/HTTP receiver on loopback; …Unsampled
// with tracing on at ratio 0 (the request span exists, for the engines' traceparent, but is not
// recorded).
func BenchmarkServeHTTPGatewayTraced(b *testing.B) {
	recv := newOTLPHTTPReceiver(b)
	recv.drop()
	benchGateway(b, "telemetry: {sample_ratio: 1, otlp: {endpoint: \""+recv.URL+"\"}}\n", benchBody)
}

func BenchmarkServeHTTPGatewayTracedStreaming(b *testing.B) {
	recv := newOTLPHTTPReceiver(b)
	recv.drop()
	benchGateway(b, "telemetry: {sample_ratio: 1, otlp: {endpoint: \""+recv.URL+"\"}}\n", benchStreamBody)
}

func BenchmarkServeHTTPGatewayUnsampled(b *testing.B) {
	recv := newOTLPHTTPReceiver(b)
	benchGateway(b, "telemetry: {sample_ratio: 0, otlp: {endpoint: \""+recv.URL+"\"}}\n", benchBody)
}
