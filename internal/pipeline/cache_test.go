package pipeline

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/cache"
	"github.com/layer0ai/layer0/internal/limit"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/route"
	"github.com/layer0ai/layer0/internal/upstream/fake"
)

const cacheTTL = time.Minute

// cacheRig is a rig whose model "m" (engine "e", alias "a") caches, with the rig's clock.
func cacheRig(t *testing.T, e any, p cache.Policy, o rigOptions) *rig {
	t.Helper()
	o.aliases = map[string]string{"a": "m"}
	r := newRig(t, map[string]any{"e": e, "b": &scripted{words: []string{"backup"}}},
		[]rigModel{{name: "m", engines: []string{"e"}, fallbacks: []string{"fb"}}, {name: "fb", engines: []string{"b"}}}, o)
	if p.TTL == 0 {
		p.TTL = cacheTTL
	}
	if p.MaxBytes == 0 {
		p.MaxBytes = 1 << 20
	}
	r.p.cache = cache.New(cache.Config{Models: map[string]cache.Policy{"m": p}, Aliases: o.aliases, Now: r.clock.Now})
	return r
}

// greedy is a request for temperature 0, which the default policy caches.
func greedy(model, text string) *llm.Request {
	r := request(model, text)
	zero := 0.0
	r.Temperature = &zero
	return r
}

// serveH runs one request with the given Cache-Control header ("" for none).
func (r *rig) serveH(req *llm.Request, control string, sink llm.Sink) (*Call, error) {
	h := http.Header{}
	if control != "" {
		h.Set("Cache-Control", control)
	}
	c := &Call{Request: req, Sink: sink, Header: h}
	c.Record.Start = time.Now()
	return c, r.p.Serve(context.Background(), c)
}

func TestCacheHitReplaysTheAnswer(t *testing.T) {
	e := &scripted{}
	r := cacheRig(t, e, cache.Policy{}, rigOptions{})
	miss := &recorder{}
	c1, err := r.serveH(greedy("m", "hello"), "", miss)
	if err != nil || c1.Record.Cache != CacheMiss {
		t.Fatalf("first: %v, cache %q", err, c1.Record.Cache)
	}
	// The alias shares the model's cache; the stream replays as it was sent.
	hit := &recorder{}
	c2, err := r.serveH(greedy("a", "hello"), "", hit)
	if err != nil || c2.Record.Cache != CacheHit {
		t.Fatalf("second: %v, cache %q", err, c2.Record.Cache)
	}
	if n := e.calls.Load(); n != 1 {
		t.Fatalf("engine called %d times, want 1", n)
	}
	// The miss flushed after each delta, the replay once at the end; the events are the same.
	if got, want := withoutFlushes(hit.log), withoutFlushes(miss.log); !reflect.DeepEqual(got, want) {
		t.Errorf("replay\n%q\nwant\n%q", got, want)
	}
	r1, r2 := c1.Record, c2.Record
	if r2.Usage != r1.Usage || r2.Served != "m" || r2.Engine != "e" || r2.Deltas != r1.Deltas || r2.Attempts != 0 || r2.TTFT <= 0 {
		t.Errorf("hit record %+v\nmiss record %+v", r2, r1)
	}
	// A whole answer (a collector) from the cache is the miss's answer.
	col := &llm.Collector{}
	if _, err := r.serveH(greedy("m", "hello"), "", col); err != nil {
		t.Fatal(err)
	}
	if got := col.Response; got.Content[0].Text != "one two three" || got.Usage != r1.Usage || got.ID != "" || got.Model != "m-up" {
		t.Errorf("collected hit %+v", got)
	}
}

func withoutFlushes(log []string) []string {
	var out []string
	for _, l := range log {
		if l != "flush" {
			out = append(out, l)
		}
	}
	return out
}

// A whole answer recorded through a collector replays as a stream with every event.
func TestCacheRecordsCollectedAnswers(t *testing.T) {
	e := &scripted{}
	r := cacheRig(t, e, cache.Policy{}, rigOptions{})
	if _, err := r.serveH(greedy("m", "x"), "", &llm.Collector{}); err != nil {
		t.Fatal(err)
	}
	hit := &recorder{}
	if c, err := r.serveH(greedy("m", "x"), "", hit); err != nil || c.Record.Cache != CacheHit {
		t.Fatalf("%v %q", err, c.Record.Cache)
	}
	want := []string{"start m-up", "block 0", "text one", "text  two", "text  three", "block_stop 0", "stop 3"}
	if got := withoutFlushes(hit.log); !reflect.DeepEqual(got, want) {
		t.Errorf("replay %q, want %q", got, want)
	}
}

