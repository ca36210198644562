// Package cache is the response cache: the key of a request (a hash of the canonical encoding of
// everything that can change the answer, and of the tenant — the API key — whose answer it is,
// unless the model shares answers across keys), the stores that keep answers as canonical events (the
// Store interface; Memory, the in-process LRU; Shared, in Redis for every replica with a Memory in
// front), each model's policy, and the single flight that lets concurrent identical requests share
// one engine call (and, with Shared, lets replicas wait for one another's).
//
// What the cache stores is events, not bytes: an answer recorded from any client format replays
// into any other (JSON, SSE, the binary protocol), through the same encoders an engine's answer
// goes through. The pipeline's cache stage (internal/pipeline/cache.go) decides when to look up,
// record and store.
package cache

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/layer0ai/layer0/internal/llm"
)

// Policy is one model's caching policy.
type Policy struct {
	// TTL is how long an answer is served from the cache.
	TTL time.Duration
	// MaxBytes is the model's store budget (Entry.Size summed); least recently used answers
	// are evicted beyond it.
	MaxBytes int64
	// Sampled caches answers sampled at a temperature above 0 too. Without it only requests
	// that ask for temperature 0 are cached: an absent temperature is the engine's default,
	// which is 1 for the Anthropic and OpenAI APIs.
	Sampled bool
	// ShareAcrossKeys lets every API key be served the answers any key stored. Without it
	// (the default) each key has answers of its own: an answer is stored and found under the
	// name of the key that asked (Tenant), and only that key's identical requests share an
	// engine call.
	ShareAcrossKeys bool
}

// Cacheable reports whether the answer to r may be cached under the policy. A request with a
// field the key does not cover (r.Ignored) never is: every field that reaches the engine is in
// the key, or the answer is not stored.
func (p *Policy) Cacheable(r *llm.Request) bool {
	return r.Ignored == "" && (p.Sampled || r.Temperature != nil && *r.Temperature == 0)
}

// Config is what a Cache is built from.
type Config struct {
	// Models are the policies of the models with caching enabled, by canonical name.
	Models map[string]Policy
	// Aliases map other names to models (or to splits, which are not cached); an alias shares
	// its model's cache and keys.
	Aliases map[string]string
	// Now is the clock of the stores' TTLs; nil is time.Now.
	Now func() time.Time
	// Shared, when set, keeps the answers in Redis, shared by every replica, each model's
	// Memory store (of its MaxBytes) in front as the replica's L1.
	Shared *RedisConfig
	// Store, when set, keeps every model's answers (an application's store: the models'
	// MaxBytes are its to apply); Shared is then ignored. Keys differ by model (Encode).
	Store Store
}

// Cache holds the caches of every model with caching enabled.
type Cache struct {
	byName map[string]*Model
	models map[string]*Model // the models themselves, without aliases
	now    func() time.Time
	shared RedisConfig // the zero value when the answers are in memory only
}

// New builds the caches of c, each with an empty Memory store, or a Shared store in front of
// which it is. It returns nil when no model caches, so that the pipeline skips the stage with one
// nil check.
func New(c Config) *Cache {
	if len(c.Models) == 0 {
		return nil
	}
	now := c.Now
	if now == nil {
		now = time.Now
	}
	x := &Cache{byName: map[string]*Model{}, models: map[string]*Model{}, now: now}
	if c.Shared != nil && c.Store == nil {
		x.shared = *c.Shared
	}
	for name, p := range c.Models {
		m := &Model{Name: name, Policy: p, Store: c.Store, flights: map[Key]*Flight{}}
		switch {
		case c.Store != nil:
		case c.Shared != nil:
			m.Store = NewShared(*c.Shared, NewMemory(p.MaxBytes, now))
		default:
			m.Store = NewMemory(p.MaxBytes, now)
		}
		x.byName[name], x.models[name] = m, m
	}
	for alias, target := range c.Aliases {
		if m := x.models[target]; m != nil {
			x.byName[alias] = m
		}
	}
	return x
}

