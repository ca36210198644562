package route

import (
	"context"
	"errors"
	"testing"
	"time"
)

// rop is one step of a replica scenario: advance the clock, then report an outcome (or begin
// an attempt that is expected to be refused), then check the state.
type rop struct {
	advance time.Duration
	report  error // reported after a successful Begin
	nothing bool  // do not begin or report, only check
	refused bool  // Begin must return false

	wantAvailable bool
	wantBreaker   BreakerState
	wantEjected   time.Duration // EjectedUntil - now, 0 when not ejected
}

func runReplica(t *testing.T, r *Replica, clk *clock, ops []rop) {
	t.Helper()
	for i, o := range ops {
		clk.Advance(o.advance)
		switch {
		case o.refused:
			if r.Begin() {
				t.Fatalf("op %d: Begin succeeded, want refused", i)
			}
		case !o.nothing:
			if !r.Begin() {
				t.Fatalf("op %d: Begin refused, want an attempt", i)
			}
			r.Report(o.report, time.Millisecond)
		}
		now := clk.Now()
		st := r.Status()
		if got := r.available(now); got != o.wantAvailable {
			t.Errorf("op %d: got available %v, want %v", i, got, o.wantAvailable)
		}
		if st.Breaker != o.wantBreaker {
			t.Errorf("op %d: got breaker %v, want %v", i, st.Breaker, o.wantBreaker)
		}
		var ej time.Duration
		if !st.EjectedUntil.IsZero() {
			ej = st.EjectedUntil.Sub(now)
		}
		if ej != o.wantEjected {
			t.Errorf("op %d: got ejected for %v more, want %v", i, ej, o.wantEjected)
		}
	}
}

func TestEjection(t *testing.T) {
	clk := newClock()
	r := replicas(clk, Policy{
		Ejection: Ejection{ConsecutiveFailures: 3, BaseTime: 10 * time.Second, MaxTime: 40 * time.Second},
		Breaker:  Breaker{FailureRatio: 2}, // never opens: ejection alone
	}, "r")[0]
	up := rop{wantAvailable: true}
	fail := rop{report: errServer, wantAvailable: true}
	runReplica(t, r, clk, []rop{
		fail, fail,
		{report: nil, wantAvailable: true}, // a success resets the count
		fail, fail,
		{report: errRateLimit, wantAvailable: true}, // not the replica's fault: counts neither way
		{report: errInvalid, wantAvailable: true},
		{report: context.Canceled, wantAvailable: true},
		{report: errServer, wantEjected: 10 * time.Second},
		{nothing: true, advance: 9 * time.Second, wantEjected: time.Second},
		{refused: true, wantEjected: time.Second},
		{nothing: true, advance: time.Second, wantAvailable: true}, // back, with a clean count
		fail, fail,
		{report: errServer, wantEjected: 20 * time.Second}, // second ejection: doubled
		{nothing: true, advance: 20 * time.Second, wantAvailable: true},
		fail, fail,
		{report: errOverloaded, wantEjected: 40 * time.Second}, // third: doubled again
		{nothing: true, advance: 40 * time.Second, wantAvailable: true},
		fail, fail,
		{report: errServer, wantEjected: 40 * time.Second}, // capped at MaxTime
		// In for MaxTime after the ejection ends: the backoff starts over.
		{nothing: true, advance: 40*time.Second + 40*time.Second, wantAvailable: true},
		up,
		fail, fail,
		{report: errServer, wantEjected: 10 * time.Second},
	})
}

func TestEjectionDisabled(t *testing.T) {
	clk := newClock()
	r := replicas(clk, Policy{Ejection: Ejection{ConsecutiveFailures: -1}, Breaker: Breaker{FailureRatio: 2}}, "r")[0]
	ops := make([]rop, 50)
	for i := range ops {
		ops[i] = rop{report: errServer, wantAvailable: true}
	}
	runReplica(t, r, clk, ops)
}

