package limit

import (
	"context"
	"errors"
	"github.com/layer0ai/layer0/internal/store"
	"math/rand/v2"
	"net/http"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/store/redistest"
	"github.com/redis/go-redis/v9"
)

// roundTrips counts the client's round trips to Redis: a command, or a whole pipeline (not the
// handshake of a new connection of the pool).
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "hello", "client", "auth", "select": // a new connection's handshake, once per connection
		default:
			r.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}

// TestRedisOneRoundTripPerOperation: with every limit set on the key and globally, admission
// and reservation are one round trip each; the response headers none (the lease's own view);
// output charged while streaming is written at most every chargeEvery; the settlement goes with
// the release, in one round trip.
// A refused admission costs the undo of the other scope and the 429's headers.
func TestRedisOneRoundTripPerOperation(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv, store.Config{ReplicaID: "a", LeaseTTL: time.Minute})
	rt := &roundTrips{}
	st.c.Client.AddHook(rt)
	all := Limits{RequestsPerMinute: 3, InputTokensPerMinute: 10000, OutputTokensPerMinute: 10000, Concurrent: 5}
	now := time.Unix(1_800_000_000, 0)
	l := New(Config{Keys: map[string]Limits{"k": all}, Global: Limits{RequestsPerMinute: 1000,
		InputTokensPerMinute: 1e6, OutputTokensPerMinute: 1e6, Concurrent: 100}, Store: st,
		Now: func() time.Time { return now }})
	ctx := context.Background()
	warm := false
	step := func(what string, want int64, f func() error) {
		t.Helper()
		before := rt.n.Load()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n := rt.n.Load() - before; warm && n != want {
			t.Errorf("%s: %d round trips, want %d", what, n, want)
		}
	}
	// Three requests: the first loads the scripts (EVALSHA answered NOSCRIPT, then EVAL), the
	// others run them by hash and are counted.
	for i := range 3 {
		warm = i > 0
		var ls Lease
		step("admit", 1, func() (err error) { ls, err = l.Admit(ctx, "k"); return err })
		step("reserve", 1, func() error { return ls.Reserve(ctx, 100) })
		step("charge at once", 0, func() error { return ls.Charge(5) })
		now = now.Add(chargeEvery)
		step("charge after chargeEvery", 1, func() error { return ls.Charge(5) })
		step("header", 0, func() error { ls.Header(http.Header{}); return nil })
		step("settle", 0, func() error { return ls.Settle(90, 12) })
		step("release with the settlement", 1, func() error { return ls.Release() })
	}
	before := rt.n.Load()
	_, err := l.Admit(ctx, "k") // the 4th request of 3 per minute
	var e *apierr.Error
	if !errors.As(err, &e) || e.Kind != apierr.RateLimit {
		t.Fatalf("4th request: %v, want a 429", err)
	}
	// admit, the global scope's undo (its slot and request), the 429's headers
	if n := rt.n.Load() - before; n != 4 {
		t.Errorf("a refusal: %d round trips, want 4 (admit, undo: refund and release, headers)", n)
	}
	if v, err := st.Gauge(`global/concurrent`).Value(ctx); err != nil || v != 0 {
		t.Errorf("global slots after the refusal: %d %v, want 0", v, err)
	}
	if st.Errors() != 0 {
		t.Errorf("store errors: %d", st.Errors())
	}
}

// TestRedisBatchMatchesMemory runs the same random requests — admissions, reservations,
// charges, settlements, releases — on a Limiter over the in-memory store and one over Redis, with
// one clock: every answer (admitted or not, the error's message, retry-after and headers) and
// every response header must be the same. The Redis one runs each operation in one round trip,
// the in-memory one cell by cell.
func TestRedisBatchMatchesMemory(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv, store.Config{ReplicaID: "a", LeaseTTL: time.Minute})
	now := time.Unix(1_800_000_000, 987_654_321)
	clock := func() time.Time { return now }
	keys := map[string]Limits{
		"a": {RequestsPerMinute: 20, InputTokensPerMinute: 3000, OutputTokensPerMinute: 2000, Concurrent: 4},
		"b": {RequestsPerMinute: 50, InputTokensPerMinute: 900},
		"c": {OutputTokensPerMinute: 500, Concurrent: 2},
	}
	global := Limits{RequestsPerMinute: 60, InputTokensPerMinute: 5000, Concurrent: 6}
	mem := New(Config{Keys: keys, Global: global, Now: clock})
	red := New(Config{Keys: keys, Global: global, Now: clock, Store: st})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	type pair struct {
		name string
		m, r Lease
	}
	var open []pair
	same := func(i int, what string, em, er error) bool {
		t.Helper()
		if (em == nil) != (er == nil) {
			t.Fatalf("step %d %s: memory %v, redis %v", i, what, em, er)
		}
		if em != nil {
			var a, b *apierr.Error
			if !errors.As(em, &a) || !errors.As(er, &b) || a.Message != b.Message || a.RetryAfter != b.RetryAfter ||
				!reflect.DeepEqual(a.Header, b.Header) {
				t.Fatalf("step %d %s:\n memory %+v\n redis  %+v", i, what, em, er)
			}
		}
		return em == nil
	}
	refused := 0
	// Redis expires a cell's key on its own clock (PX: the cell's time ahead of now, from the
	// test's clock). The test's clock must therefore never move slower than the real one, or a
	// slow step could let Redis forget a cell the in-memory store still holds.
	stepStart := time.Now()
	for i := range 600 {
		adv := time.Duration(rng.Int64N(int64(400 * time.Millisecond)))
		if real := time.Since(stepStart); real > adv {
			adv = real
		}
		stepStart = time.Now()
		now = now.Add(adv)
		switch op := rng.IntN(5); {
		case op < 2 || len(open) == 0:
			name := []string{"a", "b", "c", ""}[rng.IntN(4)]
			lm, em := mem.Admit(ctx, name)
			lr, er := red.Admit(ctx, name)
			if !same(i, "admit "+name, em, er) {
				refused++
				continue
			}
			in := rng.IntN(400)
			if rng.IntN(30) == 0 {
				in = 4000 // more than any limit: never fits
			}
			em, er = lm.Reserve(ctx, in), lr.Reserve(ctx, in)
			if !same(i, "reserve", em, er) {
				refused++
				continue
			}
			open = append(open, pair{name, lm, lr})
		case op == 2:
			p := &open[rng.IntN(len(open))]
			n := rng.IntN(60)
			// Redis writes a stream's charges at most every chargeEvery (the round-trip test
			// counts that): a charge that late is written at once, as in memory.
			now = now.Add(chargeEvery)
			same(i, "charge", p.m.Charge(n), p.r.Charge(n))
		default:
			j := rng.IntN(len(open))
			p := open[j]
			in, out := rng.IntN(400), rng.IntN(300)
			same(i, "settle", p.m.Settle(in, out), p.r.Settle(in, out))
			same(i, "release", p.m.Release(), p.r.Release())
			// Released, the settlement is written whatever the path.
			hm, hr := http.Header{}, http.Header{}
			mem.Header(p.name, hm)
			red.Header(p.name, hr)
			if !reflect.DeepEqual(hm, hr) {
				t.Fatalf("step %d headers after the release:\n memory %v\n redis  %v", i, hm, hr)
			}
			open = append(open[:j], open[j+1:]...)
		}
	}
	if refused < 20 {
		t.Errorf("only %d refusals in 600 steps: the limits were not exercised", refused)
	}
	if st.Errors() != 0 {
		t.Errorf("store errors: %d", st.Errors())
	}
}

