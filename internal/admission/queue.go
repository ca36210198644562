package admission

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
)

// Pool is one generation's settings of a model's queue. A reload hands the queue its next
// generation's Pool; the waiting requests and the slots in flight carry over.
type Pool struct {
	// Model names the pool in metrics and errors.
	Model string
	// Capacity is how many requests the pool's replicas can serve at once now: the sum of the
	// concurrency caps of the replicas that can take a request (not down, ejected or above the
	// utilisation bound). It is called under the queue's lock and must not block.
	Capacity func() int
	// MaxQueue bounds the requests waiting; MaxBytes bounds their estimated memory.
	MaxQueue int
	MaxBytes int64
	// Poll is how often a queue whose head cannot be released looks at Capacity again (a
	// replica back from ejection, a utilisation that fell) when no request ends meanwhile.
	Poll time.Duration
}

// Ticket is one request asking to be admitted.
type Ticket struct {
	// Band is the request's priority band.
	Band *Band
	// Tenant is who shares the band's capacity by weight: the API key's name (a team's when
	// keys are grouped into teams).
	Tenant string
	// Weight is the tenant's share, relative to the other tenants of the band. Positive.
	Weight float64
	// Bytes estimates the memory the request holds while it waits.
	Bytes int64
}

// Decision is what admission did with a request, for its record and decision trace.
type Decision struct {
	// Band and Tenant are the ticket's; Band is "" when the request's model is not gated.
	Band, Tenant string
	// Outcome is OutcomeAdmitted, OutcomeReleased, OutcomeShed or OutcomeLeft.
	Outcome string
	// Reason says why a request was shed (one of the Reason constants).
	Reason string
	// Ahead is how many waiting requests were estimated to go before it when it arrived to a
	// full pool, and Estimate its estimated wait (0 before the pool's service time is known).
	Ahead    int
	Estimate time.Duration
	// Waited is how long it was queued.
	Waited time.Duration
}

// Outcomes of admission (Decision.Outcome).
const (
	OutcomeAdmitted = "admitted" // the pool had room: not queued
	OutcomeReleased = "released" // queued, then released to the pool
	OutcomeShed     = "shed"     // refused with 529/503 and retry-after
	OutcomeLeft     = "left"     // the client went away while queued
)

// Reasons a request is shed (Decision.Reason, layer0_admission_shed_total's reason).
const (
	ReasonWouldMiss = "would_miss_deadline" // its estimated wait exceeds its deadline, refused on arrival
	ReasonDeadline  = "deadline"            // its deadline came while queued
	ReasonQueueFull = "queue_full"          // the queue's count or memory bound, nothing sheddable below it
	ReasonEvicted   = "evicted"             // a sheddable request pushed out by a higher band's arrival
)

// Reasons lists every shed reason, for metrics.
var Reasons = [...]string{ReasonWouldMiss, ReasonDeadline, ReasonQueueFull, ReasonEvicted}

// Queue is the admission queue of one model's pool. It is safe for concurrent use, and lives
// across reloads (Set).
type Queue struct {
	model   string
	now     func() time.Time
	metrics *Metrics

	mu       sync.Mutex
	pool     *Pool
	inFlight int
	waiting  int
	bytes    int64
	bands    []*band       // by priority, highest first
	service  time.Duration // moving average of how long a released request holds its slot
	poll     *time.Timer   // set while a poll is scheduled
}

// NewQueue returns the empty queue of model, reading the clock now (time.Now when nil) and
// counting in m (nothing when nil).
func NewQueue(model string, now func() time.Time, m *Metrics) *Queue {
	if now == nil {
		now = time.Now
	}
	return &Queue{model: model, now: now, metrics: m}
}

// Slot is a request's place in the pool, from admission to Release.
type Slot struct {
	q     *Queue
	b     *band
	start time.Time
}

// Release frees the slot and releases the next waiting request. It is a no-op on the zero
// Slot (a model not gated) and must be called once.
func (s Slot) Release() {
	q := s.q
	if q == nil {
		return
	}
	held := q.now().Sub(s.start)
	q.mu.Lock()
	q.inFlight--
	s.b.inFlight--
	if q.service == 0 {
		q.service = held
	} else {
		q.service += (held - q.service) / 8
	}
	q.dispatchLocked()
	q.mu.Unlock()
	q.metrics.inFlight(q.model, -1)
}

