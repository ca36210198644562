// Package metrics computes layer0's Prometheus metrics in process, once per request, from the
// pipeline's Record — no per-stage timers, no agent. The registry is passed in (no globals), and
// per-request series are resolved once per model and format and then reused, so observing a
// request costs a map lookup and a few atomic adds. Engine health is read from the live routing
// state when Prometheus scrapes, not pushed.
//
// It also speaks the engines' side of utilisation: the vLLM gauges a sim engine exports
// (WriteVLLM), and a parser and scraper that read them back from any engine that serves them
// (ParseVLLM, Scrape), which the router turns into a replica's utilisation (Load.Utilization).
package metrics

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/money"
	"github.com/layer0ai/layer0/internal/pipeline"
	"github.com/layer0ai/layer0/internal/route"
	"github.com/layer0ai/layer0/internal/version"
)

// Outcomes of a request, the values of layer0_requests_total's outcome label.
const (
	OutcomeOK          = "ok"           // 2xx or 3xx, complete
	OutcomeInvalid     = "invalid"      // 4xx other than below: the request was at fault
	OutcomeDenied      = "denied"       // 401, 403
	OutcomeRateLimited = "rate_limited" // 429, from layer0's limits or an engine's
	OutcomeError       = "error"        // 5xx: layer0 or every engine failed
	OutcomeStreamError = "stream_error" // the stream began and then failed
	OutcomeCanceled    = "canceled"     // the client went away
)

var outcomes = [...]string{OutcomeOK, OutcomeInvalid, OutcomeDenied, OutcomeRateLimited, OutcomeError,
	OutcomeStreamError, OutcomeCanceled}

// Routes, the values of layer0_requests_total's route label: which endpoint a request was for.
// Only generations (RouteMessages) are timed and count tokens.
const (
	RouteMessages    = "messages"     // a generation: /v1/messages, /v1/chat/completions, /v1/responses, the binary protocol
	RouteCountTokens = "count_tokens" // POST /v1/messages/count_tokens
	RouteEmbeddings  = "embeddings"   // POST /v1/embeddings
	RouteModels      = "models"       // GET /v1/models, /v1/models/{id}
	RouteCache       = "cache"        // /v1/cache, the prefix-cache probe
	RouteNegotiate   = "negotiate"    // /v1/layer/negotiate
	RouteNotFound    = "not_found"    // a /v1/ path that is no endpoint
	RouteResponses   = "responses"    // GET and DELETE /v1/responses/{id}, the stored responses
)

// Routes are every route label value, in the order above.
var Routes = [...]string{RouteMessages, RouteCountTokens, RouteEmbeddings, RouteModels, RouteCache, RouteNegotiate, RouteNotFound, RouteResponses}

// fallbackReasons are every reason the router can give, so each series exists from the start.
var fallbackReasons = [...]string{route.ReasonRateLimit, route.ReasonOverloaded, route.ReasonServerError,
	route.ReasonTimeout, route.ReasonOOM, route.ReasonContextLength, route.ReasonNetwork,
	route.ReasonUnavailable, route.ReasonUtilization}

// Token kinds, the values of layer0_tokens_total's kind label.
const (
	tokInput = iota
	tokOutput
	tokCacheRead
	tokCacheCreation
	nTok
)

var tokenKinds = [nTok]string{"input", "output", "cache_read", "cache_creation"}

// Metrics is the set of request metrics. Safe for concurrent use; make it with New.
type Metrics struct {
	reg     *prometheus.Registry
	handler http.Handler

	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	ttft      *prometheus.HistogramVec
	itl       *prometheus.HistogramVec
	overhead  prometheus.Histogram
	tokens    *prometheus.CounterVec
	fallbacks map[string]prometheus.Counter
	retries   *prometheus.CounterVec
	limited   *prometheus.CounterVec
	cache     *prometheus.CounterVec
	predErr   *prometheus.HistogramVec
	predicted *prometheus.CounterVec
	reported  *prometheus.CounterVec
	cost      *prometheus.CounterVec

	mu     sync.RWMutex
	series map[seriesKey]*series
}

type seriesKey struct {
	model  string
	format llm.Format
	route  string
}

// series are one model and format's resolved metrics.
type series struct {
	requests [len(outcomes)]prometheus.Counter
	duration prometheus.Observer
	ttft     prometheus.Observer
	itl      prometheus.Observer
	tokens   [nTok]prometheus.Counter
	retries  prometheus.Counter
}