// TestRedisScriptFlushed: Redis forgetting its scripts (a restart, SCRIPT FLUSH) costs nothing
// but a reload: the pipelined EVALSHA answered NOSCRIPT is sent again as EVAL.
func TestRedisScriptFlushed(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv, store.Config{ReplicaID: "a"})
	l := New(Config{Keys: map[string]Limits{"k": {RequestsPerMinute: 2, Concurrent: 1}},
		Global: Limits{RequestsPerMinute: 100, Concurrent: 10}, Store: st})
	ctx := context.Background()
	for i := range 3 {
		if err := st.c.Client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		ls, err := l.Admit(ctx, "k")
		if i == 2 {
			var e *apierr.Error
			if !errors.As(err, &e) || e.Kind != apierr.RateLimit {
				t.Fatalf("3rd of 2 per minute: %v, want 429", err)
			}
			break
		}
		if err != nil {
			t.Fatalf("request %d after SCRIPT FLUSH: %v", i, err)
		}
		if err := ls.Release(); err != nil {
			t.Fatal(err)
		}
	}
	if st.Errors() != 0 {
		t.Errorf("store errors: %d, want 0", st.Errors())
	}
}

// TestRedisLeaseHeader: on Redis a lease's rate-limit headers come from what its own operations
// saw, with the tokens it still owes; for requests one after another (nothing else changing the
// cells) they are exactly the in-memory limiter's, after admission, after a charge and a
// settlement, and after the release.
func TestRedisLeaseHeader(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv, store.Config{ReplicaID: "a", LeaseTTL: time.Minute})
	now := time.Unix(1_800_000_000, 5)
	clock := func() time.Time { return now }
	keys := map[string]Limits{"a": {RequestsPerMinute: 30, InputTokensPerMinute: 3000, OutputTokensPerMinute: 2000, Concurrent: 4}}
	global := Limits{RequestsPerMinute: 50, InputTokensPerMinute: 4000, OutputTokensPerMinute: 5000}
	mem := New(Config{Keys: keys, Global: global, Now: clock})
	red := New(Config{Keys: keys, Global: global, Now: clock, Store: st})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(5, 6))
	compare := func(i int, what string, m, r *Lease) {
		t.Helper()
		hm, hr := http.Header{}, http.Header{}
		m.Header(hm)
		r.Header(hr)
		if len(hm) == 0 || !reflect.DeepEqual(hm, hr) {
			t.Fatalf("request %d, %s:\n memory %v\n redis  %v", i, what, hm, hr)
		}
	}
	for i := range 25 {
		now = now.Add(time.Duration(rng.Int64N(int64(3 * time.Second))))
		lm, em := mem.Admit(ctx, "a")
		lr, er := red.Admit(ctx, "a")
		if em != nil || er != nil {
			t.Fatalf("request %d: %v / %v", i, em, er)
		}
		in := 1 + rng.IntN(150)
		if em, er = lm.Reserve(ctx, in), lr.Reserve(ctx, in); em != nil || er != nil {
			t.Fatalf("request %d reserve: %v / %v", i, em, er)
		}
		compare(i, "admitted", &lm, &lr)
		n := rng.IntN(80)
		_, _ = lm.Charge(n), lr.Charge(n) // owed on Redis (within chargeEvery)
		_, _ = lm.Settle(in-3, n+5), lr.Settle(in-3, n+5)
		compare(i, "charged and settled", &lm, &lr)
		_, _ = lm.Release(), lr.Release()
		compare(i, "released", &lm, &lr)
	}
}