// Acquire admits the request of ticket t to the pool p, waiting in the queue while the pool is
// full, and fills d with what it did. The request waits at most its band's MaxWait (less when
// ctx's deadline is sooner); one that cannot be released within it is shed at once with an
// overloaded error carrying retry-after, and one whose ctx ends while it waits leaves the queue
// at once with ctx's error.
func (q *Queue) Acquire(ctx context.Context, p *Pool, t Ticket, d *Decision) (Slot, error) {
	now := q.now()
	d.Band, d.Tenant = t.Band.Name, t.Tenant
	q.mu.Lock()
	q.pool = p
	b := q.bandLocked(t.Band)
	if c := p.Capacity(); q.waiting == 0 && q.inFlight < c && b.inFlight < b.limit(c) {
		q.inFlight++
		b.inFlight++
		q.mu.Unlock()
		d.Outcome = OutcomeAdmitted
		q.metrics.inFlight(q.model, 1)
		q.metrics.decided(t.Band.Name, OutcomeAdmitted)
		return Slot{q: q, b: b, start: now}, nil
	}
	deadline := now.Add(t.Band.MaxWait)
	if cd, ok := ctx.Deadline(); ok && cd.Before(deadline) {
		deadline = cd
	}
	tn := b.tenant(t.Tenant, t.Weight)
	d.Ahead = q.aheadLocked(b, tn)
	d.Estimate = q.estimateLocked(d.Ahead, b, p)
	if d.Estimate > 0 && now.Add(d.Estimate).After(deadline) {
		q.forgetLocked(b, tn)
		q.mu.Unlock()
		return Slot{}, q.shed(d, ReasonWouldMiss, d.Estimate)
	}
	if !q.makeRoomLocked(b, t.Bytes) {
		q.forgetLocked(b, tn)
		q.mu.Unlock()
		return Slot{}, q.shed(d, ReasonQueueFull, q.retryAfter(d.Ahead, b, p))
	}
	w := &waiter{ready: make(chan struct{}), bytes: t.Bytes}
	b.push(tn, w)
	q.waiting++
	q.bytes += t.Bytes
	q.metrics.queued(q.model, b.name, 1)
	q.dispatchLocked() // schedules the poll
	q.mu.Unlock()
	return q.wait(ctx, w, b, p, t, d, now, deadline)
}

// wait blocks until w is granted or shed, ctx ends, or its deadline comes.
func (q *Queue) wait(ctx context.Context, w *waiter, b *band, p *Pool, t Ticket, d *Decision, since, deadline time.Time) (Slot, error) {
	timer := time.NewTimer(deadline.Sub(since))
	defer timer.Stop()
	var gone error
	select {
	case <-w.ready:
	case <-ctx.Done():
		gone = context.Cause(ctx)
	case <-timer.C:
	}
	now := q.now()
	d.Waited = now.Sub(since)
	q.mu.Lock()
	state, err := w.state, w.err
	if state == waiting {
		q.unqueueLocked(b, w)
	}
	q.mu.Unlock()
	q.metrics.waited(b.name, t.Tenant, d.Waited)
	switch {
	case state == granted:
		d.Outcome = OutcomeReleased
		q.metrics.decided(b.name, OutcomeReleased)
		return Slot{q: q, b: b, start: now}, nil
	case state == shed:
		d.Outcome, d.Reason = OutcomeShed, w.reason
		q.metrics.decided(b.name, OutcomeShed)
		return Slot{}, err
	case gone != nil:
		d.Outcome = OutcomeLeft
		q.metrics.decided(b.name, OutcomeLeft)
		return Slot{}, fmt.Errorf("admission: the client left the queue of %s: %w", q.model, gone)
	}
	return Slot{}, q.shed(d, ReasonDeadline, q.retryAfter(d.Ahead, b, p))
}

// unqueueLocked takes a waiting w out of the queue.
func (q *Queue) unqueueLocked(b *band, w *waiter) {
	b.remove(w)
	q.waiting--
	q.bytes -= w.bytes
	q.metrics.queued(q.model, b.name, -1)
}

// forgetLocked drops a tenant made for a request that was never queued.
func (q *Queue) forgetLocked(b *band, t *tenant) {
	if t.n == 0 {
		delete(b.tenants, t.name)
	}
}

// bandLocked returns the queue's band for bd, made on first use in priority order.
func (q *Queue) bandLocked(bd *Band) *band {
	for _, b := range q.bands {
		if b.name == bd.Name {
			b.set(bd)
			return b
		}
	}
	b := newBand(bd)
	i := 0
	for i < len(q.bands) && q.bands[i].priority >= b.priority {
		i++
	}
	q.bands = append(q.bands, nil)
	copy(q.bands[i+1:], q.bands[i:])
	q.bands[i] = b
	return b
}