// Now is the cache's clock.
func (c *Cache) Now() time.Time { return c.now() }

// Model returns the cache of name (a model, or an alias of one), nil when it does not cache.
// c may be nil.
func (c *Cache) Model(name string) *Model {
	if c == nil {
		return nil
	}
	return c.byName[name]
}

// Adopt takes over old's store for every model whose policy is unchanged, so a reload keeps the
// answers already cached. A model whose policy changed starts empty; so does every model when the
// shared store changed (another Redis, other settings, or none).
func (c *Cache) Adopt(old *Cache) {
	if c == nil || old == nil || c.shared != old.shared {
		return
	}
	for name, m := range c.models {
		if o := old.models[name]; o != nil && o.Policy == m.Policy {
			m.Store = o.Store
		}
	}
}

// Model is one model's cache: its policy, its store, and the answers in flight.
type Model struct {
	// Name is the model's canonical name, the one keys are made with.
	Name   string
	Policy Policy
	Store  Store

	mu      sync.Mutex
	flights map[Key]*Flight
}

// Flight is one answer being produced for a request: the leader calls the engine, followers wait
// for its answer.
//
// The leader's engine call runs at the pace its own client takes the answer: a client that
// stops reading, or reads a trickle, holds the engine's stream, and the flight, back. So the
// leader marks each write to its client (Writing, Wrote), and a follower stops waiting once the
// leader's client has held the answer back for StallAfter in all (ErrStalled) and serves itself:
// no follower waits on a leader much slower than serving it alone would be, while one waiting
// on the engine itself (the time to first token of a long prompt) waits on.
type Flight struct {
	done      chan struct{}
	request   []byte // the leader's canonical encoding, valid while the flight is joinable
	entry     *Entry // the answer; nil when the leader did not produce a complete one
	abandoned bool   // the leader's own client went away before the answer was complete
	// The leader's writes to its client, in nanoseconds since epoch: when the one under way
	// began (0 when none), and how long the finished ones took in all.
	writing atomic.Int64
	wrote   atomic.Int64
}

// epoch is the origin of Flight's write times, read on the monotonic clock.
var epoch = time.Now()

// StallAfter is how long the leader's client may hold the leader's answer back — the time spent
// in its writes to that client, in all — before a follower stops waiting and serves itself. A
// client that reads takes a write in microseconds; one that does not read holds a write until
// the write timeout.
const StallAfter = 500 * time.Millisecond

// stallCheck is how often a waiting follower looks at the leader's writes.
const stallCheck = StallAfter / 5

// ErrStalled is Wait's error when the leader's own client has held its answer back for
// StallAfter: the follower is to serve itself.
var ErrStalled = errors.New("cache: the leader's client is holding its answer back")

// Writing marks the start of a write of the leader's answer to its own client. f may be nil (a
// call that leads no flight).
func (f *Flight) Writing() {
	if f != nil {
		f.writing.Store(int64(time.Since(epoch)) | 1) // never 0
	}
}

// Wrote marks the end of the write Writing began.
func (f *Flight) Wrote() {
	if f != nil {
		if t := f.writing.Swap(0); t != 0 {
			f.wrote.Add(int64(time.Since(epoch)) - t)
		}
	}
}

// held returns how long the leader's client has held the answer back: its writes so far,
// the one under way included.
func (f *Flight) held() time.Duration {
	d := f.wrote.Load()
	if t := f.writing.Load(); t != 0 {
		d += int64(time.Since(epoch)) - t
	}
	return time.Duration(d)
}

// Tenant returns whose answers the requests of the API key named key (its name, "" for the
// anonymous caller) read and write: the key's own, or "" for every key's when the model shares
// them across keys (Policy.ShareAcrossKeys). It is the tenant Encode takes.
func (m *Model) Tenant(key string) string {
	if m.Policy.ShareAcrossKeys {
		return ""
	}
	return key
}

