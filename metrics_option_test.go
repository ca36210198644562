package layer0_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/layer0ai/layer0"
)

// TestWithMetrics registers the gateway's metrics with an application's own registry: a request
// served in process is counted there, beside the application's own metric, and a second gateway
// on the same registry is refused rather than silently double-registered.
func TestWithMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	mine := prometheus.NewCounter(prometheus.CounterOpts{Name: "app_things_total", Help: "the application's own"})
	reg.MustRegister(mine)
	mine.Inc()
	g, err := layer0.New(nil, layer0.WithMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	body := `{"model":"sim","max_tokens":8,"messages":[{"role":"user","content":"Hello"}]}`
	r := httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(body))
	r.Header.Set("content-type", "application/json")
	r.Header.Set("anthropic-version", "2023-06-01")
	w := httptest.NewRecorder()
	g.ServeHTTP(w, r)
	if w.Code != http.StatusOK {
		t.Fatalf("got %d %s, want 200", w.Code, w.Body)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var requests, app float64
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "layer0_requests_total":
				requests += m.GetCounter().GetValue()
			case "app_things_total":
				app += m.GetCounter().GetValue()
			}
		}
	}
	if requests != 1 || app != 1 {
		t.Errorf("got layer0_requests_total %v and app_things_total %v in the application's registry, want 1 and 1", requests, app)
	}
	if g2, err := layer0.New(nil, layer0.WithMetrics(reg)); err == nil {
		g2.Close()
		t.Error("a second gateway registered the same metrics on one registry without an error")
	}
}