// dispatchLocked releases waiting requests while the pool has room, highest band first, and
// schedules a poll when requests wait on a pool that has none.
func (q *Queue) dispatchLocked() {
	if q.waiting == 0 || q.pool == nil {
		return
	}
	c := q.pool.Capacity()
	for released := true; released && q.inFlight < c && q.waiting > 0; {
		released = false
		for _, b := range q.bands {
			if b.n == 0 || b.inFlight >= b.limit(c) {
				continue // a band at its share leaves the slot to the bands below
			}
			w := b.pop()
			q.waiting--
			q.bytes -= w.bytes
			q.inFlight++
			b.inFlight++
			w.state = granted
			close(w.ready)
			q.metrics.queued(q.model, b.name, -1)
			q.metrics.inFlight(q.model, 1)
			released = true
			break
		}
	}
	if q.waiting > 0 && q.poll == nil && q.pool.Poll > 0 {
		q.poll = time.AfterFunc(q.pool.Poll, func() {
			q.mu.Lock()
			q.poll = nil
			q.dispatchLocked()
			q.mu.Unlock()
		})
	}
}

// aheadLocked estimates how many waiting requests go before one more of tenant t in band b:
// every request of a higher band, and b's share by deficit round robin.
func (q *Queue) aheadLocked(b *band, t *tenant) int {
	n := 0
	for _, o := range q.bands {
		if o.priority > b.priority {
			n += o.n
		}
	}
	return n + b.ahead(t)
}

// estimateLocked is the wait of a request of band b with ahead requests before it: the pool
// releases Capacity requests (the band's share of them) per service time, the observed moving
// average of how long a request holds its slot. 0 while no request has ended yet (nothing is
// known).
func (q *Queue) estimateLocked(ahead int, b *band, p *Pool) time.Duration {
	if q.service == 0 {
		return 0
	}
	c := max(b.limit(p.Capacity()), 1)
	return time.Duration(int64(ahead+1) * int64(q.service) / int64(c))
}

// retryAfter is the retry-after of a shed request: its estimated wait, at least a second.
func (q *Queue) retryAfter(ahead int, b *band, p *Pool) time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	return max(q.estimateLocked(ahead, b, p), time.Second)
}

// makeRoomLocked reports whether one more request of band b with size bytes fits the queue's
// bounds, evicting the newest requests of the heaviest tenants of lower sheddable bands (lowest
// first) when it does not and b is not itself sheddable.
func (q *Queue) makeRoomLocked(b *band, size int64) bool {
	p := q.pool
	for q.waiting+1 > p.MaxQueue || (p.MaxBytes > 0 && q.bytes+size > p.MaxBytes) {
		if b.sheddable || !q.evictLocked(b.priority) {
			return false
		}
	}
	return true
}

// evictLocked sheds one waiting request of the lowest sheddable band below priority, and
// reports whether there was one.
func (q *Queue) evictLocked(priority int) bool {
	for i := len(q.bands) - 1; i >= 0; i-- {
		o := q.bands[i]
		if o.priority >= priority {
			return false
		}
		if !o.sheddable || o.n == 0 {
			continue
		}
		w := o.heaviest().q.Back().Value.(*waiter)
		q.unqueueLocked(o, w)
		w.state, w.reason = shed, ReasonEvicted
		w.err = q.shedError(ReasonEvicted, max(q.estimateLocked(q.waiting, o, q.pool), time.Second))
		q.metrics.shed(q.model, o.name, ReasonEvicted)
		close(w.ready)
		return true
	}
	return false
}

// shed records a refusal of the request of d and returns its error.
func (q *Queue) shed(d *Decision, reason string, retry time.Duration) error {
	d.Outcome, d.Reason = OutcomeShed, reason
	q.metrics.shed(q.model, d.Band, reason)
	q.metrics.decided(d.Band, OutcomeShed)
	return q.shedError(reason, retry)
}

// shedError is the overloaded error of a shed request: 529 overloaded_error for Anthropic
// clients, 503 for OpenAI's, with retry-after.
func (q *Queue) shedError(reason string, retry time.Duration) *apierr.Error {
	msg := "model " + q.model + " is overloaded: "
	switch reason {
	case ReasonWouldMiss:
		msg += "the estimated wait for a slot exceeds the request's deadline"
	case ReasonDeadline:
		msg += "no slot freed within the request's deadline"
	case ReasonQueueFull:
		msg += "the admission queue is full"
	case ReasonEvicted:
		msg += "the request was shed for higher-priority requests"
	}
	return &apierr.Error{Kind: apierr.Overloaded, Code: "ADMISSION_SHED", Message: msg, RetryAfter: retry,
		Cause: errors.New("admission: shed: " + reason)}
}

// Stats is a queue's state now.
type Stats struct {
	InFlight, Waiting int
	Bytes             int64
	Service           time.Duration
}

// Stats returns the queue's state now.
func (q *Queue) Stats() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return Stats{InFlight: q.inFlight, Waiting: q.waiting, Bytes: q.bytes, Service: q.service}
}
