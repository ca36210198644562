package route

import (
	"cmp"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/fakeclock"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// clock is the injected clock, moved by hand.
type clock = fakeclock.Clock

func newClock() *clock { return fakeclock.New(t0) }

// replicas makes named replicas (no engine: routing never calls it) on clock clk.
func replicas(clk *clock, p Policy, names ...string) []*Replica {
	p = withPolicy(p)
	p.Now = clk.Now
	rs := make([]*Replica, len(names))
	for i, n := range names {
		rs[i] = NewReplica(n, nil, p)
	}
	return rs
}

func newTable(t testing.TB, c Config) *Table {
	t.Helper()
	tb, err := New(withDefaults(c))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return tb
}

// Engine errors as engine adapters report them.
var (
	errOverloaded = apierr.New(apierr.Overloaded, "overloaded")
	errServer     = apierr.New(apierr.BadGateway, "upstream answered 500")
	errRateLimit  = apierr.New(apierr.RateLimit, "rate limited")
	errInvalid    = apierr.Invalid("temperature", "must be at most 1")
	errContext    = apierr.New(apierr.InvalidRequest, "This model's maximum context length is 4096 tokens")
)

// withDefaults gives c the default configuration's routing values where a test sets none, as
// the gateway gives the table the configuration's (filled in by internal/config).
func withDefaults(c Config) Config {
	r := config.Default().Routing
	if c.UtilizationThreshold == 0 {
		c.UtilizationThreshold = r.FallbackUtilizationThreshold
	}
	if c.Budget == (BudgetConfig{}) {
		c.Budget = BudgetConfig{Ratio: r.RetryBudget.Ratio, MinRetries: r.RetryBudget.MinRetries, Window: r.RetryBudget.Window}
	}
	if c.RecheckAfter == 0 {
		c.RecheckAfter = r.Health.Interval
	}
	return c
}

// withPolicy gives p the default configuration's values where a test sets none, as the gateway
// gives replicas the configuration's (filled in by internal/config).
func withPolicy(p Policy) Policy {
	r := config.Default().Routing
	d := PolicyOf(r.Ejection, r.Breaker, r.Health)
	e, b, h := &p.Ejection, &p.Breaker, &p.Health
	e.ConsecutiveFailures = cmp.Or(e.ConsecutiveFailures, d.Ejection.ConsecutiveFailures)
	e.BaseTime = cmp.Or(e.BaseTime, d.Ejection.BaseTime)
	e.MaxTime = cmp.Or(e.MaxTime, d.Ejection.MaxTime)
	b.Window = cmp.Or(b.Window, d.Breaker.Window)
	b.MinRequests = cmp.Or(b.MinRequests, d.Breaker.MinRequests)
	b.FailureRatio = cmp.Or(b.FailureRatio, d.Breaker.FailureRatio)
	b.OpenTime = cmp.Or(b.OpenTime, d.Breaker.OpenTime)
	b.HalfOpenProbes = cmp.Or(b.HalfOpenProbes, d.Breaker.HalfOpenProbes)
	h.UnhealthyThreshold = cmp.Or(h.UnhealthyThreshold, d.Health.UnhealthyThreshold)
	h.HealthyThreshold = cmp.Or(h.HealthyThreshold, d.Health.HealthyThreshold)
	h.Timeout = cmp.Or(h.Timeout, d.Health.Timeout)
	return p
}
