package limit

import (
	"context"
	"errors"
	"github.com/layer0ai/layer0/internal/store"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/store/redistest"
	"github.com/redis/go-redis/v9"
)

// slowRoundTrips delays every command and pipeline by delay before it goes to Redis (a Redis
// farther away), and records the most calls in flight at once.
type slowRoundTrips struct {
	delay          time.Duration
	inflight, peak atomic.Int64
}

func (r *slowRoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *slowRoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "hello", "client", "auth", "select": // a new connection's handshake
			return next(ctx, cmd)
		}
		defer r.enter()()
		return next(ctx, cmd)
	}
}
func (r *slowRoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		defer r.enter()()
		return next(ctx, cmds)
	}
}

func (r *slowRoundTrips) enter() func() {
	n := r.inflight.Add(1)
	for p := r.peak.Load(); n > p && !r.peak.CompareAndSwap(p, n); p = r.peak.Load() {
	}
	time.Sleep(r.delay)
	return func() { r.inflight.Add(-1) }
}

// TestRedisConcurrencyNotSerialized: requests of one replica through one global concurrency limit
// on Redis do not wait for one another's round trips. With every round trip slowed to 3ms, 16
// requests at a time, each admitted and released 10 times, keep many round trips in flight at
// once, and take far less than the 320 round trips one after another would.
func TestRedisConcurrencyNotSerialized(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv, store.Config{ReplicaID: "a", LeaseTTL: time.Minute})
	l := New(Config{Keys: map[string]Limits{"k": {}}, Global: Limits{Concurrent: 1000}, Store: st})
	ctx := context.Background()
	ls, err := l.Admit(ctx, "k") // the gauge's first operation writes its field
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Release(); err != nil {
		t.Fatal(err)
	}
	const workers, each, delay = 16, 10, 3 * time.Millisecond
	slow := &slowRoundTrips{delay: delay}
	st.c.Client.AddHook(slow)
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				ls, err := l.Admit(ctx, "k")
				if err != nil {
					t.Error(err)
					return
				}
				if err := ls.Release(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	serial := 2 * workers * each * delay
	t.Logf("peak round trips in flight %d; %v for %d requests (one after another: ≥ %v)", slow.peak.Load(), took,
		workers*each, serial)
	if p := slow.peak.Load(); p < workers/2 {
		t.Errorf("at most %d round trips in flight at once for %d concurrent requests: the concurrency limit orders them", p, workers)
	}
	if took > serial/2 {
		t.Errorf("%d requests took %v, not much less than their round trips one after another (%v)", workers*each, took, serial)
	}
	if v, err := l.global.conc.cell.Value(ctx); err != nil || v != 0 {
		t.Errorf("slots after every release: %d %v, want 0", v, err)
	}
	if st.Errors() != 0 {
		t.Errorf("store errors: %d", st.Errors())
	}
}

