package cache_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/cache"
	"github.com/layer0ai/layer0/internal/fakeclock"
	"github.com/layer0ai/layer0/internal/llm"
)

func entry(text string) *cache.Entry {
	return &cache.Entry{Model: "m", Events: []llm.Event{{Kind: llm.EventStart}, {Kind: llm.EventTextDelta, Text: text},
		{Kind: llm.EventStop}}}
}

func key(s string) cache.Key {
	return cache.KeyOf("", "m", &llm.Request{Messages: []llm.Message{{Content: []llm.Block{{Text: s}}}}})
}

func TestMemoryTTL(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m := cache.NewMemory(1<<20, clk.Now)
	ctx := context.Background()
	e := entry("x")
	if err := m.Put(ctx, key("a"), e, time.Minute); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute - time.Nanosecond)
	if got, ok := m.Get(ctx, key("a")); !ok || got != e {
		t.Fatalf("before the TTL: %v %v", got, ok)
	}
	clk.Advance(time.Nanosecond)
	if _, ok := m.Get(ctx, key("a")); ok {
		t.Fatal("found at the TTL")
	}
	if st := m.Stats(); st.Entries != 0 || st.Bytes != 0 {
		t.Fatalf("an expired entry is still held: %+v", st)
	}
}

func TestMemoryEvictsLeastRecentlyUsed(t *testing.T) {
	ctx := context.Background()
	size := entry(strings.Repeat("x", 100)).Size()
	m := cache.NewMemory(3*size, nil)
	for _, k := range []string{"a", "b", "c"} {
		_ = m.Put(ctx, key(k), entry(strings.Repeat("x", 100)), time.Hour)
	}
	m.Get(ctx, key("a")) // a is now the most recently used; b the least
	_ = m.Put(ctx, key("d"), entry(strings.Repeat("y", 100)), time.Hour)
	for k, want := range map[string]bool{"a": true, "b": false, "c": true, "d": true} {
		if _, ok := m.Get(ctx, key(k)); ok != want {
			t.Errorf("%s: found %v, want %v", k, ok, want)
		}
	}
	if st := m.Stats(); st.Bytes > 3*size || st.Entries != 3 {
		t.Errorf("stats %+v, budget %d", st, 3*size)
	}
	// An entry larger than the whole budget is not stored, and evicts nothing.
	_ = m.Put(ctx, key("huge"), entry(strings.Repeat("z", int(4*size))), time.Hour)
	if _, ok := m.Get(ctx, key("huge")); ok {
		t.Error("an entry over the budget was stored")
	}
	if st := m.Stats(); st.Entries != 3 {
		t.Errorf("an entry over the budget evicted others: %+v", st)
	}
	// Replacing an entry counts its size once.
	_ = m.Put(ctx, key("a"), entry(strings.Repeat("x", 100)), time.Hour)
	if st := m.Stats(); st.Entries != 3 || st.Bytes != 3*size {
		t.Errorf("after replacing: %+v, want 3 entries of %d", st, size)
	}
	_ = m.Delete(ctx, key("a"))
	if _, ok := m.Get(ctx, key("a")); ok {
		t.Error("found after Delete")
	}
}

func TestParseControl(t *testing.T) {
	for _, c := range []struct {
		h    []string
		want cache.Control
	}{
		{nil, cache.Control{}},
		{[]string{"no-cache"}, cache.Control{NoCache: true}},
		{[]string{"No-Store"}, cache.Control{NoStore: true}},
		{[]string{"max-age=0, no-cache, no-store"}, cache.Control{NoCache: true, NoStore: true}},
		{[]string{"private", " NO-CACHE "}, cache.Control{NoCache: true}},
		{[]string{`no-cache="set-cookie"`}, cache.Control{NoCache: true}},
		{[]string{"no-cachex, xno-store, max-age=60"}, cache.Control{}},
	} {
		h := http.Header{}
		for _, v := range c.h {
			h.Add("Cache-Control", v)
		}
		if got := cache.ParseControl(h); got != c.want {
			t.Errorf("%q: %+v, want %+v", c.h, got, c.want)
		}
	}
	h := http.Header{"Cache-Control": {"max-age=0, no-cache"}}
	if n := testing.AllocsPerRun(100, func() { cache.ParseControl(h) }); n != 0 {
		t.Errorf("ParseControl allocates %.0f times", n)
	}
}

func TestPolicyCacheable(t *testing.T) {
	zero, warm := 0.0, 0.7
	p := cache.Policy{}
	if p.Cacheable(&llm.Request{}) || p.Cacheable(&llm.Request{Temperature: &warm}) || !p.Cacheable(&llm.Request{Temperature: &zero}) {
		t.Error("the default policy caches only temperature 0")
	}
	p.Sampled = true
	if !p.Cacheable(&llm.Request{}) || !p.Cacheable(&llm.Request{Temperature: &warm}) {
		t.Error("cache_sampled caches every temperature")
	}
}

