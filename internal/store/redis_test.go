package store

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/store/redistest"
	"github.com/redis/go-redis/v9"
)

func newStore(t *testing.T, srv *redistest.Server, c Config) *Redis {
	t.Helper()
	client, err := Dial([]string{srv.URL()}, "", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Client = client
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDial: a bad cluster node URL is refused with its password redacted; no URL is an error.
func TestDial(t *testing.T) {
	if _, err := Dial(nil, "", 0); err == nil {
		t.Error("no URL: want an error")
	}
	_, err := Dial([]string{"redis://a:1", "redis://user:secret@/x"}, "", 0)
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("bad cluster URL: %v, want an error without the password", err)
	}
}

// TestLiveReplicas: each replica's heartbeat counts it live; the divisor is that count, or
// Replicas when larger; a replica that stops cleanly leaves the count at once.
func TestLiveReplicas(t *testing.T) {
	srv := redistest.Start(t)
	var sts []*Redis
	for _, id := range []string{"a", "b", "c"} {
		sts = append(sts, newStore(t, srv, Config{ReplicaID: id, Replicas: 2}))
	}
	waitFor(t, "three live replicas", func() bool { return sts[0].Live() == 3 && sts[1].Live() == 3 })
	if d, s := sts[0].Divisor(), sts[0].Share(30); d != 3 || s != 10 {
		t.Errorf("divisor %d, share of 30 %d; want 3 and 10", d, s)
	}
	sts[2].Close()
	waitFor(t, "two live replicas after one stopped", func() bool { return sts[0].Live() == 2 })
	if s := sts[0].Share(1); s != 1 {
		t.Errorf("share of 1: %d, want at least 1", s)
	}
}

type countingKeeper struct{ stale, restore, renew atomic.Int32 }

func (k *countingKeeper) Stale()   { k.stale.Add(1) }
func (k *countingKeeper) Restore() { k.restore.Add(1) }
func (k *countingKeeper) Renew()   { k.renew.Add(1) }

// TestCircuit: late answers fail alone until FailRun in a row; a lost connection opens the
// circuit at once; the probe closes it when Redis answers and has the keepers write back, and
// admissions wait for the others' write-back (Settled); a lenient user's late answer never opens
// it. Every failure is counted.
func TestCircuit(t *testing.T) {
	srv := redistest.Start(t)
	var errs atomic.Int32
	s := newStore(t, srv, Config{ReplicaID: "a", LeaseTTL: 600 * time.Millisecond, OnError: func() { errs.Add(1) }})
	k := &countingKeeper{}
	forget := s.Keep(k)
	defer forget()
	waitFor(t, "the first heartbeat", func() bool { return s.Live() == 1 })
	waitFor(t, "a lease renewal", func() bool { return k.renew.Load() > 0 })

	ctx := context.Background()
	for range 10 {
		s.Fail(ctx, context.DeadlineExceeded) // the cache's own timeout
	}
	if !s.Up() {
		t.Fatal("a lenient user's late answers opened the circuit")
	}
	for i := 1; i < FailRun; i++ {
		if s.Failed(ctx, context.DeadlineExceeded) {
			t.Fatalf("late answer %d opened the circuit", i)
		}
	}
	s.OK()
	if s.Failed(ctx, context.DeadlineExceeded) {
		t.Fatal("an answer did not end the run of failures")
	}

	srv.Stop()
	if !s.Failed(ctx, errors.New("connection refused")) || s.Up() || s.Use() {
		t.Fatal("a lost connection did not open the circuit")
	}
	srv.Restart()
	waitFor(t, "the probe to find Redis again", s.Up)
	if k.restore.Load() == 0 {
		t.Error("the keeper did not write back when Redis came back")
	}
	if s.ExpectBeat() && s.Settled(ctx) != nil {
		t.Error("Settled failed without a deadline")
	}
	if got := int(errs.Load()); got != int(s.Errors()) || got < 10+FailRun+1 {
		t.Errorf("errors counted %d, Errors %d; want equal and ≥ %d", got, s.Errors(), 10+FailRun+1)
	}

	before := k.restore.Load()
	s.Lost("a test")
	if k.stale.Load() == 0 {
		t.Error("Lost did not mark the keeper's state stale")
	}
	short, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	if err := s.Settled(short); err == nil {
		t.Error("Settled right after a loss: want to wait for the write-back")
	}
	waitFor(t, "the write-back after the loss", func() bool { return k.restore.Load() > before })
}

// slowKeeper takes delay to write back, then records when it finished.
type slowKeeper struct {
	delay time.Duration
	done  atomic.Int64 // Unix ns of the last write-back's end
}

func (k *slowKeeper) Stale() {}
func (k *slowKeeper) Restore() {
	time.Sleep(k.delay)
	k.done.Store(time.Now().UnixNano())
}
func (k *slowKeeper) Renew() {}

// TestCensusWaitsForSlowWriteBack: after Redis loses its state (FLUSHALL), a replica's
// admissions wait until every replica live before the loss has written its counts back, however
// late that is (here 2s, far past the settle window), and no longer than that; a replica that
// stopped cleanly before the loss is not waited for.
func TestCensusWaitsForSlowWriteBack(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = 6 * time.Second
	a := newStore(t, srv, Config{ReplicaID: "a", LeaseTTL: ttl})
	b := newStore(t, srv, Config{ReplicaID: "b", LeaseTTL: ttl})
	gone := newStore(t, srv, Config{ReplicaID: "gone", LeaseTTL: ttl})
	slow := &slowKeeper{delay: 2 * time.Second}
	defer b.Keep(slow)()
	waitFor(t, "three live replicas", func() bool { return a.Live() == 3 && b.Live() == 3 })
	gone.Close()
	waitFor(t, "two live replicas", func() bool { return a.Live() == 2 && b.Live() == 2 })

	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	if err := rc.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	flushed := time.Now()
	a.Lost("a test") // as an admission finding its heartbeat gone would
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Settled(ctx); err != nil {
		t.Fatalf("Settled: %v", err)
	}
	settled := time.Now()
	done := slow.done.Load()
	if done == 0 || settled.UnixNano() < done {
		t.Fatalf("admissions resumed %v after the flush, before the slow replica wrote its counts back", settled.Sub(flushed))
	}
	if late := settled.Sub(time.Unix(0, done)); late > time.Second {
		t.Errorf("admissions resumed %v after the last write-back; want promptly", late)
	}
}

// TestLostStartsNewGeneration: after a loss, this replica's heartbeat entry is written again
// under a new generation, the old one removed. An operation that carries the old entry (built
// before the loss was found, run after the entry was written again) finds it gone, so it cannot
// pass on counts that lack the other replicas'; Current tells it the loss was found already.
func TestLostStartsNewGeneration(t *testing.T) {
	srv := redistest.Start(t)
	s := newStore(t, srv, Config{ReplicaID: "a#b", LeaseTTL: 600 * time.Millisecond})
	waitFor(t, "the first heartbeat", s.ExpectBeat)
	key, old := s.Heartbeat()
	if old == "" || !s.Current(old) {
		t.Fatalf("heartbeat entry %q, current %v", old, s.Current(old))
	}
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	ctx := context.Background()
	if err := rc.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s.Lost("a test")
	if s.Current(old) {
		t.Error("the entry from before the loss is still current")
	}
	var cur string
	waitFor(t, "the entry written again", func() bool { _, cur = s.Heartbeat(); return cur != "" })
	if cur == old || replicaOf(cur) != "a#b" {
		t.Errorf("entry after the loss %q (before %q): want a new generation of replica a#b", cur, old)
	}
	members, err := rc.ZRange(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 1 || members[0] != cur {
		t.Errorf("heartbeat set %v, want only %q", members, cur)
	}
}

// TestJoinWaitsUntilSeen: a replica that has just started waits, before taking from the shared
// counts, until every other live replica's heartbeat has seen it, so that a census after a loss
// soon after it started waits for its write-back too; a replica alone does not wait for others,
// and a replica that died (its entry left until its lease ends) holds a newcomer back for the
// join window at most.
func TestJoinWaitsUntilSeen(t *testing.T) {
	srv := redistest.Start(t)
	const ttl = 6 * time.Second
	a := newStore(t, srv, Config{ReplicaID: "a", LeaseTTL: ttl})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := a.Settled(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > a.health.every {
		t.Errorf("a replica alone waited %v to join", d)
	}

	b := newStore(t, srv, Config{ReplicaID: "b", LeaseTTL: ttl})
	if err := b.Settled(ctx); err != nil {
		t.Fatal(err)
	}
	seenB := func(s *Redis) bool {
		if es := s.health.seen.Load(); es != nil {
			for _, e := range *es {
				if e.replica == "b" {
					return true
				}
			}
		}
		return false
	}
	if !seenB(a) {
		t.Fatal("b's admissions began before a's heartbeat had seen it")
	}

	// A replica that died leaves its entry; a newcomer waits for it for the window at most.
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	if err := rc.ZAdd(ctx, a.health.key[0], redis.Z{Score: float64(time.Now().Add(ttl).UnixMilli()), Member: "dead#1"}).Err(); err != nil {
		t.Fatal(err)
	}
	c := newStore(t, srv, Config{ReplicaID: "c", LeaseTTL: ttl, Timeout: 200 * time.Millisecond})
	start = time.Now()
	if err := c.Settled(ctx); err != nil {
		t.Fatal(err)
	}
	if d, most := time.Since(start), 200*time.Millisecond+c.settleWindow(); d > most+200*time.Millisecond || d < most/2 {
		t.Errorf("a dead replica's entry held the newcomer back %v; want about %v, no longer", d, most)
	}

	// Redis found unreachable ends the wait: the newcomer serves from its own share meanwhile.
	d := newStore(t, srv, Config{ReplicaID: "d", LeaseTTL: ttl, Timeout: 5 * time.Second})
	waited := make(chan time.Duration, 1)
	start = time.Now()
	go func() {
		_ = d.Settled(ctx)
		waited <- time.Since(start)
	}()
	time.Sleep(100 * time.Millisecond)
	d.Failed(ctx, errors.New("connection refused"))
	if w := <-waited; w > time.Second {
		t.Errorf("a newcomer's wait went on %v after Redis was found unreachable", w-100*time.Millisecond)
	}
}
