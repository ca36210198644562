package limit

import (
	"context"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// Rate is a limit of Limit units per Period, enforced by GCRA with a burst of the whole Limit:
// an idle bucket admits Limit units at once, then refills at Limit/Period.
type Rate struct {
	Limit  int64
	Period time.Duration
}

// Status is the state of one rate cell at an instant.
type Status struct {
	// Limit is the configured limit per period.
	Limit int64
	// Remaining is how many units could be taken now (0 when the cell is in debt).
	Remaining int64
	// Reset is when the cell is full again (Limit units available).
	Reset time.Time
	// RetryAfter, on a refused Take, is how long until the same Take would succeed; negative
	// when it never can (the cost exceeds Limit).
	RetryAfter time.Duration
}

// Store holds the limiter's counters. A Limiter resolves its cells once, when it is built, and
// then calls only the cells, so a Store lookup is never on the request path. Cells with equal
// ids are the same state: that is how a Limiter built on reload, or another layer0 replica
// sharing the store, sees the same counters. The in-memory Memory store is one process's state;
// a Redis implementation makes the limits hold across replicas.
type Store interface {
	// Rate returns the rate cell named id, creating it (full) if it does not exist.
	Rate(id string) RateCell
	// Gauge returns the gauge named id, creating it (at zero) if it does not exist.
	Gauge(id string) Gauge
}

// RateCell is one GCRA state: the theoretical arrival time (TAT) of the next unit. All methods are
// atomic and safe for concurrent use. Errors mean the store could not answer (a network store);
// the Limiter then refuses the request (fail closed).
type RateCell interface {
	// Take takes cost units if they fit within r at now, and reports whether it did. The Status
	// is the state after the call; on refusal it carries RetryAfter.
	Take(ctx context.Context, now time.Time, r Rate, cost int64) (Status, bool, error)
	// Add takes cost units unconditionally: a positive cost may put the cell in debt (later
	// Takes wait for it to be repaid), a negative cost refunds, never beyond full.
	Add(ctx context.Context, now time.Time, r Rate, cost int64) (Status, error)
	// Peek returns the state without changing it. RetryAfter is the wait until one unit is
	// available.
	Peek(ctx context.Context, now time.Time, r Rate) (Status, error)
}

// Gauge counts things in flight (concurrent requests). Safe for concurrent use.
type Gauge interface {
	// Inc adds one if the count is below max and reports the count after and whether it added.
	Inc(ctx context.Context, max int64) (int64, bool, error)
	// Dec subtracts one.
	Dec(ctx context.Context) error
	// Value returns the count.
	Value(ctx context.Context) (int64, error)
}

// Memory is the in-process Store: a map of cells, each a lock-free atomic. The zero value is not
// usable; use NewMemory. Safe for concurrent use.
type Memory struct {
	mu     sync.Mutex
	rates  map[string]*memRate
	gauges map[string]*memGauge
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{rates: map[string]*memRate{}, gauges: map[string]*memGauge{}}
}

// Rate implements Store.
func (m *Memory) Rate(id string) RateCell {
	m.mu.Lock()
	defer m.mu.Unlock()
	return cell(m.rates, id, func() *memRate { return &memRate{} })
}

// Gauge implements Store.
func (m *Memory) Gauge(id string) Gauge {
	m.mu.Lock()
	defer m.mu.Unlock()
	return cell(m.gauges, id, func() *memGauge { return &memGauge{} })
}

// cell is the cell of cells with id, made by newCell the first time id is asked for: cells with
// equal ids are the same state. The caller holds the lock that guards cells.
func cell[C any](cells map[string]*C, id string, newCell func() *C) *C {
	c, ok := cells[id]
	if !ok {
		c = newCell()
		cells[id] = c
	}
	return c
}

// memRate keeps the TAT in Unix nanoseconds; zero means "full since forever".
type memRate struct{ tat atomic.Int64 }

func (c *memRate) Take(_ context.Context, now time.Time, r Rate, cost int64) (Status, bool, error) {
	n := now.UnixNano()
	for {
		tat := c.tat.Load()
		next, ok, wait := gcraTake(tat, n, r, cost)
		if !ok {
			st := status(tat, n, r)
			st.RetryAfter = wait
			return st, false, nil
		}
		if c.tat.CompareAndSwap(tat, next) {
			return status(next, n, r), true, nil
		}
	}
}

func (c *memRate) Add(_ context.Context, now time.Time, r Rate, cost int64) (Status, error) {
	n := now.UnixNano()
	for {
		tat := c.tat.Load()
		next := gcraAdd(tat, n, r, cost)
		if c.tat.CompareAndSwap(tat, next) {
			return status(next, n, r), nil
		}
	}
}

func (c *memRate) Peek(_ context.Context, now time.Time, r Rate) (Status, error) {
	n := now.UnixNano()
	tat := c.tat.Load()
	st := status(tat, n, r)
	if st.Remaining < 1 {
		_, _, st.RetryAfter = gcraTake(tat, n, r, 1)
	}
	return st, nil
}

type memGauge struct{ n atomic.Int64 }

func (g *memGauge) Inc(_ context.Context, max int64) (int64, bool, error) {
	for {
		v := g.n.Load()
		if v >= max {
			return v, false, nil
		}
		if g.n.CompareAndSwap(v, v+1) {
			return v + 1, true, nil
		}
	}
}

func (g *memGauge) Dec(context.Context) error {
	g.n.Add(-1)
	return nil
}

func (g *memGauge) Value(context.Context) (int64, error) { return g.n.Load(), nil }

// GCRA (the generic cell rate algorithm, ITU-T I.371) keeps one number per cell: the theoretical
// arrival time TAT. Each unit advances it by the emission interval T = Period/Limit; a take is
// allowed while the new TAT stays within one Period of now, which gives a burst of Limit units
// from idle. The functions below are the whole algorithm, in Unix nanoseconds, so that a network
// store can run the same arithmetic in one atomic script.

// gcraTake returns the new TAT for taking cost units at now, whether it fits, and, when it does
// not, the wait until it would (negative when cost exceeds the limit and never can).
func gcraTake(tat, now int64, r Rate, cost int64) (next int64, ok bool, wait time.Duration) {
	base := max(tat, now)
	inc := interval(r, cost)
	if cost > r.Limit {
		return tat, false, -1
	}
	next = satAdd(base, inc)
	if over := next - now - int64(r.Period); over > 0 {
		return tat, false, time.Duration(over)
	}
	return next, true, 0
}

// gcraAdd returns the new TAT after taking cost units unconditionally (negative refunds). A
// refund never leaves the cell fuller than full: a TAT before now means full.
func gcraAdd(tat, now int64, r Rate, cost int64) int64 {
	base := max(tat, now)
	if cost < 0 {
		return max(base-interval(r, -cost), now)
	}
	return satAdd(base, interval(r, cost))
}

// status describes a cell whose TAT is tat at now.
func status(tat, now int64, r Rate) Status {
	base := max(tat, now)
	room := now + int64(r.Period) - base // time-equivalent of the units available
	rem := int64(0)
	if room > 0 && r.Period > 0 {
		rem = min(mulDiv(room, r.Limit, int64(r.Period)), r.Limit)
	}
	return Status{Limit: r.Limit, Remaining: rem, Reset: time.Unix(0, base)}
}

// interval is the TAT advance for cost (≥ 0) units: cost·Period/Limit without overflow.
func interval(r Rate, cost int64) int64 {
	if r.Limit <= 0 {
		return 0
	}
	return mulDiv(cost, int64(r.Period), r.Limit)
}

// mulDiv returns a·b/c for non-negative a, b and positive c, saturating at MaxInt64.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
