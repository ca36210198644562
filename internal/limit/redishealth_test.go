package limit

import (
	"context"
	"errors"
	"github.com/layer0ai/layer0/internal/store"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/store/redistest"
	"github.com/redis/go-redis/v9"
)

// blockRedis makes srv answer nothing for d: a script that spins on Redis's clock, which Redis
// runs to its end before any other command. It returns when the script has started.
func blockRedis(t *testing.T, srv *redistest.Server, d time.Duration) {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: -1})
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		close(started)
		err := rc.Eval(context.Background(), `
local function ms() local t = redis.call('TIME'); return t[1] * 1000 + math.floor(t[2] / 1000) end
local t0 = ms()
while ms() - t0 < tonumber(ARGV[1]) do end
return 1`, nil, d.Milliseconds()).Err()
		if err != nil {
			t.Errorf("blocking Redis: %v", err)
		}
	}()
	<-started
	time.Sleep(30 * time.Millisecond) // the script is running
	t.Cleanup(func() {
		<-done
		rc.Close()
	})
}

// waitFor polls cond every 10ms for up to 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestRedisSlowIsNotDown: a Redis that answers later than the timeout fails that operation alone
// — an error, not an answer from this replica's own counters — and stays in use; store.FailRun late
// answers in a row mark it unreachable, and the probe brings it back when it answers again.
func TestRedisSlowIsNotDown(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv, store.Config{ReplicaID: "a", Timeout: 100 * time.Millisecond})
	r := Rate{Limit: 10, Period: Minute}
	cell := st.Rate("global/requests/10/1m0s")
	ctx := context.Background()
	now := time.Now()
	if _, ok, err := cell.Take(ctx, now, r, 1); !ok || err != nil {
		t.Fatalf("take: %v %v", ok, err)
	}

	blockRedis(t, srv, 200*time.Millisecond)
	_, ok, err := cell.Take(ctx, now, r, 1)
	if err == nil || ok {
		t.Errorf("take while Redis is slow: ok %v, err %v; want an error (the limit cannot decide)", ok, err)
	}
	if !st.Up() {
		t.Errorf("one late answer marked Redis unreachable: a slow store is not an outage")
	}
	waitFor(t, "Redis answering again", func() bool {
		_, err := cell.Peek(ctx, now, r)
		return err == nil && st.Up()
	})
	if st, err := cell.Peek(ctx, now, r); err != nil || st.Remaining < 8 || st.Remaining > 9 {
		t.Errorf("after the slow spell: %+v %v; want 8 or 9 left in Redis (the late take may have run)", st, err)
	}

	blockRedis(t, srv, 900*time.Millisecond) // the heartbeat's late answers count in the run too
	late := 0
	for range 8 {
		if !st.Up() {
			break
		}
		if _, _, err := cell.Take(ctx, now, r, 1); err != nil {
			late++
		}
	}
	if st.Up() || late > store.FailRun {
		t.Errorf("Redis reachable %v after %d late answers to takes; want unreachable after at most %d in a row",
			st.Up(), late, store.FailRun)
	}
	waitFor(t, "the probe to find Redis again", st.Up)
}

// TestRedisLiveReplicas: each replica's heartbeat counts it live; the divisor while Redis is
// unreachable is that count (no replicas configured), and a replica that stops cleanly leaves
// it at once.
func TestRedisLiveReplicas(t *testing.T) {
	srv := redistest.Start(t)
	var sts []*Redis
	for _, id := range []string{"a", "b", "c"} {
		sts = append(sts, newRedisStore(t, srv, store.Config{ReplicaID: id, Timeout: 200 * time.Millisecond}))
	}
	waitFor(t, "three live replicas", func() bool { return sts[0].Live() == 3 && sts[1].Live() == 3 })
	sts[2].Store().Close()
	waitFor(t, "two live replicas after one stopped", func() bool { return sts[0].Live() == 2 })

	srv.Stop()
	r := Rate{Limit: 30, Period: Minute}
	cell := sts[0].Rate("global/requests/30/1m0s")
	taken := 0
	for range 30 {
		if _, ok, err := cell.Take(context.Background(), time.Now(), r, 1); err != nil {
			t.Fatal(err)
		} else if ok {
			taken++
		}
	}
	if taken != 15 {
		t.Errorf("taken while Redis is down: %d, want 15 (30 ÷ the 2 live replicas)", taken)
	}
}