func TestFlight(t *testing.T) {
	c := cache.New(cache.Config{Models: map[string]cache.Policy{"m": {TTL: time.Minute, MaxBytes: 1 << 20}},
		Aliases: map[string]string{"alias": "m", "to-split": "a-split"}})
	m := c.Model("m")
	if c.Model("alias") != m || c.Model("to-split") != nil || c.Model("other") != nil {
		t.Fatal("aliases share their model's cache; other names have none")
	}
	k := cache.Encode("", "m", &llm.Request{Messages: []llm.Message{{Content: []llm.Block{{Text: "q"}}}}})
	defer k.Release()
	f, leader := m.Join(k)
	if !leader {
		t.Fatal("the first is not the leader")
	}
	var wg sync.WaitGroup
	got := make([]*cache.Entry, 10)
	for i := range got {
		ff, lead := m.Join(k)
		if lead || ff != f {
			t.Fatal("a second caller leads")
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = ff.Wait(context.Background())
		}()
	}
	e := entry("answer")
	m.Finish(k, f, e)
	wg.Wait()
	for i, g := range got {
		if g != e {
			t.Errorf("follower %d got %v", i, g)
		}
	}
	if _, leader := m.Join(k); !leader {
		t.Error("after Finish the next caller does not lead")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f2, _ := m.Join(k)
	if _, err := f2.Wait(ctx); err == nil {
		t.Error("Wait ignores its context")
	}
	f3, _ := m.Join(k)
	if f3 != f2 {
		t.Fatal("a flight left without Finish was replaced")
	}
	m.Abandon(k, f2)
	if e, err := f2.Wait(context.Background()); e != nil || err != nil || !f2.Abandoned() {
		t.Errorf("an abandoned flight: %v %v %v", e, err, f2.Abandoned())
	}
	f4, leader := m.Join(k)
	if !leader {
		t.Fatal("after Abandon the next caller does not lead")
	}
	m.Finish(k, f4, nil)
	if e, _ := f4.Wait(context.Background()); e != nil || f4.Abandoned() {
		t.Error("a failed flight is not abandoned")
	}
}

// A follower waits on a leader that is waiting on its engine (writing nothing) past StallAfter,
// and stops waiting, with ErrStalled, on a leader whose client held its answer back that long:
// stuck in one write, or in many short ones (a client reading a trickle). The flights are
// different tenants' (the key covers the tenant).
func TestFlightStalledLeader(t *testing.T) {
	c := cache.New(cache.Config{Models: map[string]cache.Policy{"m": {TTL: time.Minute, MaxBytes: 1 << 20}}})
	m := c.Model("m")
	req := &llm.Request{Messages: []llm.Message{{Content: []llm.Block{{Text: "q"}}}}}
	if a, b := cache.KeyOf("alice", "m", req), cache.KeyOf("bob", "m", req); a == b {
		t.Fatal("two tenants' identical requests share a key")
	}

	engine := cache.Encode("alice", "m", req)
	defer engine.Release()
	f, _ := m.Join(engine)
	f.Writing() // a write that returned: the leader then waits on its engine
	f.Wrote()
	e := entry("answer")
	time.AfterFunc(cache.StallAfter*3/2, func() { m.Finish(engine, f, e) })
	if got, err := f.Wait(context.Background()); got != e || err != nil {
		t.Errorf("follower of a leader waiting on its engine: %v %v, want the answer", got, err)
	}

	client := cache.Encode("bob", "m", req)
	defer client.Release()
	g, _ := m.Join(client)
	g.Writing() // never returns: the leader's client is not reading
	start := time.Now()
	if got, err := g.Wait(context.Background()); got != nil || !errors.Is(err, cache.ErrStalled) {
		t.Errorf("follower of a stalled leader: %v %v, want ErrStalled", got, err)
	}
	if took := time.Since(start); took < cache.StallAfter {
		t.Errorf("gave up after %v, before StallAfter", took)
	}
	m.Finish(client, g, nil)

	trickle := cache.Encode("carol", "m", req)
	defer trickle.Release()
	h, _ := m.Join(trickle)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // each write takes a tenth of StallAfter: none is a stall by itself
		defer close(done)
		for range 30 {
			h.Writing()
			select {
			case <-stop:
				h.Wrote()
				return
			case <-time.After(cache.StallAfter / 10):
			}
			h.Wrote()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // the leader never finishes
	defer cancel()
	if got, err := h.Wait(ctx); got != nil || !errors.Is(err, cache.ErrStalled) {
		t.Errorf("follower of a leader whose client reads a trickle: %v %v, want ErrStalled", got, err)
	}
	close(stop)
	<-done
	m.Finish(trickle, h, nil)
}

func TestRecorderKeepsOnlyCompleteAnswers(t *testing.T) {
	var r cache.Recorder
	evs := []llm.Event{{Kind: llm.EventStart, ID: "msg_1", Model: "up"}, {Kind: llm.EventBlockStart},
		{Kind: llm.EventTextDelta, Text: "hi"}, {Kind: llm.EventBlockStop}, {Kind: llm.EventStop, Usage: llm.Usage{InputTokens: 3, OutputTokens: 1}}}
	for i := range evs[:3] {
		_ = r.Send(&evs[i])
	}
	if r.Entry("m", time.Time{}) != nil {
		t.Fatal("an answer without its stop is an entry")
	}
	r.Reset()
	for i := range evs {
		_ = r.Send(&evs[i])
	}
	evs[2].Text = "changed by the engine after Send"
	e := r.Entry("m", time.Time{})
	if e == nil || len(e.Events) != 5 || e.Events[0].ID != "" || e.Events[2].Text != "hi" || e.Usage.OutputTokens != 1 || e.Model != "up" {
		t.Fatalf("entry %+v", e)
	}
}

// TestCollision gives two different requests the same key, as a collision of the hash would:
// neither is ever answered with the other's entry, and the second neither leads nor follows the
// first's flight.
func TestCollision(t *testing.T) {
	c := cache.New(cache.Config{Models: map[string]cache.Policy{"m": {TTL: time.Minute, MaxBytes: 1 << 20}}})
	m := c.Model("m")
	ctx := context.Background()
	a := cache.Encode("", "m", &llm.Request{Messages: []llm.Message{{Content: []llm.Block{{Text: "a"}}}}})
	b := cache.Encode("", "m", &llm.Request{Messages: []llm.Message{{Content: []llm.Block{{Text: "b"}}}}})
	defer a.Release()
	defer b.Release()
	if a.Key == b.Key {
		t.Fatal("different requests, same key")
	}
	b.Key = a.Key // the collision
	e := entry("a's answer")
	if err := m.Put(ctx, a, e); err != nil {
		t.Fatal(err)
	}
	if got, ok := m.Get(ctx, a); !ok || got != e {
		t.Fatalf("a's own lookup: %v %v", got, ok)
	}
	if got, ok := m.Get(ctx, b); ok {
		t.Fatalf("b was answered with a's entry %v", got)
	}
	fa, leader := m.Join(a)
	if !leader {
		t.Fatal("a does not lead")
	}
	if fb, lead := m.Join(b); fb != nil || lead {
		t.Fatalf("b joined a's flight: %v leader %v", fb, lead)
	}
	if fa2, lead := m.Join(a); fa2 != fa || lead {
		t.Fatal("a second a does not follow a's flight")
	}
	m.Finish(a, fa, e)
	// b's own answer replaces a's under the shared key; a then misses, b hits.
	eb := entry("b's answer")
	if err := m.Put(ctx, b, eb); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Get(ctx, a); ok {
		t.Fatal("a answered with b's entry")
	}
	if got, ok := m.Get(ctx, b); !ok || got != eb {
		t.Fatalf("b's own lookup: %v %v", got, ok)
	}
}

// TestMemoryFairAcrossOwners: past the budget the owner holding the most bytes loses its least
// recently used answer first, so one key filling the cache evicts its own answers, not another
// key's; an owner's own order stays least recently used.
func TestMemoryFairAcrossOwners(t *testing.T) {
	ctx := context.Background()
	owned := func(owner, text string) *cache.Entry { e := entry(text); e.Owner = owner; return e }
	size := owned("alice", strings.Repeat("x", 100)).Size()
	m := cache.NewMemory(5*size, nil)
	_ = m.Put(ctx, key("alice-1"), owned("alice", strings.Repeat("x", 100)), time.Hour)
	for i := range 20 {
		_ = m.Put(ctx, key("bob-"+strings.Repeat("b", i)), owned("bob", strings.Repeat("y", 100)), time.Hour)
		m.Get(ctx, key("bob-")) // bob's first stays his most recently used
	}
	if _, ok := m.Get(ctx, key("alice-1")); !ok {
		t.Error("alice's answer was evicted by bob's")
	}
	if _, ok := m.Get(ctx, key("bob-")); !ok {
		t.Error("bob's most recently used answer was evicted before his older ones")
	}
	if _, ok := m.Get(ctx, key("bob-b")); ok {
		t.Error("bob's least recently used answer is still held")
	}
	if st := m.Stats(); st.Entries != 5 || st.Bytes > 5*size {
		t.Errorf("stats %+v, budget %d", st, 5*size)
	}
}