// Latency buckets in seconds: 5ms to about 80s for requests, 0.5ms to about 4s between tokens,
// and 10µs to about 0.3s for layer0's own overhead.
var (
	latencyBuckets  = prometheus.ExponentialBuckets(0.005, 2, 15)
	itlBuckets      = prometheus.ExponentialBuckets(0.0005, 2, 14)
	overheadBuckets = prometheus.ExponentialBuckets(10e-6, 2, 16)
)

// New registers the request metrics with reg and returns them.
func New(reg *prometheus.Registry) (*Metrics, error) {
	m := &Metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "layer0_requests_total",
			Help: "Requests served, by model asked for, client format, route (endpoint) and outcome.",
		}, []string{"model", "format", "route", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "layer0_request_duration_seconds",
			Help:    "End-to-end time in layer0, from the request's arrival to its last byte.",
			Buckets: latencyBuckets,
		}, []string{"model", "format"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "layer0_time_to_first_token_seconds",
			Help:    "Time from the request's arrival to its first content token.",
			Buckets: latencyBuckets,
		}, []string{"model", "format"}),
		itl: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "layer0_inter_token_latency_seconds",
			Help:    "A generation's mean time between output tokens: from its first token to its end, over the tokens after the first.",
			Buckets: itlBuckets,
		}, []string{"model", "format"}),
		overhead: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "layer0_overhead_seconds",
			Help:    "Time layer0 itself spent on a request: the end-to-end time minus the time waiting on engines.",
			Buckets: overheadBuckets,
		}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "layer0_tokens_total",
			Help: "Tokens, as the engines counted them, by model and kind (input, output, cache_read, cache_creation).",
		}, []string{"model", "format", "kind"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "layer0_retries_total",
			Help: "Attempts beyond the first on the same or a fallback model, by model asked for.",
		}, []string{"model", "format"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "layer0_rate_limited_total",
			Help: "Requests refused by layer0's own rate limits, by API key name (\"\" without auth).",
		}, []string{"key"}),
		cache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "layer0_cache_requests_total",
			Help: "Requests of models with a response cache, by model asked for and what the cache did (hit, coalesced, miss, refresh, bypass).",
		}, []string{"model", "result"}),
		predErr: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "layer0_prefix_prediction_error_tokens",
			Help:    "For each answer whose engine reports cached prompt tokens, the prefix picker's prediction of them less the engine's report, in absolute value, by engine replica.",
			Buckets: []float64{0, 16, 64, 256, 1024, 4096, 16384},
		}, []string{"engine"}),
		predicted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "layer0_prefix_predicted_cached_tokens_total",
			Help: "Cached prompt tokens the prefix picker predicted for the answers checked against their engine's report, by engine replica (the ratio to layer0_prefix_engine_cached_tokens_total is the prediction's bias).",
		}, []string{"engine"}),
		reported: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "layer0_prefix_engine_cached_tokens_total",
			Help: "Cached prompt tokens the engines reported for the answers whose prediction was checked, by engine replica.",
		}, []string{"engine"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "layer0_cost_total",
			Help: "What requests cost, in units of the configured currency (docs/spend.md), by model that served, API key name and team: labels from the configuration only.",
		}, []string{"model", "key", "team"}),
		series: map[seriesKey]*series{},
	}
	fb := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "layer0_fallback_total",
		Help: "Requests that moved down their model's fallback chain, by reason.",
	}, []string{"reason"})
	m.fallbacks = make(map[string]prometheus.Counter, len(fallbackReasons))
	for _, r := range fallbackReasons {
		m.fallbacks[r] = fb.WithLabelValues(r)
	}
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	bi := version.Get()
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "layer0_build_info",
		Help:        "Always 1; the labels say which build is running (module version, VCS commit, Go version).",
		ConstLabels: prometheus.Labels{"version": bi.Version, "commit": bi.Commit, "go_version": bi.Go},
	})
	build.Set(1)
	if err := m.register(m.requests, m.duration, m.ttft, m.itl, m.overhead, m.tokens, fb, m.retries, m.limited, m.cache, m.predErr, m.predicted, m.reported, m.cost, build); err != nil {
		return nil, errors.Join(errors.New("metrics: register"), err)
	}
	return m, nil
}