func TestCacheControlAndPolicy(t *testing.T) {
	e := &scripted{}
	r := cacheRig(t, e, cache.Policy{}, rigOptions{})
	warm := 0.5
	sampled := greedy("m", "q")
	sampled.Temperature = &warm
	unset := request("m", "q")
	steps := []struct {
		name    string
		req     *llm.Request
		control string
		words   []string
		want    string // the record's Cache
		calls   int32  // engine calls so far
		text    string // the answer
	}{
		{"no-store does not store", greedy("m", "q"), "no-store", nil, CacheBypass, 1, "one two three"},
		{"so the next is a miss", greedy("m", "q"), "", nil, CacheMiss, 2, "one two three"},
		{"then a hit", greedy("m", "q"), "", nil, CacheHit, 2, "one two three"},
		{"no-store does not look up", greedy("m", "q"), "no-store", []string{"new"}, CacheBypass, 3, "new"},
		{"no-cache goes to the engine", greedy("m", "q"), "No-Cache", []string{"fresh"}, CacheRefresh, 4, "fresh"},
		{"and stores its answer", greedy("m", "q"), "", []string{"unused"}, CacheHit, 4, "fresh"},
		{"temperature above 0 is not cached", sampled, "", []string{"s"}, CacheBypass, 5, "s"},
		{"nor looked up", sampled, "", []string{"s2"}, CacheBypass, 6, "s2"},
		{"an absent temperature is sampled", unset, "", []string{"u"}, CacheBypass, 7, "u"},
	}
	for _, s := range steps {
		if s.words != nil {
			e.words = s.words
		}
		col := &llm.Collector{}
		c, err := r.serveH(s.req, s.control, col)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		text := col.Response.Content[0].Text
		if c.Record.Cache != s.want || e.calls.Load() != s.calls || text != s.text {
			t.Errorf("%s: cache %q, %d engine calls, answer %q; want %q, %d, %q", s.name, c.Record.Cache,
				e.calls.Load(), text, s.want, s.calls, s.text)
		}
	}

	// With cache_sampled, sampled answers are cached too.
	e2 := &scripted{}
	r2 := cacheRig(t, e2, cache.Policy{Sampled: true}, rigOptions{})
	for i := range 2 {
		if _, err := r2.serveH(sampled, "", &llm.Collector{}); err != nil {
			t.Fatal(err)
		}
		if _, err := r2.serveH(unset, "", &llm.Collector{}); err != nil {
			t.Fatal(err)
		}
		if n := e2.calls.Load(); n != 2 {
			t.Errorf("round %d: %d engine calls, want 2", i, n)
		}
	}
}

func TestCacheTTL(t *testing.T) {
	e := &scripted{}
	r := cacheRig(t, e, cache.Policy{TTL: 10 * time.Second}, rigOptions{})
	for _, s := range []struct {
		advance time.Duration
		want    string
	}{{0, CacheMiss}, {9 * time.Second, CacheHit}, {time.Second, CacheMiss}, {5 * time.Second, CacheHit}} {
		r.clock.Advance(s.advance)
		c, err := r.serveH(greedy("m", "t"), "", &recorder{})
		if err != nil || c.Record.Cache != s.want {
			t.Fatalf("after %s more: %v, %q, want %q", s.advance, err, c.Record.Cache, s.want)
		}
	}
	if n := e.calls.Load(); n != 2 {
		t.Errorf("%d engine calls, want 2", n)
	}
}

// Only complete answers are stored: not a stream that failed after content reached the client,
// not an answer the client went away from, not a fallback model's answer.
func TestCacheStoresOnlyCompleteAnswersOfTheModel(t *testing.T) {
	boom := &apierr.Error{Kind: apierr.Overloaded, Message: "boom"}
	for _, c := range []struct {
		name string
		e    *scripted
		sink llm.Sink
	}{
		{"failed mid-stream", &scripted{err: boom, after: 2}, &recorder{}},
		{"client went away", &scripted{}, &failingSink{after: 3}},
		{"fallback answered", &scripted{err: boom}, &recorder{}},
	} {
		r := cacheRig(t, c.e, cache.Policy{}, rigOptions{})
		_, _ = r.serveH(greedy("m", "z"), "", c.sink)
		c.e.err = nil
		c.e.after = 0
		if call, err := r.serveH(greedy("m", "z"), "", &recorder{}); err != nil || call.Record.Cache != CacheMiss {
			t.Errorf("%s: the next request: %v, cache %q, want a miss", c.name, err, call.Record.Cache)
		}
	}
}