// TestRedisOutageWrittenBack: while Redis is down a replica serves from its own counters, no
// fuller than Redis last said they were; when Redis comes back empty (a restart) it writes back
// the cells' states and what it took meanwhile, and its slots — those taken locally included —
// so the limits are not handed out again.
func TestRedisOutageWrittenBack(t *testing.T) {
	srv := redistest.Start(t)
	st := newRedisStore(t, srv, store.Config{ReplicaID: "a", Timeout: 200 * time.Millisecond})
	waitFor(t, "the first heartbeat", func() bool { return st.Live() == 1 })
	ctx := context.Background()
	now := time.Now() // the clock stands still: no refill
	r := Rate{Limit: 30, Period: Minute}
	cell := st.Rate("global/requests/30/1m0s")
	g := st.Gauge("global/concurrent")
	take := func(n int) int {
		taken := 0
		for range n {
			if _, ok, err := cell.Take(ctx, now, r, 1); err != nil {
				t.Fatal(err)
			} else if ok {
				taken++
			}
		}
		return taken
	}
	inc := func(n int) int {
		got := 0
		for range n {
			if _, ok, err := g.Inc(ctx, 4); err != nil {
				t.Fatal(err)
			} else if ok {
				got++
			}
		}
		return got
	}
	if n := take(6); n != 6 {
		t.Fatalf("took %d of 6 with Redis up", n)
	}
	if n := inc(2); n != 2 {
		t.Fatalf("took %d of 2 slots with Redis up", n)
	}
	srv.Stop()
	if n := take(10); n != 10 {
		t.Fatalf("took %d of 10 with Redis down", n)
	}
	if n := inc(4); n != 2 {
		t.Errorf("slots taken with Redis down: %d, want 2 (4 less the 2 this replica holds in Redis)", n)
	}
	srv.Restart() // empty: no persistence
	waitFor(t, "the store up again", st.Up)
	if n := take(30); n != 14 {
		t.Errorf("taken after Redis came back empty: %d, want 14 (30 − 6 before − 10 during the outage)", n)
	}
	if v, err := g.Value(ctx); err != nil || v != 4 {
		t.Errorf("slots after Redis came back empty: %d %v, want 4 (2 from before, 2 taken meanwhile)", v, err)
	}
}

// TestRedisRateAfterFlushAll: two replicas take 20 of a key's 30 requests a minute; Redis loses
// its state (FLUSHALL); the next admission finds the loss, waits while both replicas write their
// cells back, and only the 10 left are admitted after it.
func TestRedisRateAfterFlushAll(t *testing.T) {
	srv := redistest.Start(t)
	t0 := time.Now()
	var lims []*Limiter
	var sts []*Redis
	for _, id := range []string{"a", "b"} {
		st := newRedisStore(t, srv, store.Config{ReplicaID: id, Timeout: 200 * time.Millisecond})
		l := New(Config{Keys: map[string]Limits{"k": {RequestsPerMinute: 30}}, Store: st,
			Now: func() time.Time { return t0 }})
		lims, sts = append(lims, l), append(sts, st)
	}
	waitFor(t, "both heartbeats", func() bool { return sts[0].Live() == 2 && sts[1].Live() == 2 })
	admit := func(n int) int {
		ok := 0
		for i := range n {
			ls, err := lims[i%2].Admit(context.Background(), "k")
			var e *apierr.Error
			switch {
			case err == nil:
				ok++
				ls.Release()
			case errors.As(err, &e) && e.Kind == apierr.RateLimit:
			default:
				t.Fatalf("admit: %v", err)
			}
		}
		return ok
	}
	if n := admit(20); n != 20 {
		t.Fatalf("admitted %d of the first 20", n)
	}
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	if err := rc.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	if n := admit(40); n != 10 {
		t.Errorf("admitted after FLUSHALL: %d, want the 10 left of 30", n)
	}
}

// TestRedisAdmissionAcrossLoss: an admission whose script reaches Redis only after Redis lost
// its state and this replica has already found the loss and written its own counts back (its
// round trip ran late) must not pass on counts that lack another replica's: it finds its
// heartbeat entry of the old generation gone and waits, like the admissions after it, until the
// other replica has written back the slots it holds. Here b holds the key's 2 slots and writes
// them back only after a's late admission has reached Redis: a's admission is refused.
func TestRedisAdmissionAcrossLoss(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = 6 * time.Second
	var lims [2]*Limiter
	var sts [2]*Redis
	for i, id := range []string{"a", "b"} {
		sts[i] = newRedisStore(t, srv, store.Config{ReplicaID: id, LeaseTTL: ttl})
		lims[i] = New(Config{Keys: map[string]Limits{"k": {Concurrent: 2}}, Store: sts[i]})
	}
	waitFor(t, "both heartbeats", func() bool { return sts[0].Live() == 2 && sts[1].Live() == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range 2 {
		ls, err := lims[1].Admit(ctx, "k")
		if err != nil {
			t.Fatalf("b's admission: %v", err)
		}
		defer ls.Release()
	}
	late := redistest.NewGate(redistest.Script(admitScript.Hash()))
	sts[0].c.Client.AddHook(late)
	away := redistest.NewGate(redistest.Any)
	sts[1].c.Client.AddHook(away)

	late.Armed.Store(true)
	type result struct {
		ls  Lease
		err error
	}
	res := make(chan result, 1)
	go func() {
		ls, err := lims[0].Admit(ctx, "k")
		res <- result{ls, err}
	}()
	<-late.Hit
	late.Armed.Store(false)
	away.Armed.Store(true) // b finds the loss only when let through
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	if err := rc.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	sts[0].st.Lost("a test") // as a's heartbeat would find it
	waitFor(t, "a's entry written again", func() bool { _, m := sts[0].st.Heartbeat(); return m != "" })
	close(late.Open)
	select {
	case r := <-res:
		if r.err == nil {
			r.ls.Release()
		}
		t.Fatalf("a's late admission ended before b wrote its slots back: %v", r.err)
	case <-time.After(300 * time.Millisecond):
	}
	close(away.Open)
	r := <-res
	var e *apierr.Error
	if r.err == nil {
		r.ls.Release()
		t.Fatal("a's late admission passed although b holds the key's 2 slots")
	}
	if !errors.As(r.err, &e) || e.Kind != apierr.RateLimit {
		t.Fatalf("a's late admission: %v, want refused by the concurrency limit", r.err)
	}
}