// register registers each of cs with the registry, stopping at the first that fails.
func (m *Metrics) register(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Handler serves the registry in the Prometheus text format (GET /metrics).
func (m *Metrics) Handler() http.Handler { return m.handler }

// Observe records one finished request: r as the pipeline and server filled it, route the
// endpoint it was for (one of Routes), and total, the end-to-end time. Call it once per request.
// A request other than a generation (RouteMessages) is counted in layer0_requests_total (and
// layer0_rate_limited_total) only: its time is not a generation's, and the input tokens a
// count_tokens request counted were not sent to any engine.
func (m *Metrics) Observe(r *pipeline.Record, rt string, total time.Duration) {
	s := m.seriesFor(r.Model, r.Format, rt)
	s.requests[outcomeIndex(r)].Inc()
	if r.RateLimited {
		m.limited.WithLabelValues(r.Key).Inc()
	}
	if rt != RouteMessages {
		return
	}
	s.duration.Observe(total.Seconds())
	if r.TTFT > 0 {
		s.ttft.Observe(r.TTFT.Seconds())
		if n := r.Usage.OutputTokens; n > 1 && total > r.TTFT && r.Cache != pipeline.CacheHit && r.Cache != pipeline.CacheCoalesced {
			s.itl.Observe((total - r.TTFT).Seconds() / float64(n-1))
		}
	}
	m.overhead.Observe(max(total-r.EngineTime, 0).Seconds())
	if r.Cache != "" {
		m.cache.WithLabelValues(r.Model, r.Cache).Inc()
	}
	u := &r.Usage
	var none llm.Usage
	if r.Cache == pipeline.CacheHit || r.Cache == pipeline.CacheCoalesced {
		u = &none // a replayed answer's usage is the original's: no engine counted tokens for it
	}
	for i, n := range [nTok]int{u.InputTokens, u.OutputTokens, u.CacheReadInputTokens, u.CacheCreationInputTokens} {
		if n > 0 {
			s.tokens[i].Add(float64(n))
		}
	}
	if r.Priced && r.Cost > 0 {
		// Every label is a name from the configuration (a model, a key, a team): bounded.
		m.cost.WithLabelValues(r.Served, r.Key, r.Team).Add(float64(r.Cost) / float64(money.Unit))
	}
	if r.Attempts > 1 {
		s.retries.Add(float64(r.Attempts - 1))
	}
	if pr := &r.Prediction; pr.Checked {
		m.predErr.WithLabelValues(r.Engine).Observe(float64(max(pr.Predicted-pr.Engine, pr.Engine-pr.Predicted)))
		m.predicted.WithLabelValues(r.Engine).Add(float64(pr.Predicted))
		m.reported.WithLabelValues(r.Engine).Add(float64(pr.Engine))
	}
	for _, reason := range r.Fallbacks {
		c, ok := m.fallbacks[reason]
		if !ok {
			c = m.fallbacks[route.ReasonServerError] // the router's own name for an unclassified failure
		}
		c.Inc()
	}
}

// seriesFor returns the resolved series of a model and format, creating them on first use.
func (m *Metrics) seriesFor(model string, f llm.Format, rt string) *series {
	k := seriesKey{model, f, rt}
	m.mu.RLock()
	s := m.series[k]
	m.mu.RUnlock()
	if s != nil {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s = m.series[k]; s != nil {
		return s
	}
	fs := f.String()
	s = &series{}
	for i, o := range outcomes {
		s.requests[i] = m.requests.WithLabelValues(model, fs, rt, o)
	}
	if rt == RouteMessages {
		s.duration = m.duration.WithLabelValues(model, fs)
		s.ttft = m.ttft.WithLabelValues(model, fs)
		s.itl = m.itl.WithLabelValues(model, fs)
		s.retries = m.retries.WithLabelValues(model, fs)
		for i, kind := range tokenKinds {
			s.tokens[i] = m.tokens.WithLabelValues(model, fs, kind)
		}
	}
	m.series[k] = s
	return s
}

// outcomeIndex classifies a finished request into outcomes.
func outcomeIndex(r *pipeline.Record) int {
	switch st := r.Status; {
	case r.Cause != nil && errors.Is(r.Cause, context.Canceled):
		return 6
	case st < 400 && r.ErrorType != "":
		return 5
	case st < 400:
		return 0
	case st == http.StatusUnauthorized || st == http.StatusForbidden:
		return 2
	case st == http.StatusTooManyRequests:
		return 3
	case st < 500:
		return 1
	}
	return 4
}

// Outcome names the outcome of a finished request (one of the Outcome constants).
func Outcome(r *pipeline.Record) string { return outcomes[outcomeIndex(r)] }
