// Package limit enforces per-key and global rate limits — requests, input tokens and output
// tokens per minute (GCRA cells with a burst of one minute's worth) and concurrent requests — with
// an injected clock and a pluggable Store, plus size checks on a decoded request.
//
// A request is admitted in two stages, each for its key and then for the global scope. Admit,
// before anything is counted: a concurrency slot and one request, and it needs one output token
// left (not in debt). Reserve, once the tokenizer has counted the request: its
// estimated input tokens. Counting is the expensive part of admission, so a caller that is
// refused anyway is refused before it. If any step is refused the steps already taken are undone
// and the request gets a 429 carrying retry-after and the Anthropic and OpenAI rate-limit
// headers. The input estimate is settled with the engine's count afterwards (refund or extra
// charge).
//
// Output tokens are charged while they stream, unconditionally. A stream that crosses its
// output limit is allowed to finish: cutting a half-written answer helps no one, and max_tokens
// already bounds it. The cell goes into debt, and the key's next requests are refused (with a
// retry-after that covers the debt) until the debt is repaid at the refill rate.
package limit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
)

// Minute is the period of every per-minute limit.
const Minute = time.Minute

// Limits is one scope's limits (a key's, or the global one). A zero field means no limit on that
// dimension; the zero value limits nothing.
type Limits struct {
	// RequestsPerMinute caps requests started per minute. Default 0 (no limit).
	RequestsPerMinute int64
	// InputTokensPerMinute caps input tokens per minute, estimated before the call and settled
	// with the engine's count after. Default 0 (no limit).
	InputTokensPerMinute int64
	// OutputTokensPerMinute caps output tokens per minute, charged as they stream. Default 0
	// (no limit).
	OutputTokensPerMinute int64
	// Concurrent caps requests in flight at once. Default 0 (no limit).
	Concurrent int64
}

