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
	"context"
	"fmt"
	"net/http"
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
// lookups and allocates nothing.
func New(c Config) (*Limiter, error) {
	if c.Store == nil {
		c.Store = NewMemory()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if err := c.Global.validate("global"); err != nil {
		return nil, err
	}
	l := &Limiter{now: c.Now, keys: make(map[string]*scope, len(c.Keys)+1)}
	l.global = newScope(c.Store, "", true, c.Global)
	for name, lim := range c.Keys {
		if err := lim.validate(strconv.Quote(name)); err != nil {
			return nil, err
		}
		s := newScope(c.Store, name, false, lim)
		l.keys[name] = &s
	}
	if _, ok := l.keys[""]; !ok {
		s := newScope(c.Store, "", false, Limits{})
		l.keys[""] = &s
	}
	return l, nil
}

func (lim Limits) validate(where string) error {
	if lim.RequestsPerMinute < 0 || lim.InputTokensPerMinute < 0 || lim.OutputTokensPerMinute < 0 || lim.Concurrent < 0 {
		return fmt.Errorf("limit: %s: limits must not be negative", where)
	}
	return nil
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
}

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
	for i, s := range scopes {
		var err error
		done[i], err = s.admit(ctx, now)
		if err != nil {
			for j := i; j >= 0; j-- {
				scopes[j].undo(ctx, now, done[j], 0)
			}
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
	var done [2]step
	for i, s := range scopes {
		var err error
		done[i], err = s.reserve(ctx, now, input)
		if err != nil {
			for j := range scopes {
				if j <= i {
					scopes[j].undo(ctx, now, done[j], input)
				}
				scopes[j].undo(ctx, now, stepReq, 0)
			}
			ls.held = false
			l.refused(ctx, ls.key, now, err)
			return err
		}
	}
	ls.input = input
	return nil
}

// refused sets the rate-limit headers on a 429.
func (l *Limiter) refused(ctx context.Context, key *scope, now time.Time, err error) {
	if e, ok := err.(*apierr.Error); ok && e.Kind == apierr.RateLimit {
		l.header(ctx, key, now, e.Header)
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
			return done, s.refuse(fmt.Sprintf("%d concurrent requests", s.conc.max),
				fmt.Sprintf("%d requests are in flight", n), time.Second)
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
			return done, s.refuse(fmt.Sprintf("%d output tokens per minute", s.out.rate.Limit), "", st.RetryAfter)
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
		what := fmt.Sprintf("%d input tokens per minute", s.in.rate.Limit)
		if st.RetryAfter < 0 {
			return stepNone, s.tooBig(input, what)
		}
		return stepNone, s.refuse(what, fmt.Sprintf("this request needs about %d", input), st.RetryAfter)
	}
	return stepIn, nil
}

// undo reverses the steps admit and reserve completed. Errors are ignored: the request is being
// refused anyway, and a store that cannot refund leaves the limit stricter, never looser.
func (s *scope) undo(ctx context.Context, now time.Time, done step, input int64) {
	if done >= stepIn {
		_, _ = s.in.cell.Add(ctx, now, s.in.rate, -input)
		return // reserve's step: admit's steps are undone by their own call
	}
	if done >= stepReq && s.req.cell != nil {
		_, _ = s.req.cell.Add(ctx, now, s.req.rate, -1)
	}
	if done >= stepConc && s.conc.cell != nil {
		_ = s.conc.cell.Dec(ctx)
	}
}

// whose names the scope in a client message.
func (s *scope) whose() string {
	if s.global {
		return "the server's limit (shared by all keys)"
	}
	return "this API key's limit"
}

func (s *scope) refuse(limit, detail string, retry time.Duration) *apierr.Error {
	retry = max(retry, time.Millisecond)
	msg := "rate limit exceeded: " + s.whose() + " of " + limit + " is reached"
	if detail != "" {
		msg += " (" + detail + ")"
	}
	msg += "; retry after " + roundUp(retry).String()
	counts := apierr.LimitRequests // the limit's own words say what it counts
	const tpm = "tokens per minute"
	if len(limit) >= len(tpm) && limit[len(limit)-len(tpm):] == tpm {
		counts = apierr.LimitTokens
	}
	return &apierr.Error{Kind: apierr.RateLimit, Message: msg, Code: "RATE_LIMITED", RetryAfter: retry,
		Limit: counts, Header: http.Header{}}
}

// tooBig refuses a request that can never fit: retrying will not help, and x-should-retry says so
// to the official SDKs.
func (s *scope) tooBig(input int64, limit string) *apierr.Error {
	msg := fmt.Sprintf("rate limit exceeded: this request has about %d input tokens, more than %s of %s",
		input, s.whose(), limit)
	return &apierr.Error{Kind: apierr.RateLimit, Message: msg, Code: "RATE_LIMITED", Limit: apierr.LimitTokens,
		Header: http.Header{"X-Should-Retry": {"false"}}}
}

// storeError answers a request the store could not count: 503, to be retried after a second
// (a shared store that is down is probed every 100ms and used again as soon as it answers).
func storeError(err error) *apierr.Error {
	return &apierr.Error{Kind: apierr.Unavailable, Message: "rate limiter unavailable", RetryAfter: time.Second,
		Cause: fmt.Errorf("limit: store: %w", err)}
}

// roundUp rounds a wait up to a whole second when it is longer than one, up to a millisecond
// otherwise: a client told to wait must not come back early.
func roundUp(d time.Duration) time.Duration {
	unit := time.Millisecond
	if d > time.Second {
		unit = time.Second
	}
	if r := d % unit; r != 0 {
		d += unit - r
	}
	return d
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
	ctx, now := context.Background(), ls.l.now()
	var first error
	if d := int64(inputTokens) - ls.input; d != 0 {
		ls.input += d
		first = ls.add(ctx, now, func(s *scope) *rateSlot { return &s.in }, d)
	}
	if d := int64(outputTokens) - ls.output; d != 0 {
		ls.output += d
		if err := ls.add(ctx, now, func(s *scope) *rateSlot { return &s.out }, d); first == nil {
			first = err
		}
	}
	return first
}

// Charge charges n output tokens as they stream, unconditionally: a stream is never cut for
// crossing its limit (see the package comment).
func (ls *Lease) Charge(n int) error {
	if ls.l == nil || n <= 0 {
		return nil
	}
	ls.output += int64(n)
	return ls.add(context.Background(), ls.l.now(), func(s *scope) *rateSlot { return &s.out }, int64(n))
}

func (ls *Lease) add(ctx context.Context, now time.Time, dim func(*scope) *rateSlot, n int64) error {
	var first error
	for _, s := range [2]*scope{ls.key, &ls.l.global} {
		if r := dim(s); r.cell != nil {
			if _, err := r.cell.Add(ctx, now, r.rate, n); err != nil && first == nil {
				first = fmt.Errorf("limit: store: %w", err)
			}
		}
	}
	return first
}

// Release frees the request's concurrency slots. It is idempotent; call it when the response
// is complete or has failed.
func (ls *Lease) Release() error {
	if ls.l == nil || !ls.held {
		return nil
	}
	ls.held = false
	ctx := context.Background()
	var first error
	for _, s := range [2]*scope{ls.key, &ls.l.global} {
		if g := s.conc.cell; g != nil {
			if err := g.Dec(ctx); err != nil && first == nil {
				first = fmt.Errorf("limit: store: %w", err)
			}
		}
	}
	return first
}

// Header sets the rate-limit headers for the lease's key on h (see Limiter.Header).
func (ls *Lease) Header(h http.Header) {
	if ls.l == nil {
		return
	}
	ls.l.header(context.Background(), ls.key, ls.l.now(), h)
}
