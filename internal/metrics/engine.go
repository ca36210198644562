package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/layer0ai/layer0/internal/route"
)

// engineCollector reads the replicas' state when Prometheus scrapes: the state lives in the
// router, and copying it into gauges on every change would put metrics on the request path.
type engineCollector struct {
	src func() []route.Status

	up, outstanding, util, ejected, breaker, latency, precise, agreement *prometheus.Desc
}

// WatchEngines registers engine health metrics read from src at each scrape: src returns the
// live replicas' state (the current pipeline's, so a reload changes what is reported).
func (m *Metrics) WatchEngines(src func() []route.Status) error {
	l := []string{"engine"}
	c := &engineCollector{
		src:         src,
		up:          prometheus.NewDesc("layer0_engine_up", "1 when the engine replica can take requests: not marked down by health checks, not ejected, breaker not open.", l, nil),
		outstanding: prometheus.NewDesc("layer0_engine_outstanding_requests", "Requests the engine replica is serving now.", l, nil),
		util:        prometheus.NewDesc("layer0_engine_utilization", "The engine replica's utilisation, 0 to 1, from its vLLM gauges (KV cache usage; 1 while requests wait).", l, nil),
		ejected:     prometheus.NewDesc("layer0_engine_ejected", "1 while the engine replica is ejected as an outlier.", l, nil),
		breaker:     prometheus.NewDesc("layer0_engine_breaker_state", "The engine replica's circuit breaker: 0 closed, 1 open, 2 half-open.", l, nil),
		latency:     prometheus.NewDesc("layer0_engine_latency_seconds", "Moving average of the engine replica's successful attempts' duration.", l, nil),
		precise:     prometheus.NewDesc("layer0_engine_prefix_precise", "For an engine replica whose prefix index is configured precise: 1 while it follows the engine's KV-cache events, 0 while it falls back to the approximate estimate (not connected, or layer0's tokenization does not agree with the engine's).", l, nil),
		agreement:   prometheus.NewDesc("layer0_engine_prefix_prediction_agreement", "Share, 0 to 1, of the engine replica's last 64 checked predictions of a request's cached prompt tokens that equalled what the engine reported serving from its cache.", l, nil),
	}
	return m.reg.Register(c)
}

// Describe implements prometheus.Collector.
func (c *engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.outstanding, c.util, c.ejected, c.breaker, c.latency, c.precise, c.agreement} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *engineCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.src() {
		ejected := !s.EjectedUntil.IsZero()
		up := !s.Down && !ejected && s.Breaker != route.Open
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, s.Name)
		}
		gauge(c.up, b2f(up))
		gauge(c.outstanding, float64(s.Outstanding))
		gauge(c.util, s.Utilization)
		gauge(c.ejected, b2f(ejected))
		gauge(c.breaker, float64(s.Breaker))
		gauge(c.latency, s.Latency.Seconds())
		if s.PrefixPrecise {
			gauge(c.precise, b2f(s.PrefixExact))
		}
		if s.PrefixChecked > 0 {
			gauge(c.agreement, s.PrefixAgreement)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// WatchAccessLog registers layer0_access_log_dropped_total and layer0_access_log_written_total,
// read from the access log's counters at each scrape: a dropped record is counted, never silent.
func (m *Metrics) WatchAccessLog(dropped, written func() uint64) error {
	return m.register(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "layer0_access_log_dropped_total",
			Help: "Access-log records dropped because the log's queue was full.",
		}, func() float64 { return float64(dropped()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "layer0_access_log_written_total",
			Help: "Access-log records written.",
		}, func() float64 { return float64(written()) }),
	)
}

// Listener counts what the listeners refuse and the memory request bodies hold. Safe for
// concurrent use; register it with Metrics.WatchListener.
type Listener struct {
	refused prometheus.Counter
}

// Refused counts one connection refused at a listener's connection cap.
func (l *Listener) Refused() { l.refused.Inc() }

// WatchListener registers layer0_connections_refused_total (counted through the returned
// Listener) and layer0_body_bytes_in_flight, read from bodies at each scrape.
func (m *Metrics) WatchListener(bodies func() int64) (*Listener, error) {
	l := &Listener{refused: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "layer0_connections_refused_total",
		Help: "Connections refused because a listener had max_connections open.",
	})}
	if err := m.register(l.refused, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "layer0_body_bytes_in_flight",
		Help: "Bytes held by request bodies being read or served, against server.max_body_bytes_in_flight.",
	}, func() float64 { return float64(bodies()) })); err != nil {
		return nil, err
	}
	return l, nil
}