// Config configures a Limiter.
type Config struct {
	// Global limits apply to all requests together, on top of each key's own: all requests of
	// this process with the Memory store, of every layer0 replica sharing a network Store.
	// Default none.
	Global Limits
	// Keys maps an API key's name to its limits. The name "" is the anonymous caller (no auth);
	// it is always present, with no limits of its own unless listed here.
	Keys map[string]Limits
	// Store holds the counters. Default: a new in-memory store.
	Store Store
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Limiter enforces a Config. It is immutable after New (and Adopt), and safe for concurrent use.
// A nil *Limiter admits everything.
type Limiter struct {
	now    func() time.Time
	global scope
	keys   map[string]*scope
	// redis, when the store is Redis, runs each of a request's operations on all its cells in
	// one round trip (redisbatch.go); the cells one by one are the path of every other store, and
	// of Redis while it is unreachable.
	redis *Redis
}

// scope is the resolved cells of one key, or of the global limits.
type scope struct {
	name   string
	global bool
	req    rateSlot
	in     rateSlot
	out    rateSlot
	conc   gaugeSlot
}

type rateSlot struct {
	id   string
	rate Rate
	cell RateCell // nil when the dimension is unlimited
}

type gaugeSlot struct {
	id   string
	max  int64
	cell Gauge // nil when unlimited
}

// New builds a Limiter, resolving every cell in the store now, so the request path does no
// lookups and allocates nothing. The limits are taken as given: internal/config refuses
// negative ones.
func New(c Config) *Limiter {
	if c.Store == nil {
		c.Store = NewMemory()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	l := &Limiter{now: c.Now, keys: make(map[string]*scope, len(c.Keys)+1)}
	l.redis, _ = c.Store.(*Redis)
	l.global = newScope(c.Store, "", true, c.Global)
	for name, lim := range c.Keys {
		s := newScope(c.Store, name, false, lim)
		l.keys[name] = &s
	}
	if _, ok := l.keys[""]; !ok {
		s := newScope(c.Store, "", false, Limits{})
		l.keys[""] = &s
	}
	return l
}

// newScope resolves a scope's cells. A rate cell's id includes its rate, so a Limiter built with
// a changed limit starts that dimension afresh while unchanged ones keep their state; a gauge's
// id does not, because the requests it counts are in flight whatever the new limit is.
func newScope(st Store, name string, global bool, lim Limits) scope {
	prefix := "global/"
	if !global {
		prefix = "key/" + strconv.Quote(name) + "/"
	}
	s := scope{name: name, global: global}
	rate := func(dim string, n int64) rateSlot {
		if n == 0 {
			return rateSlot{}
		}
		r := Rate{Limit: n, Period: Minute}
		id := fmt.Sprintf("%s%s/%d/%s", prefix, dim, n, Minute)
		return rateSlot{id: id, rate: r, cell: st.Rate(id)}
	}
	s.req = rate("requests", lim.RequestsPerMinute)
	s.in = rate("input_tokens", lim.InputTokensPerMinute)
	s.out = rate("output_tokens", lim.OutputTokensPerMinute)
	if lim.Concurrent > 0 {
		id := prefix + "concurrent"
		s.conc = gaugeSlot{id: id, max: lim.Concurrent, cell: st.Gauge(id)}
	}
	return s
}

// Adopt makes l use old's state for every cell whose id is unchanged: same key, same dimension,
// same limit (and, for concurrency, the same key whatever its limit). Cells are shared, not
// copied, so requests still running on old settle into the state l sees. Call it once, before l
// serves any request. A nil old is a no-op.
func (l *Limiter) Adopt(old *Limiter) {
	if l == nil || old == nil {
		return
	}
	rates := map[string]RateCell{}
	gauges := map[string]Gauge{}
	collect := func(s *scope) {
		for _, r := range []*rateSlot{&s.req, &s.in, &s.out} {
			if r.cell != nil {
				rates[r.id] = r.cell
			}
		}
		if s.conc.cell != nil {
			gauges[s.conc.id] = s.conc.cell
		}
	}
	collect(&old.global)
	for _, s := range old.keys {
		collect(s)
	}
	adopt := func(s *scope) {
		for _, r := range []*rateSlot{&s.req, &s.in, &s.out} {
			if c, ok := rates[r.id]; ok && r.cell != nil {
				r.cell = c
			}
		}
		if g, ok := gauges[s.conc.id]; ok && s.conc.cell != nil {
			s.conc.cell = g
		}
	}
	adopt(&l.global)
	for _, s := range l.keys {
		adopt(s)
	}
}

// Lease is one admitted request's hold on the limits: its concurrency slot, its input-token
// reservation and the output tokens charged so far. Settle, Charge and Release it from the
// goroutine that serves the request; a Lease is not safe for concurrent use. Its store calls
// do not take the request's context: a settlement must happen even after the client has gone.
// The zero Lease (from a nil Limiter) does nothing.
type Lease struct {
	l      *Limiter
	key    *scope
	input  int64 // input tokens currently reserved
	output int64 // output tokens charged
	held   bool  // concurrency slots held
	// With Redis, token changes not written yet: a settlement is written with the release, and
	// output charged while streaming at most every chargeEvery, so that the end of a request is
	// one round trip and a stream's tokens are not one each.
	owedIn, owedOut int64
	wrote           time.Time // when the output was last written (or the lease admitted)
	// With Redis, the TAT of each rate cell (in the headers' order: requests, input, output;
	// the key's then the global) as this lease's own operations left it, where known bit i
	// is set: the rate-limit headers are computed from it, without a round trip.
	seen  [6]int64
	known uint8
}

// slots are the lease's rate cells in the headers' order.
func (ls *Lease) slots() [6]*rateSlot {
	g := &ls.l.global
	return [6]*rateSlot{&ls.key.req, &g.req, &ls.key.in, &g.in, &ls.key.out, &g.out}
}

// saw notes the state each op that ran in Redis left its cell in.
func (ls *Lease) saw(ops []rateOp) {
	all := ls.slots()
	for _, o := range ops {
		if !o.ran {
			continue
		}
		for i, s := range all {
			if s == o.slot {
				ls.seen[i], ls.known = o.tat, ls.known|1<<i
			}
		}
	}
}

// Admitted reports whether the lease is of an admitted request (not the zero Lease).
func (ls *Lease) Admitted() bool { return ls.l != nil }

// chargeEvery is how often, at most, a stream's output tokens are written to a Redis store
// while it streams: at the first charge at least this long after the last write, and with the
// release. The debt other requests of the key see lags by about this.
const chargeEvery = 100 * time.Millisecond

// Acquire admits a request of key name with an estimated inputTokens: Admit, then Reserve. It
// returns a 429 *apierr.Error saying which limit refused it, with RetryAfter and the rate-limit
// headers. An unknown name is refused (fail closed) with a 500: the Limiter and the key set
// disagree. A store failure is refused with a 503.
func (l *Limiter) Acquire(ctx context.Context, name string, inputTokens int) (Lease, error) {
	ls, err := l.Admit(ctx, name)
	if err != nil {
		return Lease{}, err
	}
	if err := ls.Reserve(ctx, inputTokens); err != nil {
		return Lease{}, err
	}
	return ls, nil
}

// Admit takes, for key name and then for the global scope, what does not depend on the size of
// the request: a concurrency slot and one request; and it refuses a key whose output tokens are
// spent (not one left, or in debt). Call it before counting the request's tokens, so
// that a refused caller costs no tokenizer work, then Reserve the count on the Lease. Errors are
// those of Acquire.
func (l *Limiter) Admit(ctx context.Context, name string) (Lease, error) {
	if l == nil {
		return Lease{}, nil
	}
	key, ok := l.keys[name]
	if !ok {
		return Lease{}, &apierr.Error{Kind: apierr.API, Message: "rate limiter has no entry for this API key",
			Cause: fmt.Errorf("limit: unknown key %q", name)}
	}
	now := l.now()
	scopes := [2]*scope{key, &l.global}
	var done [2]step
	if l.redis != nil && l.redis.batched() {
		if res, ok := l.redis.admit(ctx, now, scopes); ok {
			var err error
			for i, s := range scopes {
				switch res[i].refused {
				case stepNone:
					done[i] = stepReq // all taken (the scope's admission is all or nothing)
				case stepLost:
					// Nothing taken: this replica's concurrency count in Redis was lost. The
					// scope's cells one by one, the gauge writing its count first.
					if err == nil {
						var e error
						done[i], e = s.admit(ctx, now)
						err = e
					}
				case stepConc:
					err = cmp.Or(err, error(s.concRefused(res[i].n)))
				case stepReq:
					err = cmp.Or(err, error(s.rateRefused(&s.req, "requests", now, res[i].n)))
				default:
					err = cmp.Or(err, error(s.rateRefused(&s.out, "output tokens", now, res[i].n)))
				}
			}
			if err != nil {
				l.undo(ctx, now, scopes, done, [2]bool{}, 0)
				l.refused(ctx, key, now, err)
				return Lease{}, err
			}
			ls := Lease{l: l, key: key, held: true, wrote: now}
			for i, s := range scopes {
				if res[i].refused == stepLost {
					continue // its cells' state is read for the headers
				}
				if s.req.cell != nil {
					ls.seen[0+i], ls.known = res[i].req, ls.known|1<<(0+i)
				}
				if s.out.cell != nil {
					ls.seen[4+i], ls.known = res[i].out, ls.known|1<<(4+i)
				}
			}
			return ls, nil
		}
	}
	for i, s := range scopes {
		var err error
		done[i], err = s.admit(ctx, now)
		if err != nil {
			l.undo(ctx, now, scopes, done, [2]bool{}, 0)
			l.refused(ctx, key, now, err)
			return Lease{}, err
		}
	}
	return Lease{l: l, key: key, held: true}, nil
}

// Reserve takes an admitted request's estimated inputTokens, for its key and then for the global
// scope. If they do not fit, the whole admission is undone — the request refunded, the
// concurrency slots released — and the 429 says which limit refused it; the Lease is then spent
// (Release is a no-op). Call it once per Lease, after Admit.
func (ls *Lease) Reserve(ctx context.Context, inputTokens int) error {
	if ls.l == nil || !ls.held {
		return nil
	}
	l, now := ls.l, ls.l.now()
	input := max(int64(inputTokens), 0)
	scopes := [2]*scope{ls.key, &l.global}
	var took [2]bool
	err := l.reserve(ctx, now, ls, input, &took)
	if err != nil {
		l.undo(ctx, now, scopes, [2]step{stepReq, stepReq}, took, input)
		ls.held = false
		l.refused(ctx, ls.key, now, err)
		return err
	}
	ls.input = input
	return nil
}

// Fits refuses, before its input is counted, a request whose input is known to be at least
// atLeast tokens (a lower bound on the count, cheap to compute) when that many cannot fit: more
// than an input-token limit holds at all, or more than it has left now. Counting a large prompt
// costs far more CPU than this check, and a key must not be able to buy that CPU with requests
// its limit refuses anyway. A refusal undoes the admission as Reserve's does; otherwise nothing
// is taken (Reserve takes the exact count), and a store that cannot answer leaves the decision
// to Reserve.
func (ls *Lease) Fits(ctx context.Context, atLeast int) error {
	if ls.l == nil || !ls.held || atLeast <= 0 {
		return nil
	}
	l, now := ls.l, ls.l.now()
	input := int64(atLeast)
	scopes := [2]*scope{ls.key, &l.global}
	for _, s := range scopes {
		c := s.in.cell
		if c == nil {
			continue
		}
		var err error
		if input > s.in.rate.Limit {
			err = s.inRefused(input, -1)
		} else if st, perr := c.Peek(ctx, now, s.in.rate); perr == nil && st.Remaining < input {
			err = s.inRefused(input, time.Duration(interval(s.in.rate, input-st.Remaining)))
		}
		if err != nil {
			l.undo(ctx, now, scopes, [2]step{stepReq, stepReq}, [2]bool{}, input)
			ls.held = false
			l.refused(ctx, ls.key, now, err)
			return err
		}
	}
	return nil
}

// reserve takes input tokens in each scope that limits them, and notes in took the scopes it
// took them in: in one round trip when the store is Redis, else cell by cell, stopping at the
// first refusal.
func (l *Limiter) reserve(ctx context.Context, now time.Time, ls *Lease, input int64, took *[2]bool) error {
	scopes := [2]*scope{ls.key, &l.global}
	if l.redis != nil && l.redis.batched() && input > 0 {
		var ops [2]rateOp
		var at [2]int
		n := 0
		for i, s := range scopes {
			at[i] = -1
			if s.in.cell == nil {
				continue
			}
			if input > s.in.rate.Limit {
				return s.inRefused(input, -1) // never fits: nothing to ask the store
			}
			ops[n], at[i] = rateOp{slot: &s.in, take: true, cost: input}, n
			n++
		}
		if l.redis.rateOps(ctx, now, ops[:n]) {
			ls.saw(ops[:n])
			var err error
			for i, s := range scopes {
				if at[i] < 0 {
					continue
				}
				if o := &ops[at[i]]; o.ok {
					took[i] = true
				} else if err == nil {
					_, _, wait := gcraTake(o.tat, now.UnixNano(), s.in.rate, input)
					err = s.inRefused(input, wait)
				}
			}
			return err
		}
	}
	for i, s := range scopes {
		done, err := s.reserve(ctx, now, input)
		if err != nil {
			return err
		}
		took[i] = done == stepIn
	}
	return nil
}

// refused sets the rate-limit headers on a 429, OpenAI's tokens headers describing the token
// limit that refused it.
func (l *Limiter) refused(ctx context.Context, key *scope, now time.Time, err error) {
	if e, ok := err.(*apierr.Error); ok && e.Kind == apierr.RateLimit {
		l.header(ctx, key, now, e.Header, errors.Is(e.Cause, errOutputSpent))
	}
}

// step is how far admit or reserve got in one scope, so a refusal can undo exactly that.
type step uint8

const (
	stepNone step = iota
	stepConc
	stepReq
	stepIn
)

// admit runs one scope's steps that do not need the request's size, in order, and returns how
// far it got.
func (s *scope) admit(ctx context.Context, now time.Time) (step, error) {
	done := stepNone
	if g := s.conc.cell; g != nil {
		n, ok, err := g.Inc(ctx, s.conc.max)
		if err != nil {
			return done, storeError(err)
		}
		if !ok {
			return done, s.concRefused(n)
		}
		done = stepConc
	}
	if c := s.req.cell; c != nil {
		st, ok, err := c.Take(ctx, now, s.req.rate, 1)
		if err != nil {
			return done, storeError(err)
		}
		if !ok {
			return done, s.refuse(fmt.Sprintf("%d requests per minute", s.req.rate.Limit), "", st.RetryAfter)
		}
		done = stepReq
	}
	if c := s.out.cell; c != nil {
		st, err := c.Peek(ctx, now, s.out.rate)
		if err != nil {
			return done, storeError(err)
		}
		if st.Remaining < 1 {
			return done, s.outRefused(st.RetryAfter)
		}
	}
	return done, nil
}

// reserve takes one scope's input tokens and returns how far it got.
func (s *scope) reserve(ctx context.Context, now time.Time, input int64) (step, error) {
	c := s.in.cell
	if c == nil || input == 0 {
		return stepNone, nil
	}
	st, ok, err := c.Take(ctx, now, s.in.rate, input)
	if err != nil {
		return stepNone, storeError(err)
	}
	if !ok {
		return stepNone, s.inRefused(input, st.RetryAfter)
	}
	return stepIn, nil
}

// undo reverses what a refused request took: in each scope, the admission steps up to done[i]
// (the request, the concurrency slot) and the input tokens where in[i]. Errors are ignored: the
// request is being refused anyway, and a store that cannot refund leaves the limit stricter,
// never looser.
func (l *Limiter) undo(ctx context.Context, now time.Time, scopes [2]*scope, done [2]step, in [2]bool, input int64) {
	var ops [4]rateOp
	var gauges [2]Gauge
	n, ng := 0, 0
	for i, s := range scopes {
		if in[i] {
			ops[n] = rateOp{slot: &s.in, cost: -input}
			n++
		}
		if done[i] >= stepReq && s.req.cell != nil {
			ops[n] = rateOp{slot: &s.req, cost: -1}
			n++
		}
		if done[i] >= stepConc && s.conc.cell != nil {
			gauges[ng] = s.conc.cell
			ng++
		}
	}
	_ = l.add(ctx, now, ops[:n])
	_ = l.release(ctx, gauges[:ng])
}

// add runs each op unconditionally (a negative cost refunds): in one round trip when the store
// is Redis, else cell by cell. It returns the first store error.
func (l *Limiter) add(ctx context.Context, now time.Time, ops []rateOp) error {
	if len(ops) == 0 || l.redis != nil && l.redis.batched() && l.redis.rateOps(ctx, now, ops) {
		return nil
	}
	var first error
	for _, o := range ops {
		if _, err := o.slot.cell.Add(ctx, now, o.slot.rate, o.cost); err != nil && first == nil {
			first = fmt.Errorf("limit: store: %w", err)
		}
	}
	return first
}

// release gives back one slot of each gauge: in one round trip when the store is Redis, else
// gauge by gauge. It returns the first store error.
func (l *Limiter) release(ctx context.Context, gauges []Gauge) error {
	if len(gauges) == 0 || l.redis != nil && l.redis.batched() && l.redis.release(ctx, gauges) {
		return nil
	}
	var first error
	for _, g := range gauges {
		if err := g.Dec(ctx); err != nil && first == nil {
			first = fmt.Errorf("limit: store: %w", err)
		}
	}
	return first
}

// CountsInput reports whether Reserve takes input tokens: an input-token limit applies to the
// lease's key or globally. Without one the caller need not count the request (Reserve with any
// count is then a no-op).
func (ls *Lease) CountsInput() bool {
	return ls.l != nil && ls.held && (ls.key.in.cell != nil || ls.l.global.in.cell != nil)
}

// Settle replaces the input-token reservation with the engine's count (refunding or charging
// the difference) and brings the output tokens charged up, or down, to the engine's count. Call
// it once the engine reports usage; a request that never reached an engine settles with 0, 0.
func (ls *Lease) Settle(inputTokens, outputTokens int) error {
	if ls.l == nil {
		return nil
	}
	din, dout := int64(inputTokens)-ls.input, int64(outputTokens)-ls.output
	ls.input, ls.output = int64(inputTokens), int64(outputTokens)
	ls.owedIn, ls.owedOut = ls.owedIn+din, ls.owedOut+dout
	if ls.l.redis != nil && ls.held {
		return nil // written with the release, in the same round trip
	}
	return ls.flush()
}

// Charge charges n output tokens as they stream, unconditionally: a stream is never cut for
// crossing its limit (see the package comment).
func (ls *Lease) Charge(n int) error {
	if ls.l == nil || n <= 0 {
		return nil
	}
	ls.output += int64(n)
	ls.owedOut += int64(n)
	if ls.l.redis != nil && ls.held {
		if now := ls.l.now(); now.Sub(ls.wrote) < chargeEvery {
			return nil
		}
	}
	return ls.flush()
}

// owed returns the operations that write the lease's owed tokens to its key and the global
// scope, and forgets them.
func (ls *Lease) owed(ops *[4]rateOp) []rateOp {
	n := 0
	for _, s := range [2]*scope{ls.key, &ls.l.global} {
		if ls.owedIn != 0 && s.in.cell != nil {
			ops[n] = rateOp{slot: &s.in, cost: ls.owedIn}
			n++
		}
		if ls.owedOut != 0 && s.out.cell != nil {
			ops[n] = rateOp{slot: &s.out, cost: ls.owedOut}
			n++
		}
	}
	ls.owedIn, ls.owedOut = 0, 0
	return ops[:n]
}

// flush writes the owed tokens, in one round trip when the store is Redis.
func (ls *Lease) flush() error {
	var buf [4]rateOp
	ops := ls.owed(&buf)
	now := ls.l.now()
	ls.wrote = now
	err := ls.l.add(context.Background(), now, ops)
	ls.saw(ops)
	return err
}

// Release frees the request's concurrency slots. It is idempotent; call it when the response
// is complete or has failed.
func (ls *Lease) Release() error {
	if ls.l == nil || !ls.held {
		return nil
	}
	ls.held = false
	var gauges [2]Gauge
	n := 0
	for _, s := range [2]*scope{ls.key, &ls.l.global} {
		if g := s.conc.cell; g != nil {
			gauges[n] = g
			n++
		}
	}
	var buf [4]rateOp
	ops := ls.owed(&buf)
	ctx, now := context.Background(), ls.l.now()
	if ls.l.redis != nil && ls.l.redis.batched() {
		// The settlement and the release in one round trip.
		ran, released := ls.l.redis.settle(ctx, now, ops, gauges[:n])
		if ran {
			ls.saw(ops)
			ops = nil
		}
		if released {
			n = 0
		}
	}
	return cmp.Or(ls.l.add(ctx, now, ops), ls.l.release(ctx, gauges[:n]))
}
