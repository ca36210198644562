package sim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/llm"
)

// waitFor polls cond until it holds, for at most 5 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// holder starts a request whose sink blocks on Start until release is closed: it keeps its
// slot for as long as the test wants.
func holder(t *testing.T, e *Engine) (release func(), done <-chan error) {
	t.Helper()
	gate := make(chan struct{})
	ch := make(chan error, 1)
	rec := &recorder{t: t, onSend: func(ev *llm.Event) error {
		if ev.Kind == llm.EventStart {
			<-gate
		}
		return nil
	}}
	go func() { ch <- e.Generate(context.Background(), userReq("hold the slot"), rec) }()
	waitFor(t, "the holder to run", func() bool { return e.Stats().Running == 1 })
	var once sync.Once
	return func() { once.Do(func() { close(gate) }) }, ch
}

func TestQueueFull(t *testing.T) {
	e := newEngine(t, config.Sim{MaxConcurrency: 1, MaxQueue: 1})
	release, held := holder(t, e)
	defer release()

	queued := make(chan error, 1)
	go func() { queued <- e.Generate(context.Background(), userReq("wait"), &recorder{t: t}) }()
	waitFor(t, "one waiter", func() bool { return e.Stats().Waiting == 1 })

	_, err := generate(t, e, userReq("no room"))
	var ae *apierr.Error
	if !errors.As(err, &ae) || ae.Kind != apierr.Overloaded || ae.Status() != 529 || ae.RetryAfter != time.Second {
		t.Fatalf("third request: err = %v, want 529 overloaded with retry-after 1s", err)
	}
	if s := e.Stats(); s.Running != 1 || s.Waiting != 1 {
		t.Errorf("stats = %+v, want 1 running and 1 waiting", s)
	}
	release()
	for _, ch := range []<-chan error{held, queued} {
		if err := <-ch; err != nil {
			t.Errorf("request after release: %v", err)
		}
	}
	if s := e.Stats(); s.Running != 0 || s.Waiting != 0 {
		t.Errorf("stats = %+v, want idle", s)
	}
}

func TestCanceledWaiterLeavesQueue(t *testing.T) {
	e := newEngine(t, config.Sim{MaxConcurrency: 1, MaxQueue: 1})
	release, held := holder(t, e)
	defer release()

	ctx, cancel := context.WithCancel(context.Background())
	queued := make(chan error, 1)
	go func() { queued <- e.Generate(ctx, userReq("give up"), &recorder{t: t}) }()
	waitFor(t, "one waiter", func() bool { return e.Stats().Waiting == 1 })
	cancel()
	select {
	case err := <-queued:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("canceled waiter: err = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("canceled waiter did not return")
	}
	if s := e.Stats(); s.Waiting != 0 {
		t.Errorf("Waiting = %d after the cancel, want 0", s.Waiting)
	}
	// Its place is free: another request can queue, and runs once the holder is done.
	again := make(chan error, 1)
	go func() { again <- e.Generate(context.Background(), userReq("my turn"), &recorder{t: t}) }()
	waitFor(t, "the new waiter", func() bool { return e.Stats().Waiting == 1 })
	release()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if err := <-again; err != nil {
		t.Errorf("new waiter: %v", err)
	}
}

func TestQueueIsFIFO(t *testing.T) {
	e := newEngine(t, config.Sim{MaxConcurrency: 1, MaxQueue: 8})
	release, held := holder(t, e)
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 5 {
		wg.Go(func() {
			rec := &recorder{t: t, onSend: func(ev *llm.Event) error {
				if ev.Kind == llm.EventStart {
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
				}
				return nil
			}}
			if err := e.Generate(context.Background(), userReq(fmt.Sprint("waiter ", i)), rec); err != nil {
				t.Error(err)
			}
		})
		waitFor(t, fmt.Sprintf("waiter %d queued", i), func() bool { return e.Stats().Waiting == i+1 })
	}
	release()
	wg.Wait()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	for i, got := range order {
		if got != i {
			t.Fatalf("waiters ran in order %v, want 0 1 2 3 4", order)
		}
	}
}

// TestAdmissionGrantRace releases a slot to a waiter while its context ends, many times: either
// it gets the slot, or it hands it on, and no slot is ever lost.
func TestAdmissionGrantRace(t *testing.T) {
	a := &admission{limit: 1, maxWait: 1}
	for range 200 {
		if err := a.acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		got := make(chan error, 1)
		go func() { got <- a.acquire(ctx) }()
		waitFor(t, "the waiter", func() bool { _, w := a.stats(); return w == 1 })
		go cancel()
		a.release()
		if err := <-got; err == nil {
			a.release()
		}
		if r, w := a.stats(); r != 0 || w != 0 {
			t.Fatalf("after the race: %d running, %d waiting; want 0 and 0", r, w)
		}
		cancel()
	}
}