// TestRedisConcurrencyExactUnderRenewal: three replicas admit and release through a key's and
// the global concurrency limits concurrently while their leases are renewed and their counts
// re-asserted (stale) over and over: never more requests open than a limit, refusals when full,
// and at the end every slot back, each replica's count in Redis exactly what it holds.
func TestRedisConcurrencyExactUnderRenewal(t *testing.T) {
	srv := redistest.Start(t)
	const keyMax, globalMax = 4, 6
	var stores []*Redis
	var lims []*Limiter
	for i := range 3 {
		st := newRedisStore(t, srv, store.Config{ReplicaID: string(rune('a' + i)), LeaseTTL: 600 * time.Millisecond})
		l := New(Config{Keys: map[string]Limits{"x": {Concurrent: keyMax}, "y": {Concurrent: keyMax}},
			Global: Limits{Concurrent: globalMax}, Store: st})
		stores, lims = append(stores, st), append(lims, l)
	}
	ctx := context.Background()
	stop := make(chan struct{})
	var churn sync.WaitGroup
	for _, st := range stores { // renewals and re-assertions racing with the requests
		churn.Add(1)
		go func() {
			defer churn.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
				if i%3 == 0 {
					st.Stale()
				}
				st.Renew()
			}
		}()
	}
	var open [2]atomic.Int64 // "x", all
	var peak [2]atomic.Int64
	up := func(i int) {
		n := open[i].Add(1)
		for p := peak[i].Load(); n > p && !peak[i].CompareAndSwap(p, n); p = peak[i].Load() {
		}
	}
	var admitted, refused atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(20 * time.Second)
	for w := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []string{"x", "y"}[w%2]
			for range 60 {
				if time.Now().After(deadline) {
					return
				}
				ls, err := lims[w%3].Admit(ctx, key)
				var e *apierr.Error
				switch {
				case err == nil:
				case errors.As(err, &e) && e.Kind == apierr.RateLimit:
					refused.Add(1)
					continue
				default:
					t.Error(err)
					return
				}
				admitted.Add(1)
				if key == "x" {
					up(0)
				}
				up(1)
				time.Sleep(time.Duration(w%4) * 200 * time.Microsecond)
				if key == "x" {
					open[0].Add(-1)
				}
				open[1].Add(-1)
				if err := ls.Release(); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	// Quiet, holding some: each replica's count in Redis is what it holds.
	var held []Lease
	for i := range globalMax {
		ls, err := lims[i%3].Admit(ctx, []string{"x", "y"}[i%2])
		if err != nil {
			t.Fatalf("admission %d of %d once all were released: %v", i+1, globalMax, err)
		}
		held = append(held, ls)
	}
	if _, err := lims[0].Admit(ctx, "y"); err == nil {
		t.Error("a request admitted over the global concurrency limit")
	}
	close(stop)
	churn.Wait()
	for _, st := range stores {
		st.Renew()
	}
	check := func(when string, want int64) {
		t.Helper()
		g := lims[0].global.conc.cell.(*redisGauge)
		if v, err := g.Value(ctx); err != nil || v != want {
			t.Errorf("%s: global slots %d %v, want %d", when, v, err, want)
		}
		fields, err := stores[0].c.Client.HGetAll(ctx, g.keys[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		for i, st := range stores {
			g := lims[i].global.conc.cell.(*redisGauge)
			got, h := fields[g.field.Load().name], g.held.Load()
			if h == 0 && got == "" {
				got = "0" // a replica holding none may have let its lease, and field, expire
			}
			if got != itoa(h) || st.Errors() != 0 {
				t.Errorf("%s: replica %d's count in Redis %q, it holds %d (store errors %d); fields %v", when, i, got, h,
					st.Errors(), fields)
			}
		}
	}
	check("holding the limit", globalMax)
	for _, ls := range held {
		if err := ls.Release(); err != nil {
			t.Fatal(err)
		}
	}
	check("all released", 0)
	var asserted uint64
	for i, st := range stores {
		asserted += lims[i].global.conc.cell.(*redisGauge).epoch.Load() - st.epoch0
	}
	t.Logf("admitted %d, refused %d; peak open: key %d, global %d; the global count re-asserted %d times",
		admitted.Load(), refused.Load(), peak[0].Load(), peak[1].Load(), asserted)
	if asserted < 10 {
		t.Errorf("the global count was re-asserted %d times: the test did not race re-assertions with requests", asserted)
	}
	if peak[0].Load() > keyMax || peak[1].Load() > globalMax {
		t.Errorf("peak open requests: key %d (limit %d), global %d (limit %d)", peak[0].Load(), keyMax, peak[1].Load(), globalMax)
	}
	if refused.Load() == 0 || admitted.Load() < 100 {
		t.Errorf("admitted %d, refused %d: the limits were not exercised", admitted.Load(), refused.Load())
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestRedisConcurrencyCountLost: a replica's count lost under it (Redis flushed, no error seen)
// is written again, exactly, by its next admission; and an operation of an epoch that a
// re-assertion replaced (one delayed past its timeout) changes nothing.
func TestRedisConcurrencyCountLost(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv, store.Config{ReplicaID: "a", LeaseTTL: time.Minute})
	l := New(Config{Keys: map[string]Limits{"k": {Concurrent: 10, RequestsPerMinute: 1000}}, Store: st})
	ctx := context.Background()
	g := l.keys["k"].conc.cell.(*redisGauge)
	for range 3 {
		if _, err := l.Admit(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	first := g.field.Load().name
	if err := st.c.Client.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	ls, err := l.Admit(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := g.Value(ctx); err != nil || v != 4 {
		t.Errorf("after the flush and one more admission: %d slots %v, want 4", v, err)
	}
	if g.field.Load().name == first {
		t.Errorf("the count was written again under the same field %q", first)
	}
	// A delayed admission and a delayed release of the replaced field find it gone.
	if v, err := st.run(ctx, gaugeIncScript, g.keys, first, "", int64(-1), int64(10), st.ttlMS); err != nil ||
		len(v) != 2 || v[1] != int64(2) {
		t.Errorf("an admission of the replaced field: %v %v, want lost", v, err)
	}
	if v, err := st.run(ctx, scopeScript, g.keys, 0, 0, 0, st.ttlMS, first, "", int64(-1)); err != nil ||
		len(v) != 1 || v[0] != int64(0) {
		t.Errorf("a release of the replaced field: %v %v, want lost", v, err)
	}
	if v, err := g.Value(ctx); err != nil || v != 4 {
		t.Errorf("after the delayed operations: %d slots %v, want 4", v, err)
	}
	if err := ls.Release(); err != nil {
		t.Fatal(err)
	}
	if v, err := g.Value(ctx); err != nil || v != 3 {
		t.Errorf("after a release: %d slots %v, want 3", v, err)
	}
	if st.Errors() != 0 {
		t.Errorf("store errors: %d", st.Errors())
	}
}