// Get returns the live answer to the request c encodes: an entry under its key stored for the
// same encoding (another encoding under the same key is a collision, and a miss).
func (m *Model) Get(ctx context.Context, c *Canon) (*Entry, bool) {
	e, ok := m.Store.Get(ctx, c.Key)
	if !ok || !bytes.Equal(e.Request, c.Bytes) {
		return nil, false
	}
	return e, true
}

// Put stores e as the answer to the request c encodes, for the policy's TTL. e keeps a copy of
// the encoding, to confirm hits with.
func (m *Model) Put(ctx context.Context, c *Canon, e *Entry) error {
	e.Request, e.Owner = bytes.Clone(c.Bytes), c.Tenant
	return m.Store.Put(ctx, c.Key, e, m.Policy.TTL)
}

// Replace stores e as Put does, over an answer that may already be stored (a Cache-Control:
// no-cache refresh): a store that keeps the first entry written (one shared by processes)
// forgets it first.
func (m *Model) Replace(ctx context.Context, c *Canon, e *Entry) error {
	_ = m.Store.Delete(ctx, c.Key) // Put stores it again; a failed delete leaves the old answer
	return m.Put(ctx, c, e)
}

// Filler is a Store shared by several processes whose misses coordinate: the one process about
// to produce an answer claims its filling, and the others wait briefly for that answer instead of
// calling the engine too (Shared).
type Filler interface {
	// Claim claims the filling of k, or waits for the process holding the claim and returns the
	// entry it stored; nil when the caller is to produce the answer.
	Claim(ctx context.Context, k Key) *Entry
	// Unclaim ends this process's claim on k without an entry, so that the waiting ones go on.
	Unclaim(ctx context.Context, k Key)
}

// Claim, on a store shared by processes (a Filler), claims the filling of the request c encodes,
// or waits for the process that holds the claim and returns its answer, confirmed against c as
// every hit is. nil: the caller produces the answer (and calls Unclaim if it stores none). On
// any other store it returns nil at once.
func (m *Model) Claim(ctx context.Context, c *Canon) *Entry {
	f, ok := m.Store.(Filler)
	if !ok {
		return nil
	}
	if e := f.Claim(ctx, c.Key); e != nil && bytes.Equal(e.Request, c.Bytes) {
		return e
	}
	return nil
}

// Unclaim ends a claim Claim took, without an answer: the processes waiting for it go on.
func (m *Model) Unclaim(ctx context.Context, c *Canon) {
	if f, ok := m.Store.(Filler); ok {
		f.Unclaim(ctx, c.Key)
	}
}

// Join returns the flight of the request c encodes, and leader set when there was none: the
// caller then produces the answer and must call Finish, whatever happens, and keep c until then.
// A follower calls Wait. f is nil when another request with the same key is in flight (a
// collision): the caller neither leads nor follows.
func (m *Model) Join(c *Canon) (f *Flight, leader bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f := m.flights[c.Key]; f != nil {
		if !bytes.Equal(f.request, c.Bytes) {
			return nil, false
		}
		return f, false
	}
	f = &Flight{done: make(chan struct{}), request: c.Bytes}
	m.flights[c.Key] = f
	return f, true
}

// Finish ends the leader's flight with its answer, or nil when there is none to share; the
// followers wake up.
func (m *Model) Finish(c *Canon, f *Flight, e *Entry) {
	m.mu.Lock()
	if m.flights[c.Key] == f {
		delete(m.flights, c.Key)
	}
	f.request = nil
	m.mu.Unlock()
	f.entry = e
	close(f.done)
}

// Abandon ends the leader's flight without an answer because the leader's own client went away:
// the answer itself did not fail, so the followers may elect a new leader (Abandoned) instead of
// each going to the engine.
func (m *Model) Abandon(c *Canon, f *Flight) {
	f.abandoned = true
	m.Finish(c, f, nil)
}

// Abandoned reports, after Wait returned no entry, whether the leader's client went away (Abandon)
// rather than the answer failing.
func (f *Flight) Abandoned() bool { return f.abandoned }

