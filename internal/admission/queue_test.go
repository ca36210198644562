package admission

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/fakeclock"
)

var (
	interactive = &Band{Name: "interactive", Priority: 300, MaxWait: time.Hour}
	standard    = &Band{Name: "standard", Priority: 200, MaxWait: time.Hour}
	batch       = &Band{Name: "batch", Priority: 100, MaxWait: time.Hour, Sheddable: true}
)

// harness drives one queue of a fixed capacity on a fake clock.
type harness struct {
	t     *testing.T
	clk   *fakeclock.Clock
	q     *Queue
	pool  *Pool
	cap   atomic.Int64
	got   chan grant
	held  []Slot
	mu    sync.Mutex
	order []string
}

type grant struct {
	id   string
	slot Slot
	err  error
	d    Decision
}

func newHarness(t *testing.T, capacity int) *harness {
	h := &harness{t: t, clk: fakeclock.New(time.Unix(1000, 0)), got: make(chan grant, 1000)}
	h.cap.Store(int64(capacity))
	h.q = NewQueue("m", h.clk.Now, nil)
	h.pool = &Pool{Model: "m", Capacity: func() int { return int(h.cap.Load()) }, MaxQueue: 1000, MaxBytes: 1 << 30}
	return h
}

// fill takes every slot at once.
func (h *harness) fill() {
	for range h.cap.Load() {
		var d Decision
		s, err := h.q.Acquire(context.Background(), h.pool, Ticket{Band: standard, Tenant: "x", Weight: 1}, &d)
		if err != nil || d.Outcome != OutcomeAdmitted {
			h.t.Fatalf("fill: %v %+v", err, d)
		}
		h.held = append(h.held, s)
	}
}

