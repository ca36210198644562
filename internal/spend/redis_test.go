package spend

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/money"
	"github.com/layer0ai/layer0/internal/store"
	"github.com/layer0ai/layer0/internal/store/redistest"
	"github.com/redis/go-redis/v9"
)

// newRedisLedger returns a ledger on srv with the rate limits' store on the same client as its
// circuit, as a gateway replica builds them.
func newRedisLedger(t *testing.T, srv *redistest.Server, id string, ttl time.Duration) *Redis {
	t.Helper()
	// A timeout well above a round trip on a loaded machine: these tests are about the
	// ledger's arithmetic, not its behaviour when Redis answers late.
	client, err := store.Dial([]string{srv.URL()}, "", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// Three replicas: the floor of the divisor, as an operator sets store.replicas, for a
	// replica whose heartbeat has not yet seen the others.
	st, err := store.New(store.Config{Client: client, Timeout: 5 * time.Second, ReplicaID: id, LeaseTTL: ttl, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewRedis(RedisConfig{Circuit: st, ReplicaID: id, LeaseTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); st.Close() })
	return l
}

// TestRedisNoOverspend: three replicas reserve 100 requests at once against a budget of ten
// requests' worst case: exactly ten are served, and the shared counter ends at the budget.
func TestRedisNoOverspend(t *testing.T) {
	srv := redistest.Start(t)
	worst := testPrice.worst(100, 100, 0)
	budget := Budget{Scope: ScopeGlobal, Limit: int64(10 * worst), Period: Day}
	var ss []*Spender
	for _, id := range []string{"a", "b", "c"} {
		ss = append(ss, newSpender(newRedisLedger(t, srv, id, 3*time.Second), budget))
	}
	var wg sync.WaitGroup
	var ok, refused atomic.Int64
	start := make(chan struct{})
	for i := range 100 {
		wg.Go(func() {
			<-start
			h, err := ss[i%3].Reserve(context.Background(), "k", "m", 100, 100)
			if err != nil {
				if e := apierr.From(err); e.Code != "BUDGET_EXCEEDED" {
					t.Errorf("reserve: %v", err)
				}
				refused.Add(1)
				return
			}
			ok.Add(1)
			time.Sleep(20 * time.Millisecond)
			h.Settle(worst, 200)
		})
	}
	close(start)
	wg.Wait()
	if ok.Load() != 10 || refused.Load() != 90 {
		t.Errorf("served %d, refused %d; want 10 and 90", ok.Load(), refused.Load())
	}
	rep, err := ss[1].Report(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if g := rep.Global[0]; g.Spent != money.Micros(budget.Limit).String() || g.Reserved != "0.000000" {
		t.Errorf("shared counter: %+v; want the whole budget spent, nothing reserved", g)
	}
}

// TestRedisCrashedReplicaExpires: a replica that stops renewing its lease (it crashed) holds its
// reservations for at most the lease TTL; then the others may spend them.
func TestRedisCrashedReplicaExpires(t *testing.T) {
	srv := redistest.Start(t)
	worst := testPrice.worst(100, 100, 0)
	budget := Budget{Scope: ScopeGlobal, Limit: int64(2 * worst), Period: Day}
	a := newSpender(newRedisLedger(t, srv, "a", 900*time.Millisecond), budget)
	la := a.c.Ledger.(*Redis)
	b := newSpender(newRedisLedger(t, srv, "b", 900*time.Millisecond), budget)
	ctx := context.Background()
	for range 2 {
		if _, err := a.Reserve(ctx, "k", "m", 100, 100); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Reserve(ctx, "k", "m", 100, 100); err == nil {
		t.Fatalf("b reserved beyond the budget while a holds it")
	}
	la.Close() // a's lease is no longer renewed: it crashed
	crashed := time.Now()
	deadline := crashed.Add(5 * time.Second)
	for {
		h, err := b.Reserve(ctx, "k", "m", 100, 100)
		if err == nil {
			h.Settle(0, 0)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a's reservations still held %v after it crashed", time.Since(crashed))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d := time.Since(crashed); d > 900*time.Millisecond+300*time.Millisecond {
		t.Errorf("a's reservations freed %v after it stopped; want within the lease TTL", d)
	}
}

// TestRedisRestartNoOverspend: Redis is killed and started again empty while three replicas
// reserve and settle: each spends at most its share of what was left while Redis is away, and
// writes back what it knows when it returns, so the budget is never passed.
func TestRedisRestartNoOverspend(t *testing.T) {
	srv := redistest.Start(t)
	worst := testPrice.worst(100, 100, 0)
	budget := Budget{Scope: ScopeGlobal, Limit: int64(60 * worst), Period: Day}
	var ss []*Spender
	for _, id := range []string{"a", "b", "c"} {
		ss = append(ss, newSpender(newRedisLedger(t, srv, id, 3*time.Second), budget))
	}
	var spent, ok atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Go(func() {
			for n := 0; n < 400; n++ {
				select {
				case <-stop:
					return
				default:
				}
				h, err := ss[i%3].Reserve(context.Background(), "k", "m", 100, 100)
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				ok.Add(1)
				time.Sleep(5 * time.Millisecond)
				h.Settle(worst, 200)
				spent.Add(int64(worst))
			}
		})
	}
	time.Sleep(150 * time.Millisecond)
	t.Logf("before the kill: %d served", ok.Load())
	srv.Stop()
	time.Sleep(400 * time.Millisecond)
	t.Logf("while Redis was down: %d served", ok.Load())
	srv.Restart()
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	if spent.Load() > budget.Limit {
		t.Errorf("spent %s of a budget of %s: overspent across the restart", money.Micros(spent.Load()),
			money.Micros(budget.Limit))
	}
	t.Logf("%d requests served, %s spent of %s", ok.Load(), money.Micros(spent.Load()), money.Micros(budget.Limit))
	var rep Report
	deadline := time.Now().Add(5 * time.Second)
	for {
		var err error
		if rep, err = ss[0].Report(context.Background()); err == nil && rep.Global[0].Spent == money.Micros(spent.Load()).String() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shared counter after the restart: %+v %v; want %s spent", rep.Global, err, money.Micros(spent.Load()))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRedisFlushAllNoOverspend: Redis loses the ledger (FLUSHALL) while one replica has spent 8
// of a budget of 10 worst cases; the other, which has not yet noticed, tries to reserve 4 at
// once. None is decided on the empty ledger: the scripts find the replica's lease gone and
// change nothing, both replicas write back what they know, and at most 2 are reserved.
func TestRedisFlushAllNoOverspend(t *testing.T) {
	for round := range 5 {
		srv := redistest.Start(t)
		worst := testPrice.worst(100, 100, 0)
		budget := Budget{Scope: ScopeGlobal, Limit: int64(10 * worst), Period: Day}
		a := newSpender(newRedisLedger(t, srv, "a", 3*time.Second), budget)
		b := newSpender(newRedisLedger(t, srv, "b", 3*time.Second), budget)
		ctx := context.Background()
		for range 8 {
			h, err := a.Reserve(ctx, "k", "m", 100, 100)
			if err != nil {
				t.Fatal(err)
			}
			h.Settle(worst, 200)
		}
		if _, err := b.Report(ctx); err != nil { // b has read the ledger: its lease is written
			t.Fatal(err)
		}
		rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
		if err := rc.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		rc.Close()
		var got atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if h, err := b.Reserve(ctx, "k", "m", 100, 100); err == nil {
					got.Add(1)
					h.Settle(worst, 200)
				}
			})
		}
		wg.Wait()
		if got.Load() > 2 {
			t.Fatalf("round %d: after the flush %d reserved against a budget with 2 left", round, got.Load())
		}
	}
}

// TestRedisReservationAcrossLoss: a reservation that waited for the store to settle before Redis
// lost its state, and runs only after its replica has found the loss and written its own state
// back (here held between the two), must not be decided on a ledger that may still lack another
// replica's spending: it waits again, until that replica (kept from Redis until then) has
// written back the budget it spent whole. Then it is refused. (Before, it was decided at once,
// on whatever b had last seen of a's spending.)
func TestRedisReservationAcrossLoss(t *testing.T) {
	srv := redistest.Start(t)
	worst := testPrice.worst(100, 100, 0)
	budget := Budget{Scope: ScopeGlobal, Limit: int64(10 * worst), Period: Day}
	la, lb := newRedisLedger(t, srv, "a", 3*time.Second), newRedisLedger(t, srv, "b", 3*time.Second)
	a, b := newSpender(la, budget), newSpender(lb, budget)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := b.Report(ctx); err != nil { // b has read the ledger: its lease is written
		t.Fatal(err)
	}
	for range 10 {
		h, err := a.Reserve(ctx, "k", "m", 100, 100)
		if err != nil {
			t.Fatal(err)
		}
		h.Settle(worst, 200)
	}
	hit, open := make(chan struct{}), make(chan struct{})
	var once sync.Once
	lb.beforeRun = func() {
		once.Do(func() {
			close(hit)
			<-open
		})
	}
	away := redistest.NewGate(redistest.Any)
	la.c.Circuit.(*store.Redis).Client().AddHook(away)
	type result struct {
		h   *Hold
		err error
	}
	res := make(chan result, 1)
	go func() {
		h, err := b.Reserve(ctx, "k", "m", 100, 100)
		res <- result{h, err}
	}()
	<-hit
	away.Armed.Store(true) // a finds the loss only when let through
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	if err := rc.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	lb.lost("a test") // as b's lease renewal would find it
	for end := time.Now().Add(10 * time.Second); lb.down.Load() || !lb.expectLease(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("b did not write back in 10s")
		}
	}
	close(open)
	select {
	case r := <-res:
		if r.err == nil {
			r.h.Settle(0, 0)
		}
		t.Fatalf("b's reservation ended before a wrote its spending back: %v", r.err)
	case <-time.After(300 * time.Millisecond):
	}
	close(away.Open)
	r := <-res
	if r.err == nil {
		r.h.Settle(0, 0)
		t.Fatal("b reserved against a budget a had spent whole")
	}
	if e := apierr.From(r.err); e.Code != "BUDGET_EXCEEDED" {
		t.Fatalf("b's reservation: %v, want refused by the budget", r.err)
	}
}