func TestBreaker(t *testing.T) {
	clk := newClock()
	r := replicas(clk, Policy{
		Ejection: Ejection{ConsecutiveFailures: -1}, // the breaker alone
		Breaker:  Breaker{Window: 10 * time.Second, MinRequests: 4, FailureRatio: 0.5, OpenTime: 5 * time.Second, HalfOpenProbes: 2},
	}, "r")[0]
	ok := rop{wantAvailable: true}
	runReplica(t, r, clk, []rop{
		ok, ok,
		{report: errServer, wantAvailable: true}, // 1 of 3 failed; too few requests anyway
		// Failures older than the window do not count.
		{advance: 11 * time.Second, report: errServer, wantAvailable: true},
		{report: errServer, wantAvailable: true}, // 2 of 2: under MinRequests
		ok,
		{report: errServer, wantBreaker: Open}, // 3 of 4 failed: open
		{refused: true, wantBreaker: Open},
		{nothing: true, advance: 5 * time.Second, wantAvailable: true, wantBreaker: HalfOpen},
		// Half-open: a failure reopens at once.
		{report: errServer, wantBreaker: Open},
		{nothing: true, advance: 5 * time.Second, wantAvailable: true, wantBreaker: HalfOpen},
		// Two probes must succeed; a neutral outcome frees its slot without counting.
		{report: errRateLimit, wantAvailable: true, wantBreaker: HalfOpen},
		{report: nil, wantAvailable: true, wantBreaker: HalfOpen},
		{report: nil, wantAvailable: true, wantBreaker: Closed},
		// Closed again with a fresh window: one failure does not reopen it.
		{report: errServer, wantAvailable: true},
	})
}

func TestBreakerProbeSlots(t *testing.T) {
	clk := newClock()
	r := replicas(clk, Policy{
		Ejection: Ejection{ConsecutiveFailures: -1},
		Breaker:  Breaker{MinRequests: 1, OpenTime: time.Second, HalfOpenProbes: 1},
	}, "r")[0]
	r.Begin()
	r.Report(errServer, 0)
	clk.Advance(time.Second)
	if !r.Begin() {
		t.Fatal("half-open: first Begin refused, want the probe")
	}
	if r.Begin() {
		t.Fatal("half-open: second Begin admitted while the probe is in flight")
	}
	if r.available(clk.Now()) {
		t.Error("got available while the only probe slot is taken")
	}
	r.Report(nil, time.Millisecond)
	if st := r.Status(); st.Breaker != Closed || st.Outstanding != 0 {
		t.Errorf("got %v with %d outstanding, want closed with 0", st.Breaker, st.Outstanding)
	}
}

func TestHealthCheck(t *testing.T) {
	clk := newClock()
	r := replicas(clk, Policy{Health: Health{UnhealthyThreshold: 2, HealthyThreshold: 2}}, "r")[0]
	var fail bool
	r.Probe = func(context.Context) error {
		if fail {
			return errors.New("503")
		}
		return nil
	}
	tests := []struct {
		fail     bool
		wantDown bool
	}{
		{false, false},
		{true, false}, // one failure is not enough
		{false, false},
		{true, false},
		{true, true}, // two in a row: down
		{false, true},
		{true, true},
		{false, true},
		{false, false}, // two passes in a row: up
	}
	for i, tt := range tests {
		fail = tt.fail
		err := r.Check(context.Background())
		if (err != nil) != tt.fail {
			t.Errorf("check %d: got %v, want failure %v", i, err, tt.fail)
		}
		if got := r.Status().Down; got != tt.wantDown {
			t.Errorf("check %d: got down %v, want %v", i, got, tt.wantDown)
		}
		if got := r.Begin(); got == tt.wantDown {
			t.Errorf("check %d: got Begin %v while down is %v", i, got, tt.wantDown)
		} else if got {
			r.Report(nil, 0)
		}
	}
	// Without a probe there is nothing to check.
	if err := replicas(clk, Policy{}, "x")[0].Check(context.Background()); err != nil {
		t.Errorf("no probe: got %v, want nil", err)
	}
}

func TestReplicaStatus(t *testing.T) {
	clk := newClock()
	r := replicas(clk, Policy{}, "r")[0]
	r.SetUtilization(0.5)
	r.Begin()
	r.Begin()
	r.Report(nil, 100*time.Millisecond)
	r.Begin()
	r.Report(nil, 200*time.Millisecond)
	st := r.Status()
	if st.Name != "r" || st.Outstanding != 1 || st.Utilization != 0.5 || st.Latency != 112500*time.Microsecond {
		t.Errorf("got %+v, want r, 1 outstanding, utilisation 0.5, latency 112.5ms", st)
	}
	r.SetUtilization(nanValue())
	if got := r.Utilization(); got != 0 {
		t.Errorf("NaN utilisation: got %v, want 0", got)
	}
	for s, want := range map[BreakerState]string{Closed: "closed", Open: "open", HalfOpen: "half-open"} {
		if s.String() != want {
			t.Errorf("got %q, want %q", s.String(), want)
		}
	}
}

func nanValue() float64 {
	zero := 0.0
	return zero / zero
}