// enqueue starts a request of tenant in band and waits until it is queued.
func (h *harness) enqueue(ctx context.Context, id string, b *Band, tenant string, weight float64) {
	before := h.q.Stats().Waiting
	go func() {
		var d Decision
		s, err := h.q.Acquire(ctx, h.pool, Ticket{Band: b, Tenant: tenant, Weight: weight, Bytes: 100}, &d)
		h.got <- grant{id: id, slot: s, err: err, d: d}
	}()
	for i := 0; h.q.Stats().Waiting == before; i++ {
		if i > 5000 {
			h.t.Fatalf("%s never queued", id)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// drain releases one held slot at a time, advancing the clock by hold each time, and returns
// the ids in the order they were released.
func (h *harness) drain(n int, hold time.Duration) []string {
	var ids []string
	for range n {
		s := h.held[0]
		h.held = h.held[1:]
		h.clk.Advance(hold)
		s.Release()
		select {
		case g := <-h.got:
			if g.err != nil {
				h.t.Fatalf("%s: %v", g.id, g.err)
			}
			ids = append(ids, g.id)
			h.held = append(h.held, g.slot)
		case <-time.After(5 * time.Second):
			h.t.Fatalf("nothing released after %v", ids)
		}
	}
	return ids
}

func count(ids []string, prefix string) int {
	n := 0
	for _, id := range ids {
		if strings.HasPrefix(id, prefix) {
			n++
		}
	}
	return n
}

func TestTenantsShareByRoundRobin(t *testing.T) {
	h := newHarness(t, 1)
	h.fill()
	for i := range 10 {
		h.enqueue(context.Background(), fmt.Sprintf("a%d", i), standard, "A", 1)
	}
	for i := range 3 {
		h.enqueue(context.Background(), fmt.Sprintf("b%d", i), standard, "B", 1)
	}
	ids := h.drain(13, time.Second)
	// B arrived behind ten of A's, yet its three are released within the first six.
	if got := count(ids[:6], "b"); got != 3 {
		t.Fatalf("release order %v: %d of B's in the first six, want 3", ids, got)
	}
	// Each tenant's own requests stay in order.
	if ids[0] != "a0" || ids[len(ids)-1] != "a9" {
		t.Fatalf("release order %v", ids)
	}
}

func TestWeightsShareInProportion(t *testing.T) {
	h := newHarness(t, 1)
	h.fill()
	for i := range 12 {
		h.enqueue(context.Background(), fmt.Sprintf("a%d", i), standard, "A", 2)
		h.enqueue(context.Background(), fmt.Sprintf("b%d", i), standard, "B", 1)
	}
	ids := h.drain(12, time.Second)
	if a := count(ids, "a"); a != 8 {
		t.Fatalf("release order %v: A got %d of 12, want 8 (weight 2:1)", ids, a)
	}
	// A fractional weight is released every other turn.
	h2 := newHarness(t, 1)
	h2.fill()
	for i := range 6 {
		h2.enqueue(context.Background(), fmt.Sprintf("a%d", i), standard, "A", 1)
		h2.enqueue(context.Background(), fmt.Sprintf("b%d", i), standard, "B", 0.5)
	}
	ids = h2.drain(6, time.Second)
	if a := count(ids, "a"); a != 4 {
		t.Fatalf("release order %v: A got %d of 6, want 4 (weight 1:0.5)", ids, a)
	}
}

func TestWorkConserving(t *testing.T) {
	h := newHarness(t, 2)
	h.fill()
	for i := range 8 {
		h.enqueue(context.Background(), fmt.Sprintf("a%d", i), standard, "A", 1)
	}
	// B is idle: A gets every slot, in order.
	ids := h.drain(8, time.Second)
	if strings.Join(ids, ",") != "a0,a1,a2,a3,a4,a5,a6,a7" {
		t.Fatalf("release order %v", ids)
	}
}

func TestHigherBandFirst(t *testing.T) {
	h := newHarness(t, 1)
	h.fill()
	for i := range 5 {
		h.enqueue(context.Background(), fmt.Sprintf("batch%d", i), batch, "A", 1)
	}
	h.enqueue(context.Background(), "std0", standard, "B", 1)
	h.enqueue(context.Background(), "int0", interactive, "C", 1)
	ids := h.drain(7, time.Second)
	if ids[0] != "int0" || ids[1] != "std0" {
		t.Fatalf("release order %v: want int0, std0 first", ids)
	}
}

func TestShedWhenEstimateMissesDeadline(t *testing.T) {
	h := newHarness(t, 2)
	h.fill()
	// Learn the service time: each request holds its slot 10s.
	h.enqueue(context.Background(), "w0", standard, "A", 1)
	h.enqueue(context.Background(), "w1", standard, "A", 1)
	h.drain(2, 10*time.Second)
	short := &Band{Name: "short", Priority: 200, MaxWait: 30 * time.Second}
	// Ahead+1 requests at 2 per 10s: the fifth waiter's estimate is 25s, the sixth's 30s+.
	for i := range 5 {
		h.enqueue(context.Background(), fmt.Sprintf("q%d", i), short, "A", 1)
	}
	start := time.Now()
	var d Decision
	_, err := h.q.Acquire(context.Background(), h.pool, Ticket{Band: short, Tenant: "A", Weight: 1}, &d)
	var e *apierr.Error
	if !errors.As(err, &e) || e.Kind != apierr.Overloaded || e.RetryAfter < 30*time.Second {
		t.Fatalf("err %v (%+v), want overloaded with retry-after ≥ 30s", err, e)
	}
	if d.Outcome != OutcomeShed || d.Reason != ReasonWouldMiss || d.Ahead != 5 {
		t.Fatalf("decision %+v", d)
	}
	if el := time.Since(start); el > time.Second {
		t.Fatalf("shed after %v, want at once", el)
	}
	// Another tenant is estimated by its share, not the whole queue: it fits.
	h.enqueue(context.Background(), "other", short, "B", 1)
}

func TestDeadlineShedsWhileQueued(t *testing.T) {
	h := newHarness(t, 1)
	h.q = NewQueue("m", time.Now, nil) // the real clock: the deadline timer is real
	h.fill()
	b := &Band{Name: "quick", Priority: 200, MaxWait: 50 * time.Millisecond}
	start := time.Now()
	h.enqueue(context.Background(), "late", b, "A", 1)
	g := <-h.got
	el := time.Since(start)
	var e *apierr.Error
	if !errors.As(g.err, &e) || e.Kind != apierr.Overloaded || g.d.Reason != ReasonDeadline {
		t.Fatalf("err %v, decision %+v", g.err, g.d)
	}
	if el < 50*time.Millisecond || el > 2*time.Second {
		t.Fatalf("shed after %v, want at its 50ms deadline", el)
	}
	if st := h.q.Stats(); st.Waiting != 0 || st.Bytes != 0 {
		t.Fatalf("stats %+v after the shed", st)
	}
}

func TestClientLeavesAtOnce(t *testing.T) {
	h := newHarness(t, 1)
	h.fill()
	ctx, cancel := context.WithCancel(context.Background())
	h.enqueue(ctx, "gone", standard, "A", 1)
	h.enqueue(context.Background(), "stays", standard, "B", 1)
	cancel()
	g := <-h.got
	if g.id != "gone" || !errors.Is(g.err, context.Canceled) || g.d.Outcome != OutcomeLeft {
		t.Fatalf("%s: %v %+v", g.id, g.err, g.d)
	}
	if st := h.q.Stats(); st.Waiting != 1 {
		t.Fatalf("stats %+v, want one waiting", st)
	}
	if ids := h.drain(1, time.Second); ids[0] != "stays" {
		t.Fatalf("released %v", ids)
	}
}

func TestFullQueueEvictsSheddable(t *testing.T) {
	h := newHarness(t, 1)
	h.pool.MaxQueue = 3
	h.fill()
	h.enqueue(context.Background(), "b0", batch, "A", 1)
	h.enqueue(context.Background(), "b1", batch, "A", 1)
	h.enqueue(context.Background(), "c0", batch, "C", 1)
	// A batch arrival to a full queue is refused; it evicts nothing.
	var d Decision
	if _, err := h.q.Acquire(context.Background(), h.pool, Ticket{Band: batch, Tenant: "D", Weight: 1}, &d); d.Reason != ReasonQueueFull || err == nil {
		t.Fatalf("batch arrival: %v %+v", err, d)
	}
	// An interactive one evicts the newest request of the heaviest batch tenant.
	go func() {
		var d Decision
		s, err := h.q.Acquire(context.Background(), h.pool, Ticket{Band: interactive, Tenant: "E", Weight: 1}, &d)
		h.got <- grant{id: "i0", slot: s, err: err, d: d}
	}()
	g := <-h.got
	if g.id != "b1" || g.d.Reason != ReasonEvicted {
		t.Fatalf("evicted %s %+v, want b1", g.id, g.d)
	}
	if ids := h.drain(1, time.Second); ids[0] != "i0" {
		t.Fatalf("released %v", ids)
	}
}

func TestMemoryBound(t *testing.T) {
	h := newHarness(t, 1)
	h.pool.MaxBytes = 250
	h.fill()
	h.enqueue(context.Background(), "s0", standard, "A", 1) // 100 bytes each
	h.enqueue(context.Background(), "s1", standard, "A", 1)
	var d Decision
	_, err := h.q.Acquire(context.Background(), h.pool, Ticket{Band: standard, Tenant: "B", Weight: 1, Bytes: 100}, &d)
	if err == nil || d.Reason != ReasonQueueFull {
		t.Fatalf("%v %+v", err, d)
	}
	if st := h.q.Stats(); st.Bytes != 200 || st.Waiting != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestCapacityPolled(t *testing.T) {
	h := newHarness(t, 1)
	h.pool.Poll = 5 * time.Millisecond
	h.fill()
	h.enqueue(context.Background(), "w", standard, "A", 1)
	h.cap.Store(2) // a replica came back: nothing ended, the poll releases the waiter
	select {
	case g := <-h.got:
		if g.err != nil || g.d.Outcome != OutcomeReleased {
			t.Fatalf("%v %+v", g.err, g.d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter was never released")
	}
}

func TestMaxShareKeepsSlotsForHigherBands(t *testing.T) {
	h := newHarness(t, 4)
	half := &Band{Name: "half", Priority: 100, MaxWait: time.Hour, Sheddable: true, MaxShare: 0.5}
	for i := range 2 {
		var d Decision
		s, err := h.q.Acquire(context.Background(), h.pool, Ticket{Band: half, Tenant: "C", Weight: 1}, &d)
		if err != nil || d.Outcome != OutcomeAdmitted {
			t.Fatalf("burst %d: %v %+v", i, err, d)
		}
		h.held = append(h.held, s)
	}
	// The band holds its half: the next waits although two slots are free.
	h.enqueue(context.Background(), "c2", half, "C", 1)
	// An interactive request takes a free slot at once.
	var d Decision
	s, err := h.q.Acquire(context.Background(), h.pool, Ticket{Band: interactive, Tenant: "I", Weight: 1}, &d)
	if err != nil || d.Outcome != OutcomeReleased && d.Outcome != OutcomeAdmitted {
		t.Fatalf("interactive: %v %+v", err, d)
	}
	h.held = append(h.held, s)
	if st := h.q.Stats(); st.InFlight != 3 || st.Waiting != 1 {
		t.Fatalf("stats %+v", st)
	}
	// A batch slot ending releases the waiting batch request.
	if ids := h.drain(1, time.Second); ids[0] != "c2" {
		t.Fatalf("released %v", ids)
	}
}
