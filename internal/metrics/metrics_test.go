package metrics

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/pipeline"
	"github.com/layer0ai/layer0/internal/route"
)

// sample is one gathered series: its labels and its value (a counter's or gauge's value, a
// histogram's count).
type sample struct {
	labels map[string]string
	value  float64
	sum    float64 // histograms
}

func gather(t *testing.T, reg *prometheus.Registry, name string) []sample {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []sample
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			s := sample{labels: map[string]string{}}
			for _, l := range m.GetLabel() {
				s.labels[l.GetName()] = l.GetValue()
			}
			switch {
			case m.Counter != nil:
				s.value = m.Counter.GetValue()
			case m.Gauge != nil:
				s.value = m.Gauge.GetValue()
			case m.Histogram != nil:
				s.value = float64(m.Histogram.GetSampleCount())
				s.sum = m.Histogram.GetSampleSum()
			}
			out = append(out, s)
		}
	}
	return out
}

// value returns the series of name whose labels include want, failing when there is none.
func value(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) sample {
	t.Helper()
next:
	for _, s := range gather(t, reg, name) {
		for k, v := range want {
			if s.labels[k] != v {
				continue next
			}
		}
		return s
	}
	t.Fatalf("no series %s%v", name, want)
	return sample{}
}

func newMetrics(t testing.TB) (*Metrics, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

func TestOutcome(t *testing.T) {
	tests := []struct {
		rec  pipeline.Record
		want string
	}{
		{pipeline.Record{Status: 200}, OutcomeOK},
		{pipeline.Record{Status: 302}, OutcomeOK},
		{pipeline.Record{Status: 200, ErrorType: "api_error"}, OutcomeStreamError},
		{pipeline.Record{Status: 400, ErrorType: "invalid_request_error"}, OutcomeInvalid},
		{pipeline.Record{Status: 404}, OutcomeInvalid},
		{pipeline.Record{Status: 401}, OutcomeDenied},
		{pipeline.Record{Status: 403}, OutcomeDenied},
		{pipeline.Record{Status: 429}, OutcomeRateLimited},
		{pipeline.Record{Status: 502}, OutcomeError},
		{pipeline.Record{Status: 529}, OutcomeError},
		{pipeline.Record{Status: 500, Cause: apierr.From(context.Canceled)}, OutcomeCanceled},
		{pipeline.Record{Status: 200, ErrorType: "api_error", Cause: context.Canceled}, OutcomeCanceled},
	}
	for _, tt := range tests {
		if got := Outcome(&tt.rec); got != tt.want {
			t.Errorf("status %d error %q cause %v: got %q, want %q", tt.rec.Status, tt.rec.ErrorType, tt.rec.Cause, got, tt.want)
		}
	}
}

func TestObserve(t *testing.T) {
	m, reg := newMetrics(t)
	served := pipeline.Record{Model: "chat", Format: llm.FormatAnthropic, Status: 200, Attempts: 2,
		Fallbacks: []string{route.ReasonOverloaded}, TTFT: 30 * time.Millisecond, EngineTime: 40 * time.Millisecond,
		Usage: llm.Usage{InputTokens: 10, OutputTokens: 5, CacheReadInputTokens: 3}}
	m.Observe(&served, RouteMessages, 50*time.Millisecond)
	m.Observe(&pipeline.Record{Model: "chat", Format: llm.FormatOpenAI, Status: 429, Key: "alpha", RateLimited: true}, RouteMessages, time.Millisecond)
	m.Observe(&pipeline.Record{Model: "chat", Format: llm.FormatAnthropic, Status: 429, Key: "alpha"}, RouteMessages, time.Millisecond) // the engine's 429
	m.Observe(&pipeline.Record{Format: llm.FormatAnthropic, Status: 401}, RouteMessages, time.Millisecond)
	m.Observe(&pipeline.Record{Model: "chat", Format: llm.FormatAnthropic, Status: 200, Fallbacks: []string{"a new reason"}}, RouteMessages, time.Millisecond)
	// Not generations: counted under their own route, not timed, their tokens not engines'.
	m.Observe(&pipeline.Record{Model: "chat", Format: llm.FormatAnthropic, Status: 200, Usage: llm.Usage{InputTokens: 1000}}, RouteCountTokens, time.Millisecond)
	m.Observe(&pipeline.Record{Format: llm.FormatAnthropic, Status: 200}, RouteModels, time.Millisecond)

	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"layer0_requests_total", map[string]string{"model": "chat", "format": "anthropic", "route": "messages", "outcome": "ok"}, 2},
		{"layer0_requests_total", map[string]string{"model": "chat", "format": "anthropic", "route": "count_tokens", "outcome": "ok"}, 1},
		{"layer0_requests_total", map[string]string{"model": "", "format": "anthropic", "route": "models", "outcome": "ok"}, 1},
		{"layer0_requests_total", map[string]string{"model": "chat", "format": "openai", "outcome": "rate_limited"}, 1},
		{"layer0_requests_total", map[string]string{"model": "chat", "format": "anthropic", "route": "messages", "outcome": "rate_limited"}, 1},
		{"layer0_requests_total", map[string]string{"model": "", "outcome": "denied"}, 1},
		{"layer0_requests_total", map[string]string{"model": "chat", "format": "anthropic", "route": "messages", "outcome": "error"}, 0},
		{"layer0_tokens_total", map[string]string{"model": "chat", "format": "anthropic", "kind": "input"}, 10},
		{"layer0_tokens_total", map[string]string{"model": "chat", "format": "anthropic", "kind": "output"}, 5},
		{"layer0_tokens_total", map[string]string{"model": "chat", "format": "anthropic", "kind": "cache_read"}, 3},
		{"layer0_fallback_total", map[string]string{"reason": "overloaded"}, 1},
		{"layer0_fallback_total", map[string]string{"reason": "timeout"}, 0},
		{"layer0_fallback_total", map[string]string{"reason": "server_error"}, 1}, // the unknown reason
		{"layer0_retries_total", map[string]string{"model": "chat", "format": "anthropic"}, 1},
		{"layer0_rate_limited_total", map[string]string{"key": "alpha"}, 1},
		{"layer0_request_duration_seconds", map[string]string{"model": "chat", "format": "anthropic"}, 3},
		{"layer0_time_to_first_token_seconds", map[string]string{"model": "chat", "format": "anthropic"}, 1},
		{"layer0_inter_token_latency_seconds", map[string]string{"model": "chat", "format": "anthropic"}, 1},
	} {
		if got := value(t, reg, c.name, c.labels).value; got != c.want {
			t.Errorf("%s%v: got %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if itl := value(t, reg, "layer0_inter_token_latency_seconds", map[string]string{"model": "chat"}); itl.sum < 0.0049 || itl.sum > 0.0051 {
		t.Errorf("inter-token latency: %vs, want (50ms-30ms)/(5-1 tokens) = 5ms", itl.sum)
	}
	over := value(t, reg, "layer0_overhead_seconds", nil)
	if over.value != 5 || over.sum < 0.0099 || over.sum > 0.0141 {
		t.Errorf("overhead: got %v observations summing %vs, want 5 summing 10ms+4×1ms", over.value, over.sum)
	}
}

// TestObserveCache counts what the response cache did, and leaves a replayed answer's tokens out
// of the engines' token counts.
func TestObserveCache(t *testing.T) {
	m, reg := newMetrics(t)
	hit := pipeline.Record{Model: "cached", Format: llm.FormatAnthropic, Status: 200, Cache: pipeline.CacheHit,
		Usage: llm.Usage{InputTokens: 10, OutputTokens: 5}}
	m.Observe(&hit, RouteMessages, time.Millisecond)
	hit.Cache = pipeline.CacheCoalesced
	m.Observe(&hit, RouteMessages, time.Millisecond)
	hit.Cache = pipeline.CacheMiss
	m.Observe(&hit, RouteMessages, time.Millisecond)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"layer0_cache_requests_total", map[string]string{"model": "cached", "result": "hit"}, 1},
		{"layer0_cache_requests_total", map[string]string{"model": "cached", "result": "coalesced"}, 1},
		{"layer0_cache_requests_total", map[string]string{"model": "cached", "result": "miss"}, 1},
		{"layer0_tokens_total", map[string]string{"model": "cached", "format": "anthropic", "kind": "output"}, 5}, // the miss's only
		{"layer0_requests_total", map[string]string{"model": "cached", "format": "anthropic", "outcome": "ok"}, 3},
	} {
		if got := value(t, reg, c.name, c.labels).value; got != c.want {
			t.Errorf("%s%v: got %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// TestObserveAllocs guards the per-request cost: once a model's series exist, observing a
// request allocates nothing.
func TestObserveAllocs(t *testing.T) {
	m, _ := newMetrics(t)
	rec := pipeline.Record{Model: "chat", Format: llm.FormatAnthropic, Status: 200, Attempts: 2,
		Fallbacks: []string{route.ReasonTimeout}, TTFT: time.Millisecond, Usage: llm.Usage{InputTokens: 3, OutputTokens: 4}}
	m.Observe(&rec, RouteMessages, time.Second)
	if got := testing.AllocsPerRun(100, func() { m.Observe(&rec, RouteMessages, time.Second) }); got != 0 {
		t.Errorf("got %v allocations per Observe, want 0", got)
	}
}

func BenchmarkObserve(b *testing.B) {
	m, _ := newMetrics(b)
	rec := pipeline.Record{Model: "chat", Format: llm.FormatAnthropic, Status: 200, Attempts: 1,
		TTFT: time.Millisecond, EngineTime: 9 * time.Millisecond, Usage: llm.Usage{InputTokens: 30, OutputTokens: 40}}
	b.ReportAllocs()
	for b.Loop() {
		m.Observe(&rec, RouteMessages, 10*time.Millisecond)
	}
}

func TestWatchEngines(t *testing.T) {
	m, reg := newMetrics(t)
	now := time.Now()
	src := []route.Status{
		{Name: "a", Outstanding: 3, Utilization: 0.5, Latency: 2 * time.Second},
		{Name: "b", EjectedUntil: now.Add(time.Minute)},
		{Name: "c", Breaker: route.Open},
		{Name: "d", Down: true, Breaker: route.HalfOpen},
	}
	if err := m.WatchEngines(func() []route.Status { return src }); err != nil {
		t.Fatal(err)
	}
	got := map[string][6]float64{}
	for i, name := range []string{"layer0_engine_up", "layer0_engine_outstanding_requests", "layer0_engine_utilization",
		"layer0_engine_ejected", "layer0_engine_breaker_state", "layer0_engine_latency_seconds"} {
		for _, s := range gather(t, reg, name) {
			v := got[s.labels["engine"]]
			v[i] = s.value
			got[s.labels["engine"]] = v
		}
	}
	want := map[string][6]float64{
		"a": {1, 3, 0.5, 0, 0, 2},
		"b": {0, 0, 0, 1, 0, 0},
		"c": {0, 0, 0, 0, 1, 0},
		"d": {0, 0, 0, 0, 2, 0},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("engine gauges [up outstanding utilization ejected breaker latency] (-want +got):\n%s", diff)
	}
}

func TestWatchAccessLogAndHandler(t *testing.T) {
	m, reg := newMetrics(t)
	if err := m.WatchAccessLog(func() uint64 { return 7 }, func() uint64 { return 70 }); err != nil {
		t.Fatal(err)
	}
	if got := value(t, reg, "layer0_access_log_dropped_total", nil).value; got != 7 {
		t.Errorf("dropped: got %v, want 7", got)
	}
	m.Observe(&pipeline.Record{Model: "x", Status: 200}, RouteMessages, time.Millisecond)
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body := w.Body.String()
	for _, want := range []string{`layer0_requests_total{format="anthropic",model="x",outcome="ok",route="messages"} 1`,
		"layer0_access_log_written_total 70", "# TYPE layer0_fallback_total counter"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if _, err := New(reg); err == nil {
		t.Error("registering twice: got nil error")
	}
}
