package limit

import (
	"context"
	"errors"
	"github.com/layer0ai/layer0/internal/store"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/store/redistest"
)

// newRedisStore returns a store on srv with a generous timeout: the race detector on a busy
// machine must not turn into store errors.
func newRedisStore(t *testing.T, srv *redistest.Server, c store.Config) *Redis {
	t.Helper()
	client, err := store.Dial([]string{srv.URL()}, "", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Client = client
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	return newLimits(t, c)
}

// newLimits returns the limits' store on a new connection of c, both closed when t ends.
func newLimits(t testing.TB, c store.Config) *Redis {
	t.Helper()
	conn, err := store.New(c)
	if err != nil {
		t.Fatal(err)
	}
	st, err := NewRedis(conn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close(); conn.Close() })
	return st
}

// TestRedisRateMatchesMemory runs the same random operations on a Memory cell and a Redis cell
// with one clock: every answer must be the same, to the nanosecond.
func TestRedisRateMatchesMemory(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv, store.Config{ReplicaID: "a"})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, r := range []Rate{{Limit: 100, Period: Minute}, {Limit: 7, Period: Minute}, {Limit: 100000, Period: Minute}} {
		mem := NewMemory().Rate("x")
		red := st.Rate("matches/" + time.Duration(r.Limit).String())
		now := time.Unix(1_800_000_000, 123_456_789)
		// The edges first: a whole burst from full fits exactly; one more does not, until one
		// emission interval has passed.
		for i, step := range []struct {
			after time.Duration
			cost  int64
		}{{0, r.Limit}, {0, 1}, {interval1(r) - 1, 1}, {1, 1}, {0, 1}} {
			now = now.Add(step.after)
			ms, mok, _ := mem.Take(ctx, now, r, step.cost)
			rs, rok, err := red.Take(ctx, now, r, step.cost)
			if err != nil || ms != rs || mok != rok || mok != (i == 0 || i == 3) {
				t.Fatalf("rate %v edge %d: memory %+v %v, redis %+v %v %v", r, i, ms, mok, rs, rok, err)
			}
		}
		for i := 0; i < 400; i++ {
			now = now.Add(time.Duration(rng.Int64N(int64(r.Period / 20))))
			cost := rng.Int64N(r.Limit/3 + 2)
			switch op := rng.IntN(4); op {
			case 0, 1:
				if rng.IntN(20) == 0 {
					cost = r.Limit + 1 // never fits
				}
				ms, mok, merr := mem.Take(ctx, now, r, cost)
				rs, rok, rerr := red.Take(ctx, now, r, cost)
				if merr != nil || rerr != nil || ms != rs || mok != rok {
					t.Fatalf("rate %v step %d take %d: memory %+v %v %v, redis %+v %v %v", r, i, cost, ms, mok, merr, rs, rok, rerr)
				}
			case 2:
				if rng.IntN(2) == 0 {
					cost = -cost
				}
				ms, merr := mem.Add(ctx, now, r, cost)
				rs, rerr := red.Add(ctx, now, r, cost)
				if merr != nil || rerr != nil || ms != rs {
					t.Fatalf("rate %v step %d add %d: memory %+v %v, redis %+v %v", r, i, cost, ms, merr, rs, rerr)
				}
			case 3:
				ms, merr := mem.Peek(ctx, now, r)
				rs, rerr := red.Peek(ctx, now, r)
				if merr != nil || rerr != nil || ms != rs {
					t.Fatalf("rate %v step %d peek: memory %+v %v, redis %+v %v", r, i, ms, merr, rs, rerr)
				}
			}
		}
	}
	if n := st.Errors(); n != 0 {
		t.Errorf("store errors: %d, want 0", n)
	}
}

// interval1 is the emission interval of one unit.
func interval1(r Rate) time.Duration { return time.Duration(interval(r, 1)) }

