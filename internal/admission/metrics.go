package admission

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// MaxTenantLabels bounds the tenant label of layer0_admission_wait_seconds: the first this many
// tenants seen get their own series, later ones share the series of OtherTenant.
const MaxTenantLabels = 64

// OtherTenant is the tenant label of the tenants beyond MaxTenantLabels.
const OtherTenant = "other"

// Metrics are the admission queues' Prometheus metrics. Make them once per process with
// NewMetrics; a nil *Metrics counts nothing.
type Metrics struct {
	depth     *prometheus.GaugeVec
	inflight  *prometheus.GaugeVec
	wait      *prometheus.HistogramVec
	shedTotal *prometheus.CounterVec
	decisions *prometheus.CounterVec

	mu      sync.Mutex
	tenants map[string]struct{}
}

// NewMetrics registers the admission metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "layer0_admission_queue_depth",
			Help: "Requests waiting in layer0's admission queue, by model and priority band.",
		}, []string{"model", "band"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "layer0_admission_in_flight",
			Help: "Requests the admission queue has released to a model's pool and that have not ended.",
		}, []string{"model"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "layer0_admission_wait_seconds",
			Help:    "Time queued requests waited for a slot, by band and tenant (the first 64 tenants; later ones as \"other\").",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
		}, []string{"band", "tenant"}),
		shedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "layer0_admission_shed_total",
			Help: "Requests the admission queue refused with 529/503, by model, band and reason (would_miss_deadline, deadline, queue_full, evicted).",
		}, []string{"model", "band", "reason"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "layer0_admission_requests_total",
			Help: "Requests of gated models, by band and outcome (admitted at once, released after waiting, shed, left while queued).",
		}, []string{"band", "outcome"}),
		tenants: map[string]struct{}{},
	}
	for _, c := range []prometheus.Collector{m.depth, m.inflight, m.wait, m.shedTotal, m.decisions} {
		if err := reg.Register(c); err != nil {
			return nil, errors.Join(errors.New("admission: register metrics"), err)
		}
	}
	return m, nil
}

func (m *Metrics) queued(model, band string, delta float64) {
	if m != nil {
		m.depth.WithLabelValues(model, band).Add(delta)
	}
}

func (m *Metrics) inFlight(model string, delta float64) {
	if m != nil {
		m.inflight.WithLabelValues(model).Add(delta)
	}
}

func (m *Metrics) waited(band, tenant string, d time.Duration) {
	if m == nil {
		return
	}
	m.mu.Lock()
	if _, ok := m.tenants[tenant]; !ok {
		if len(m.tenants) >= MaxTenantLabels {
			tenant = OtherTenant
		} else {
			m.tenants[tenant] = struct{}{}
		}
	}
	m.mu.Unlock()
	m.wait.WithLabelValues(band, tenant).Observe(d.Seconds())
}

func (m *Metrics) shed(model, band, reason string) {
	if m != nil {
		m.shedTotal.WithLabelValues(model, band, reason).Inc()
	}
}

func (m *Metrics) decided(band, outcome string) {
	if m != nil {
		m.decisions.WithLabelValues(band, outcome).Inc()
	}
}
