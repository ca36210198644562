package sim

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
)

// admission lets at most limit sequences run and up to maxWait requests wait, first come first
// served. A slot freed while others wait is handed to the oldest waiter directly, so a request
// arriving at that moment cannot overtake the queue.
type admission struct {
	mu      sync.Mutex
	limit   int
	maxWait int
	running int
	waiting int
	head    *waiter // oldest
	tail    *waiter
}

// waiter is a request queued for a slot; ready is closed when the slot is handed over.
type waiter struct {
	ready      chan struct{}
	granted    bool
	prev, next *waiter
}

// acquire takes a slot, waiting in the queue while ctx allows. It returns a 529 *apierr.Error
// when the queue is full, or ctx.Err().
func (a *admission) acquire(ctx context.Context) error {
	a.mu.Lock()
	if a.running < a.limit && a.head == nil {
		a.running++
		a.mu.Unlock()
		return nil
	}
	if a.waiting >= a.maxWait {
		running, waiting := a.running, a.waiting
		a.mu.Unlock()
		return &apierr.Error{Kind: apierr.Overloaded, RetryAfter: time.Second,
			Message: fmt.Sprintf("sim: overloaded: %d sequences running and %d requests waiting, the most it takes; retry later", running, waiting)}
	}
	w := &waiter{ready: make(chan struct{})}
	a.pushLocked(w)
	a.mu.Unlock()

	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	a.mu.Lock()
	if w.granted { // the slot arrived as ctx ended: pass it on
		a.mu.Unlock()
		a.release()
		return ctx.Err()
	}
	a.removeLocked(w)
	a.mu.Unlock()
	return ctx.Err()
}

// release frees a slot, handing it to the oldest waiter if there is one.
func (a *admission) release() {
	a.mu.Lock()
	if w := a.head; w != nil {
		a.removeLocked(w)
		w.granted = true
		close(w.ready)
	} else {
		a.running--
	}
	a.mu.Unlock()
}

func (a *admission) stats() (running, waiting int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.running, a.waiting
}

func (a *admission) pushLocked(w *waiter) {
	w.prev = a.tail
	if a.tail != nil {
		a.tail.next = w
	} else {
		a.head = w
	}
	a.tail = w
	a.waiting++
}

func (a *admission) removeLocked(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		a.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		a.tail = w.prev
	}
	w.prev, w.next = nil, nil
	a.waiting--
}