// failingSink fails every Send after the first n, as a client that went away.
type failingSink struct {
	after int
	n     int
}

func (f *failingSink) Send(*llm.Event) error {
	f.n++
	if f.n > f.after {
		return errors.New("client gone")
	}
	return nil
}

func (f *failingSink) Flush() error { return nil }

// gated blocks every Generate until its gate opens, then answers (the first call fails when
// failFirst is set).
type gated struct {
	scripted
	gate      chan struct{}
	failFirst bool
	n         atomic.Int32
}

func (g *gated) Generate(ctx context.Context, req *llm.Request, sink llm.Sink) error {
	first := g.n.Add(1) == 1
	if first {
		<-g.gate
		if g.failFirst {
			g.calls.Add(1)
			return &apierr.Error{Kind: apierr.InvalidRequest, Message: "the leader's request failed"}
		}
	}
	return g.scripted.Generate(ctx, req, sink)
}

// runConcurrent serves n identical requests at once, the engine held until all have started.
func runConcurrent(t *testing.T, r *rig, g *gated, n int) ([]*Call, []error) {
	calls, errs := make([]*Call, n), make([]error, n)
	var started, done sync.WaitGroup
	for i := range n {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			started.Done()
			calls[i], errs[i] = r.serveH(greedy("m", "same"), "", &recorder{})
		}()
	}
	started.Wait()
	time.Sleep(100 * time.Millisecond) // the followers reach the flight while the leader is held
	close(g.gate)
	done.Wait()
	return calls, errs
}

func TestCacheSingleFlight(t *testing.T) {
	g := &gated{gate: make(chan struct{})}
	r := cacheRig(t, g, cache.Policy{}, rigOptions{})
	calls, errs := runConcurrent(t, r, g, 100)
	count := map[string]int{}
	for i, c := range calls {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		count[c.Record.Cache]++
		log := withoutFlushes(c.Sink.(*recorder).log)
		if want := []string{"start m-up", "block 0", "text one", "text  two", "text  three", "block_stop 0", "stop 3"}; !reflect.DeepEqual(log, want) {
			t.Errorf("request %d got %q", i, log)
		}
	}
	if n := g.calls.Load(); n != 1 {
		t.Errorf("%d engine calls for 100 identical requests, want 1", n)
	}
	if count[CacheMiss] != 1 || count[CacheCoalesced]+count[CacheHit] != 99 || count[CacheCoalesced] == 0 {
		t.Errorf("records: %v", count)
	}
}

// When the leader fails, its followers go to the engine themselves.
func TestCacheSingleFlightLeaderFails(t *testing.T) {
	g := &gated{gate: make(chan struct{}), failFirst: true}
	r := cacheRig(t, g, cache.Policy{}, rigOptions{})
	calls, errs := runConcurrent(t, r, g, 10)
	failed := 0
	for i, err := range errs {
		if err != nil {
			failed++
			continue
		}
		if log := withoutFlushes(calls[i].Sink.(*recorder).log); len(log) != 7 {
			t.Errorf("request %d got %q", i, log)
		}
	}
	if failed != 1 {
		t.Errorf("%d requests failed, want the leader's only", failed)
	}
	if n := g.calls.Load(); n < 2 {
		t.Errorf("%d engine calls: the followers did not go to the engine", n)
	}
}

// A hit takes no tokens from the rate limits: a key out of input tokens is still answered from
// the cache, while a new request is refused; hits charge no output tokens (five hits of 3 output
// tokens each would be far over the key's 6 per minute).
func TestCacheHitTakesNoTokens(t *testing.T) {
	specs := []auth.Spec{{Name: "k", Hash: auth.HashHex("l0-k"), Limits: limit.Limits{InputTokensPerMinute: 10,
		OutputTokensPerMinute: 6}}}
	r := cacheRig(t, &scripted{}, cache.Policy{}, rigOptions{keys: specs})
	serve := func(text string) (*Call, error) {
		c := &Call{Request: greedy("m", text), Sink: &recorder{}, Header: headerWithKey("l0-k")}
		return c, r.p.Serve(context.Background(), c)
	}
	if _, err := serve("hello"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if c, err := serve("hello"); err != nil || c.Record.Cache != CacheHit {
			t.Fatalf("hit %d: %v %q", i, err, c.Record.Cache)
		}
	}
	if _, err := serve("another question"); !apierr.IsRateLimit(err) {
		t.Errorf("a new request with the tokens spent: %v, want a 429", err)
	}
}