// Wait waits for the leader's answer: the entry, or nil when the leader failed (the follower
// then goes to the engine itself), or ErrStalled once the leader's own client has held the
// answer back for StallAfter (the follower serves itself), or ctx's error.
func (f *Flight) Wait(ctx context.Context) (*Entry, error) {
	tick := time.NewTicker(stallCheck)
	defer tick.Stop()
	for {
		select {
		case <-f.done:
			return f.entry, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
			if f.held() >= StallAfter {
				return nil, ErrStalled
			}
		}
	}
}

// Control is what the client's Cache-Control header asks of the cache.
type Control struct {
	// NoCache skips the lookup: the answer comes from the engine (and is stored).
	NoCache bool
	// NoStore neither looks up nor stores.
	NoStore bool
}

// ParseControl reads the no-cache and no-store directives of every Cache-Control header in h
// (case-insensitive; other directives are ignored). It does not allocate.
func ParseControl(h http.Header) Control {
	var c Control
	for _, v := range h["Cache-Control"] {
		for v != "" {
			var d string
			d, v, _ = strings.Cut(v, ",")
			d = strings.TrimSpace(d)
			if name, _, _ := strings.Cut(d, "="); strings.EqualFold(strings.TrimSpace(name), "no-cache") {
				c.NoCache = true
			} else if strings.EqualFold(d, "no-store") {
				c.NoStore = true
			}
		}
	}
	return c
}

// Recorder is a Sink that copies the events of one attempt, to be stored when it turns out
// complete and successful.
type Recorder struct {
	events []llm.Event
}

// Send implements llm.Sink: it keeps a copy of ev (the strings are immutable and shared).
func (r *Recorder) Send(ev *llm.Event) error {
	e := *ev
	if e.Kind == llm.EventStart {
		e.ID = "" // each replay gets its own id
	}
	r.events = append(r.events, e)
	return nil
}

// Flush implements llm.Sink.
func (r *Recorder) Flush() error { return nil }

// Reset forgets a failed attempt's events.
func (r *Recorder) Reset() { r.events = r.events[:0] }

// Entry returns the recorded answer as an entry served by served (the configured model), or nil
// when it is not to be stored: it must open with the start and end with the stop, and not be a
// refusal (an engine's content filter stopped it: a judgment on one request, which may change,
// not an answer to replay to everyone who asks the same).
func (r *Recorder) Entry(served string, now time.Time) *Entry {
	n := len(r.events)
	if n < 2 || r.events[0].Kind != llm.EventStart || r.events[n-1].Kind != llm.EventStop ||
		r.events[n-1].Stop == llm.StopRefusal {
		return nil
	}
	evs := make([]llm.Event, n)
	copy(evs, r.events)
	ownStrings(evs)
	return &Entry{Model: evs[0].Model, Served: served, Events: evs, Usage: evs[n-1].Usage, Stored: now}
}

// ownStrings gives the events' strings a copy of their own, one for all of them: an entry
// outlives the request, and the events' strings may point into memory the request reuses — an
// engine may answer with the request's own strings (the simulator names a tool_use block after
// the request's tool, and gives it input quoted from the prompt), and the request's strings may
// point into the body's pooled buffer.
func ownStrings(evs []llm.Event) {
	n := 0
	for i := range evs {
		e := &evs[i]
		n += len(e.ID) + len(e.Name) + len(e.Model) + len(e.Text) + len(e.StopSequence)
	}
	buf := make([]byte, 0, n)
	own := func(s string) string {
		if s == "" {
			return ""
		}
		start := len(buf)
		buf = append(buf, s...)
		return unsafe.String(&buf[start], len(s)) // buf never grows: its bytes stay put
	}
	for i := range evs {
		e := &evs[i]
		e.ID, e.Name, e.Model, e.Text, e.StopSequence = own(e.ID), own(e.Name), own(e.Model), own(e.Text), own(e.StopSequence)
	}
}