// TestRedisExactAcrossReplicas: three Limiters, each on its own connection to one Redis (three
// replicas), 1000 concurrent admissions of a key limited to 100 requests per minute: exactly
// 100 are admitted.
func TestRedisExactAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	t0 := time.Now() // a clock standing still: the refill (one every 600ms) does not blur the count
	var lims []*Limiter
	for i := range 3 {
		st := newRedisStore(t, srv, store.Config{ReplicaID: string(rune('a' + i))})
		l := New(Config{Keys: map[string]Limits{"k": {RequestsPerMinute: 100}}, Store: st,
			Now: func() time.Time { return t0 }})
		lims = append(lims, l)
	}
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 48)
	for i := range 1000 {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ls, err := lims[i%3].Admit(context.Background(), "k")
			var e *apierr.Error
			switch {
			case err == nil:
				ok.Add(1)
				ls.Release()
			case errors.As(err, &e) && e.Kind == apierr.RateLimit:
				refused.Add(1)
			default:
				t.Errorf("admit: %v", err)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 100 || refused.Load() != 900 {
		t.Errorf("admitted %d, refused %d; want exactly 100 and 900", ok.Load(), refused.Load())
	}
}

// TestRedisConcurrencyLeases: ten concurrent slots shared by three replicas are never exceeded
// under contention, and the slots of a replica that stops renewing (closed without releasing,
// as a killed process) come back within the lease TTL.
func TestRedisConcurrencyLeases(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = 1500 * time.Millisecond
	var stores []*Redis
	var gauges []Gauge
	for i := range 3 {
		st := newRedisStore(t, srv, store.Config{ReplicaID: string(rune('a' + i)), LeaseTTL: ttl})
		stores = append(stores, st)
		gauges = append(gauges, st.Gauge("key/\"k\"/concurrent"))
	}
	ctx := context.Background()
	var open, peak atomic.Int64
	var wg sync.WaitGroup
	for w := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := gauges[w%3]
			for range 40 {
				_, ok, err := g.Inc(ctx, 10)
				if err != nil {
					t.Error(err)
					return
				}
				if !ok {
					continue
				}
				n := open.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(time.Millisecond)
				open.Add(-1)
				if err := g.Dec(ctx); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > 10 || p < 2 {
		t.Errorf("peak open slots %d, want between 2 and 10", p)
	}
	if v, err := gauges[1].Value(ctx); err != nil || v != 0 {
		t.Fatalf("after all released: %d %v, want 0", v, err)
	}

	// Replica a takes 5 and dies; b and c can take only the other 5 until a's lease runs out.
	for range 5 {
		if _, ok, err := gauges[0].Inc(ctx, 10); !ok || err != nil {
			t.Fatalf("replica a: %v %v", ok, err)
		}
	}
	// Its renewals keep the slots past the TTL while it lives.
	time.Sleep(ttl + ttl/2)
	if v, err := gauges[1].Value(ctx); err != nil || v != 5 {
		t.Fatalf("a alive past the TTL: %d slots %v, want 5", v, err)
	}
	stores[0].Store().Close()
	died := time.Now()
	for i := range 5 {
		if _, ok, err := gauges[1+i%2].Inc(ctx, 10); !ok || err != nil {
			t.Fatalf("slot %d of the 5 free: %v %v", i, ok, err)
		}
	}
	if n, ok, err := gauges[1].Inc(ctx, 10); ok || err != nil {
		t.Fatalf("an 11th slot while a's lease holds: got %v (count %d) %v", ok, n, err)
	}
	for {
		_, ok, err := gauges[2].Inc(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Since(died) > ttl+time.Second {
			t.Fatalf("a's slots not back %v after it died (lease TTL %v)", time.Since(died), ttl)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if took := time.Since(died); took > ttl+500*time.Millisecond {
		t.Errorf("a's slots came back after %v, want within the TTL %v", took, ttl)
	}
}

// TestRedisDownAllow: with Redis gone the store serves from each replica's share (limit ÷
// replicas), counts the errors, and goes back to Redis when it returns; a release made while it
// was down is written back.
func TestRedisDownAllow(t *testing.T) {
	srv := redistest.Start(t)
	var errs atomic.Int64
	st := newRedisStore(t, srv, store.Config{ReplicaID: "a", Replicas: 4, Timeout: 50 * time.Millisecond,
		OnError: func() { errs.Add(1) }})
	ctx := context.Background()
	g := st.Gauge("global/concurrent")
	for range 2 {
		if _, ok, err := g.Inc(ctx, 100); !ok || err != nil {
			t.Fatalf("inc: %v %v", ok, err)
		}
	}
	srv.Stop()
	r := Rate{Limit: 40, Period: Minute}
	cell := st.Rate("global/requests/40/1m0s")
	now := time.Now()
	taken := 0
	for range 20 {
		_, ok, err := cell.Take(ctx, now, r, 1)
		if err != nil {
			t.Fatalf("take while down (allow): %v", err)
		}
		if ok {
			taken++
		}
	}
	if taken != 10 {
		t.Errorf("taken while down: %d, want 10 (40 ÷ 4 replicas)", taken)
	}
	if st.Up() || errs.Load() < 20 {
		t.Errorf("while down: up %v, errors %d; want down and ≥ 20", st.Up(), errs.Load())
	}
	if err := g.Dec(ctx); err != nil { // written back when Redis returns
		t.Fatal(err)
	}
	srv.Restart() // empty: no persistence
	deadline := time.Now().Add(5 * time.Second)
	for !st.Up() {
		if time.Now().After(deadline) {
			t.Fatal("store not up 5s after Redis restarted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v, err := g.Value(ctx); err != nil || v != 1 {
		t.Errorf("slots after Redis came back: %d %v, want the 1 still held", v, err)
	}
	if _, ok, err := cell.Take(ctx, now, r, 1); !ok || err != nil {
		t.Errorf("take after Redis came back: %v %v", ok, err)
	}
}

// TestRedisDownDeny: with on_error deny a Limiter answers 503 with retry-after while Redis is
// down, and admits again once it is back.
func TestRedisDownDeny(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv, store.Config{ReplicaID: "a", Deny: true, Timeout: 50 * time.Millisecond})
	l := New(Config{Keys: map[string]Limits{"k": {RequestsPerMinute: 1000, Concurrent: 5}}, Store: st})
	ctx := context.Background()
	ls, err := l.Admit(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	ls.Release()
	srv.Stop()
	for range 3 {
		_, err := l.Admit(ctx, "k")
		var e *apierr.Error
		if !errors.As(err, &e) || e.Kind.Status() != http.StatusServiceUnavailable || e.RetryAfter <= 0 ||
			!errors.Is(err, ErrStoreUnavailable) && st.Up() {
			t.Fatalf("admit while down: %v, want a 503 with retry-after", err)
		}
	}
	srv.Restart()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ls, err := l.Admit(ctx, "k")
		if err == nil {
			ls.Release()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still refused 5s after Redis restarted: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRedisCluster runs the limits on a real three-master Redis Cluster: the scripts touch one
// hash-tagged cell each, so they run wherever the cell's slot lives, and the limits stay exact.
func TestRedisCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	t0 := time.Now()
	keys := map[string]Limits{}
	for i := range 8 {
		keys[string(rune('a'+i))] = Limits{RequestsPerMinute: 20, Concurrent: 3, InputTokensPerMinute: 1e9,
			OutputTokensPerMinute: 1e9}
	}
	var lims []*Limiter
	var stores []*Redis
	for i := range 3 {
		client, err := store.Dial(c.URLs(), "", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		st := newLimits(t, store.Config{Client: client, Timeout: 5 * time.Second, ReplicaID: string(rune('x' + i))})
		// Every limit globally too: the reservation and the end of a request then touch two
		// scopes, on two shards, in one round trip.
		l := New(Config{Keys: keys, Global: Limits{RequestsPerMinute: 1000, Concurrent: 1000,
			InputTokensPerMinute: 1e9, OutputTokensPerMinute: 1e9}, Store: st,
			Now: func() time.Time { return t0 }})
		lims = append(lims, l)
		stores = append(stores, st)
	}
	ctx := context.Background()
	for name := range keys {
		admitted := 0
		var held []Lease
		for i := range 60 {
			ls, err := lims[i%3].Admit(ctx, name)
			var e *apierr.Error
			switch {
			case err == nil:
				admitted++
				if err := ls.Reserve(ctx, 100); err != nil {
					t.Fatalf("key %s: reserve: %v", name, err)
				}
				if err := ls.Settle(90, 10); err != nil {
					t.Fatalf("key %s: settle: %v", name, err)
				}
				held = append(held, ls)
				if len(held) == 3 { // the concurrency limit: release to go on
					for _, h := range held {
						h.Release()
					}
					held = held[:0]
				}
			case errors.As(err, &e) && e.Kind == apierr.RateLimit:
			default:
				t.Fatalf("key %s: %v", name, err)
			}
		}
		for _, h := range held {
			h.Release()
		}
		if admitted != 20 {
			t.Errorf("key %s: %d admitted of 60 over 3 replicas, want 20", name, admitted)
		}
	}
	for i, st := range stores {
		if n := st.Errors(); n != 0 {
			t.Errorf("replica %d: %d operations could not use the cluster", i, n)
		}
	}
	// The cells are spread over the masters.
	used := 0
	for _, n := range c.Nodes {
		client, err := store.Dial([]string{n.URL()}, "", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		size, err := client.DBSize(ctx).Result()
		client.Close()
		if err != nil {
			t.Fatal(err)
		}
		if size > 0 {
			used++
		}
	}
	if used < 2 {
		t.Errorf("the cells are on %d of 3 masters, want them spread", used)
	}
}

// TestRedisTokensAcrossReplicas: three replicas reserve input tokens of one key limited to
// 10,000 per minute, concurrently, with requests of 1 to 300 tokens: the tokens admitted are the
// limit, less at most one request that did not fit (within 3%, exact in the bucket's terms), and
// a refund on one replica is seen by the others.
func TestRedisTokensAcrossReplicas(t *testing.T) {
	srv := redistest.Start(t)
	t0 := time.Now()
	var lims []*Limiter
	for i := range 3 {
		st := newRedisStore(t, srv, store.Config{ReplicaID: string(rune('a' + i))})
		l := New(Config{Keys: map[string]Limits{"k": {InputTokensPerMinute: 10000}}, Store: st,
			Now: func() time.Time { return t0 }})
		lims = append(lims, l)
	}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for w := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range 60 {
				n := 1 + rng.IntN(300)
				ls, err := lims[w%3].Acquire(context.Background(), "k", n)
				var e *apierr.Error
				switch {
				case err == nil:
					admitted.Add(int64(n))
					ls.Release()
				case errors.As(err, &e) && e.Kind == apierr.RateLimit:
				default:
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got > 10000 || got < 10000-300 {
		t.Errorf("input tokens admitted over 3 replicas: %d, want 9700 to 10000 of a 10000 limit", got)
	}
	// A settlement below the estimate gives tokens back to every replica.
	ctx := context.Background()
	st0, err := lims[0].keys["k"].in.cell.Peek(ctx, t0, lims[0].keys["k"].in.rate)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lims[0].keys["k"].in.cell.Add(ctx, t0, lims[0].keys["k"].in.rate, -500); err != nil {
		t.Fatal(err)
	}
	st1, err := lims[2].keys["k"].in.cell.Peek(ctx, t0, lims[2].keys["k"].in.rate)
	if err != nil {
		t.Fatal(err)
	}
	if st1.Remaining != st0.Remaining+500 {
		t.Errorf("after a 500-token refund on one replica another sees %d remaining, want %d", st1.Remaining, st0.Remaining+500)
	}
}

// TestRedisLeaseWrittenWhenStale: a batched admission writes its replica's lease when it is new
// or a third of the TTL spent, not at every admission; a release to zero keeps the lease at
// count 0 (the gauge reads 0); the keys never outlive less than the lease; and a replica closed
// while holding a slot frees it within the TTL.
func TestRedisLeaseWrittenWhenStale(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = 3 * time.Second
	st := newRedisStore(t, srv, store.Config{ReplicaID: "a", LeaseTTL: ttl})
	l := New(Config{Keys: map[string]Limits{"k": {Concurrent: 1}}, Store: st})
	ctx := context.Background()
	g := l.keys["k"].conc.cell.(*redisGauge)
	slots, leases := g.keys[0], g.keys[1]
	expiry := func() float64 {
		t.Helper()
		v, err := st.c.Client.ZScore(ctx, leases, g.field.Load().name).Result()
		if err != nil {
			t.Fatalf("the lease: %v", err)
		}
		return v
	}
	cycle := func() {
		t.Helper()
		ls, err := l.Admit(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Admit(ctx, "k"); err == nil {
			t.Fatal("a second request admitted over a concurrency limit of 1")
		}
		for _, k := range []string{slots, leases} { // the keys last as long as the lease
			ms, err := st.c.Client.PTTL(ctx, k).Result()
			if err != nil || ms <= 0 || float64(time.Now().Add(ms).UnixMilli()) < expiry()-50 {
				t.Errorf("%s: TTL %v %v, shorter than the lease (expiry %v)", k, ms, err, expiry())
			}
		}
		if err := ls.Release(); err != nil {
			t.Fatal(err)
		}
	}
	cycle()
	first := expiry()
	if n, err := st.c.Client.HGet(ctx, slots, g.field.Load().name).Int(); err != nil || n != 0 {
		t.Errorf("after the release: count %d %v, want 0 kept with the lease", n, err)
	}
	if v, err := g.Value(ctx); err != nil || v != 0 {
		t.Errorf("after the release: gauge %d %v, want 0", v, err)
	}
	cycle()
	if e := expiry(); e != first {
		t.Errorf("a fresh lease was written again: expiry %v, was %v", e, first)
	}
	time.Sleep(ttl/3 + 200*time.Millisecond)
	cycle()
	if e := expiry(); e <= first {
		t.Errorf("a lease a third spent was not renewed: expiry %v, was %v", e, first)
	}

	// Closed while holding a slot (as a killed replica): another replica gets it within the TTL.
	if _, err := l.Admit(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	st.Store().Close()
	closed := time.Now()
	other := newRedisStore(t, srv, store.Config{ReplicaID: "b", LeaseTTL: ttl})
	l2 := New(Config{Keys: map[string]Limits{"k": {Concurrent: 1}}, Store: other})
	for {
		ls, err := l2.Admit(ctx, "k")
		if err == nil {
			ls.Release()
			break
		}
		if time.Since(closed) > ttl+time.Second {
			t.Fatalf("the closed replica's slot still held %v after it closed: %v", time.Since(closed), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