// A request whose answer will be stored takes the event path even where the pass-through path is
// offered; one that will not be stored keeps it.
func TestCacheTurnsThePassThroughOff(t *testing.T) {
	f := &forwarder{format: llm.FormatAnthropic, body: `{"type":"message"}`}
	r := cacheRig(t, f, cache.Policy{}, rigOptions{})
	serve := func(req *llm.Request) *Call {
		req.Format = llm.FormatAnthropic
		c := &Call{Request: req, Sink: &llm.Collector{}, Forward: &Forward{Body: []byte(`{}`), Out: fake.Writer(&discard{})}}
		if err := r.p.Serve(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := serve(greedy("m", "p")); c.Record.Passed || c.Record.Cache != CacheMiss {
		t.Errorf("cacheable: passed %v, cache %q", c.Record.Passed, c.Record.Cache)
	}
	if c := serve(request("m", "p")); !c.Record.Passed || c.Record.Cache != CacheBypass {
		t.Errorf("not cacheable: passed %v, cache %q", c.Record.Passed, c.Record.Cache)
	}
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }

// Models without a cache never reach the stage, and the stage costs a model without one nothing.
func TestNoCacheNoRecord(t *testing.T) {
	e := &scripted{}
	r := cacheRig(t, e, cache.Policy{}, rigOptions{})
	for range 2 {
		c, err := r.serveH(greedy("fb", "n"), "", &recorder{})
		if err != nil || c.Record.Cache != "" {
			t.Fatalf("%v %q", err, c.Record.Cache)
		}
	}
}

// A split is not cached: its requests are meant to reach each arm.
func TestCacheNotForSplits(t *testing.T) {
	e := &scripted{}
	r := newRig(t, map[string]any{"e": e}, []rigModel{{name: "m", engines: []string{"e"}}},
		rigOptions{splits: []route.Split{{Name: "s", Targets: []route.Target{{Model: "m", Weight: 1}}}}})
	r.p.cache = cache.New(cache.Config{Models: map[string]cache.Policy{"m": {TTL: time.Minute, MaxBytes: 1 << 20}}})
	for i := range 2 {
		c, err := r.serveH(greedy("s", "q"), "", &recorder{})
		if err != nil || c.Record.Cache != "" || e.calls.Load() != int32(i+1) {
			t.Fatalf("request %d through the split: %v, cache %q, %d engine calls", i, err, c.Record.Cache, e.calls.Load())
		}
	}
	if c, _ := r.serveH(greedy("m", "q"), "", &recorder{}); c.Record.Cache != CacheMiss {
		t.Errorf("the arm's model itself: cache %q, want a miss", c.Record.Cache)
	}
}

// leaderLeaves is an engine whose first call waits until its client goes away; the others answer.
type leaderLeaves struct {
	scripted
	n       atomic.Int32
	entered chan struct{}
}

func (l *leaderLeaves) Generate(ctx context.Context, req *llm.Request, sink llm.Sink) error {
	if l.n.Add(1) == 1 {
		close(l.entered)
		<-ctx.Done()
		return ctx.Err()
	}
	return l.scripted.Generate(ctx, req, sink)
}

// When the leader's own client goes away, its followers elect a new leader instead of each going
// to the engine: two engine calls in all, and every follower answered.
func TestCacheSingleFlightLeaderLeaves(t *testing.T) {
	e := &leaderLeaves{entered: make(chan struct{})}
	r := cacheRig(t, e, cache.Policy{}, rigOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	leaderDone := make(chan error, 1)
	go func() {
		c := &Call{Request: greedy("m", "same"), Sink: &recorder{}, Header: http.Header{}}
		leaderDone <- r.p.Serve(ctx, c)
	}()
	<-e.entered
	const n = 20
	calls, errs := make([]*Call, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			calls[i], errs[i] = r.serveH(greedy("m", "same"), "", &recorder{})
		}()
	}
	time.Sleep(100 * time.Millisecond) // the followers reach the flight
	cancel()
	if err := <-leaderDone; err == nil {
		t.Error("the leader whose client left succeeded")
	}
	wg.Wait()
	count := map[string]int{}
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("follower %d: %v", i, errs[i])
		}
		count[calls[i].Record.Cache]++
	}
	if got := e.n.Load(); got != 2 {
		t.Errorf("%d engine calls, want 2 (the leader that left, and one new leader)", got)
	}
	if count[CacheMiss] != 1 || count[CacheCoalesced]+count[CacheHit] != n-1 {
		t.Errorf("records: %v", count)
	}
}
