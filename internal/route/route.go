// Package route decides where a request goes. A Table resolves the model a client asks for
// (aliases, weighted A/B splits, optionally sticky per key) to a model whose pool of replicas
// serves it, and a Plan walks that model's fallback chain: a replica picked by a Picker (least
// outstanding by the power of two choices, or round-robin), skipping replicas that are down,
// ejected, breaker-open or above the utilisation threshold while another can serve, retrying
// another replica within a retry budget, then falling back model by model, each move labelled
// with a reason. State lives in the Replicas, shared by every Table built over them.
package route

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/prefix"
)

// maxChain bounds a fallback chain, so a Plan tracks it in one word; internal/config refuses a
// longer one.
const maxChain = config.MaxFallbackChain

// Model is a model clients may ask for and the pool of replicas that serves it.
type Model struct {
	// Name is the model id clients send. Required, unique among models, splits and aliases.
	Name string
	// Upstream is the model name sent to the engine. Default: Name.
	Upstream string
	// ContextWindow is the largest input, in tokens, the model takes; 0 means unknown (no
	// check). Default 0.
	ContextWindow int
	// Replicas serve the model, all interchangeable. At least one is required.
	Replicas []*Replica
	// Fallbacks are models tried in order when this one cannot serve. The chain is transitive
	// (a fallback's fallbacks follow it) and each model appears in it once.
	Fallbacks []string
	// Picker chooses among this model's available replicas. Default: the table's
	// (Config.Picker).
	Picker Picker
}

// Target is one arm of a Split.
type Target struct {
	// Model is the model this arm routes to.
	Model string
	// Weight is the arm's share, relative to the other arms' weights. Must be positive.
	Weight int
}

// Split routes a name to several models by weight (A/B tests, gradual rollouts of a version).
type Split struct {
	// Name is the id clients send. Required, unique among models, splits and aliases.
	Name string
	// Targets are the arms; at least one.
	Targets []Target
	// Sticky sends every request of one API key to the same arm (by a hash of the key name),
	// so one caller sees one version. Default false: each request is drawn at random.
	Sticky bool
}

// Config describes a routing table. New checks what makes the table well-formed — every name
// non-empty and used once, no nil replica, a fallback chain short enough for a Plan — and
// trusts the rest, which config.Validate checks once, for every configuration the gateway
// builds: every model has a replica and a context window of 0 or more; every fallback names
// another model; every split has targets, each a model with a positive weight; every alias
// names a model or a split. A Config that breaks these builds a table that misroutes or
// panics.
type Config struct {
	// Models are the served models.
	Models []Model
	// Splits are the weighted names.
	Splits []Split
	// Aliases map another name to a model or a split.
	Aliases map[string]string
	// Picker chooses among the available replicas of a model that has no Picker of its own.
	// Default P2C{}.
	Picker Picker
	// UtilizationThreshold is the utilisation (0 to 1) above which a replica is skipped while
	// another replica — in the model's pool or down its fallback chain — can serve; a value of 1
	// or more never skips. Taken as given: internal/config fills in its default.
	UtilizationThreshold float64
	// Budget bounds retries on each model, as NewBudget takes it.
	Budget BudgetConfig
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Rand returns a uniform int in [0, n), for non-sticky splits. Default math/rand/v2.IntN.
	Rand func(n int) int
	// RecheckAfter is the retry-after of a 503 for no replica when no ejection or breaker
	// says when one will be back (every replica marked down): when the health checks look
	// again (routing.health.interval, filled in by internal/config).
	RecheckAfter time.Duration
}

// Table is an immutable routing table, safe for concurrent use.
type Table struct {
	byName    map[string]*entry
	byFolded  map[string]*entry
	names     []string
	models    []*model
	replicas  []*Replica
	picker    Picker
	threshold float64
	recheck   time.Duration
	now       func() time.Time
	rand      func(int) int
}

// entry is what a name resolves to: a model or a split.
type entry struct {
	name  string
	model *model
	split *split
}

type model struct {
	name      string
	upstream  string
	window    int
	replicas  []*Replica
	fallbacks []string
	chain     []*model // this model, then its fallbacks, transitively, each once
	budget    *Budget
	picker    Picker
}

type split struct {
	targets []*model
	cum     []int // cumulative weights
	total   int
	sticky  bool
	name    string
}

// New builds the table, checking what Config says it checks. Its error lists every problem
// found.
func New(c Config) (*Table, error) {
	t := &Table{
		byName:    map[string]*entry{},
		picker:    c.Picker,
		threshold: c.UtilizationThreshold,
		now:       c.Now,
		rand:      c.Rand,
		recheck:   c.RecheckAfter,
	}
	if t.picker == nil {
		t.picker = P2C{}
	}
	if t.now == nil {
		t.now = time.Now
	}
	if t.rand == nil {
		t.rand = rand.IntN
	}
	b := &builder{t: t}
	b.models(&c)
	byModel := map[string]*model{}
	for _, m := range t.models {
		byModel[m.name] = m
	}
	b.splits(c.Splits, byModel)
	b.aliases(c.Aliases)
	if len(b.errs) > 0 {
		return nil, errors.Join(b.errs...)
	}
	for _, m := range t.models {
		m.chain = chainOf(m, byModel)
	}
	sort.Strings(t.names)
	t.foldNames()
	return t, nil
}

// builder fills a Table's models, splits and aliases in New, collecting every problem.
type builder struct {
	t    *Table
	errs []error
}

// bad records a problem.
func (b *builder) bad(format string, args ...any) {
	b.errs = append(b.errs, fmt.Errorf("route: "+format, args...))
}

// claim gives name, of a model, split or alias (kind), to e; a name empty or already used is a
// problem.
func (b *builder) claim(kind, name string, e *entry) {
	if name == "" {
		b.bad("%s with an empty name", kind)
		return
	}
	if _, dup := b.t.byName[name]; dup {
		b.bad("%s %q: the name is already used", kind, name)
		return
	}
	b.t.byName[name] = e
	b.t.names = append(b.t.names, name)
}

// models adds the configured models, and their replicas to the table's, each replica once.
func (b *builder) models(c *Config) {
	t := b.t
	seen := map[*Replica]bool{}
	for _, mc := range c.Models {
		m := &model{name: mc.Name, upstream: mc.Upstream, window: mc.ContextWindow,
			replicas: append([]*Replica(nil), mc.Replicas...), fallbacks: mc.Fallbacks,
			budget: NewBudget(c.Budget, t.now), picker: mc.Picker}
		if m.picker == nil {
			m.picker = t.picker
		}
		if m.upstream == "" {
			m.upstream = m.name
		}
		for i, r := range m.replicas {
			if r == nil {
				b.bad("model %q: replica %d is nil", m.name, i)
				continue
			}
			if !seen[r] {
				seen[r] = true
				t.replicas = append(t.replicas, r)
			}
		}
		t.models = append(t.models, m)
		b.claim("model", m.name, &entry{name: m.name, model: m})
	}
}

// splits adds the weighted names, their targets found in byModel.
func (b *builder) splits(splits []Split, byModel map[string]*model) {
	for _, sc := range splits {
		s := &split{sticky: sc.Sticky, name: sc.Name}
		for _, tg := range sc.Targets {
			s.total += tg.Weight
			s.targets = append(s.targets, byModel[tg.Model])
			s.cum = append(s.cum, s.total)
		}
		b.claim("split", sc.Name, &entry{name: sc.Name, split: s})
	}
}

// aliases adds each alias, in the order of their names, as another name of the model or split
// it names (not of another alias).
func (b *builder) aliases(aliases map[string]string) {
	names := make([]string, 0, len(aliases))
	for a := range aliases {
		names = append(names, a)
	}
	sort.Strings(names)
	targets := map[string]*entry{}
	for name, e := range b.t.byName {
		targets[name] = e
	}
	for _, a := range names {
		e := targets[aliases[a]]
		b.claim("alias", a, &entry{name: a, model: e.model, split: e.split})
	}
}

// foldNames indexes the table's names folded: clients that drop '-' and '.' (the binary
// protocol's) still match; names that fold alike match only exactly.
func (t *Table) foldNames() {
	t.byFolded = map[string]*entry{}
	ambiguous := map[string]bool{}
	for _, name := range t.names {
		f := string(fold(nil, name))
		if _, dup := t.byFolded[f]; dup {
			ambiguous[f] = true
		}
		t.byFolded[f] = t.byName[name]
	}
	for f := range ambiguous {
		delete(t.byFolded, f)
	}
}

// chainOf lists m then its fallbacks depth-first, each model once.
func chainOf(m *model, byModel map[string]*model) []*model {
	var chain []*model
	in := map[*model]bool{}
	var walk func(*model)
	walk = func(m *model) {
		if in[m] {
			return
		}
		in[m] = true
		chain = append(chain, m)
		for _, f := range m.fallbacks {
			walk(byModel[f])
		}
	}
	walk(m)
	return chain
}

// fold appends s with '-' and '.' removed and ASCII lowercased.
func fold(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '-' || c == '.':
			continue
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// lookup finds name exactly, then folded.
func (t *Table) lookup(name string) *entry {
	if e, ok := t.byName[name]; ok {
		return e
	}
	var buf [128]byte
	if len(name) > len(buf) {
		return nil
	}
	return t.byFolded[string(fold(buf[:0], name))]
}

// Names returns every name clients may ask for (models, splits, aliases), sorted. The slice must
// not be modified.
func (t *Table) Names() []string { return t.names }

// Resolve returns the canonical spelling of a name clients may ask for, and whether it exists.
func (t *Table) Resolve(name string) (string, bool) {
	if e := t.lookup(name); e != nil {
		return e.name, true
	}
	return "", false
}

// Replicas returns every replica of the table, each once, in model order.
func (t *Table) Replicas() []*Replica { return t.replicas }

// Check runs every replica's active health check once, concurrently, and returns their errors
// joined. The server calls it on a ticker.
func (t *Table) Check(ctx context.Context) error {
	errs := make([]error, len(t.replicas))
	var wg sync.WaitGroup
	for i, r := range t.replicas {
		wg.Add(1)
		go checkReplica(ctx, r, &errs[i], &wg)
	}
	wg.Wait()
	return errors.Join(errs...)
}

func checkReplica(ctx context.Context, r *Replica, err *error, wg *sync.WaitGroup) {
	defer wg.Done()
	*err = r.Check(ctx)
}

// choose draws a split's arm: by a hash of the key name when sticky, at random otherwise.
func (s *split) choose(key string, rnd func(int) int) *model {
	var n int
	if s.sticky {
		n = int(stickyHash(key, s.name) % uint64(s.total))
	} else {
		n = rnd(s.total)
	}
	for i, c := range s.cum {
		if n < c {
			return s.targets[i]
		}
	}
	return s.targets[len(s.targets)-1]
}

// stickyHash is FNV-1a over key, a separator and the split's name: stable across processes and
// restarts, so every layer0 replica sends a key to the same arm, and independent between splits.
func stickyHash(key, name string) uint64 { return fnvAdd(stickyKey(key), name) }

// FNV-1a's parameters.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// stickyKey is stickyHash's state after key and the separator: a key hashed once serves every
// name it is paired with.
func stickyKey(key string) uint64 {
	return (fnvAdd(fnvOffset, key) ^ 0xff) * fnvPrime
}

// fnvAdd continues the FNV-1a hash h over s.
func fnvAdd(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
	}
	return h
}

// Plan starts routing one request for model name, from the API key named key, with an input of
// inputTokens. It resolves aliases and splits and drops from the fallback chain the models whose
// context window the input exceeds. It returns a 404 for an unknown name and a 400 when no model
// of the chain can fit the input.
func (t *Table) Plan(name, key string, inputTokens int) (*Plan, error) {
	e := t.lookup(name)
	if e == nil {
		return nil, &apierr.Error{Kind: apierr.NotFound, Param: "model", Code: "model_not_found",
			Message: "model: " + quote(name) + " not found"}
	}
	m := e.model
	if e.split != nil {
		m = e.split.choose(key, t.rand)
	}
	p := &Plan{t: t, name: e.name, chain: m.chain, cur: -1, key: key, input: inputTokens}
	p.tried = p.triedBuf[:0]
	p.cands = p.candBuf[:0]
	largest := 0
	for i, cm := range p.chain {
		if cm.window > 0 && inputTokens > cm.window {
			p.skip |= 1 << i
			largest = max(largest, cm.window)
		}
	}
	if p.skip == 1<<len(p.chain)-1 {
		return nil, &apierr.Error{Kind: apierr.InvalidRequest, Param: "messages", Code: "context_length_exceeded",
			Message: "prompt is too long: " + strconv.Itoa(inputTokens) + " tokens > " + strconv.Itoa(largest) + " maximum"}
	}
	return p, nil
}

func quote(s string) string {
	if len(s) > 128 {
		s = s[:128] + "…"
	}
	return strconv.Quote(s)
}

// Plan is the routing of one request: call Next for a replica, run the engine, Report the
// outcome, and call Next again only if the attempt failed before any byte reached the client —
// which includes an error arriving inside a 200 stream before any content was sent.
// Next then decides between another replica of the same model (within the model's retry budget),
// the next model of the fallback chain, or giving up with the last error. A Plan belongs to one
// request and is not safe for concurrent use.
type Plan struct {
	t        *Table
	name     string
	chain    []*model
	skip     uint64 // chain positions out of the running
	cur      int    // chain position of the last attempt, -1 before the first
	last     *Replica
	lastErr  error
	started  bool
	inFlight bool
	tried    []*Replica
	cands    []*Replica
	triedBuf [4]*Replica
	candBuf  [8]*Replica
	prompt   *prefix.Prompt // the request's prompt, for a PromptPicker
	decision *Decision      // where the PromptPicker's or SessionPicker's decision goes
	header   http.Header    // the request's headers, for a SessionPicker
	own      string         // the tenant whose own cached blocks a prompt pick also counts (SetOwn)
	owned    bool           // SetOwn was called
	key      string         // the API key's name
	req      *llm.Request   // the canonical request, for an App picker
	input    int            // the input tokens counted
	app      *appPick       // what an App picker is given, reused between picks
}

// Attempt is one try of a request on one replica.
type Attempt struct {
	// Replica serves the attempt; its Engine is the one to call.
	Replica *Replica
	// Model is the model this attempt serves (the primary, or a fallback).
	Model string
	// Upstream is the model name to send to the engine.
	Upstream string
	// Retry is true when the attempt is another replica of the same model after a failure.
	Retry bool
	// Fallback, when not empty, is the reason the request moved down its fallback chain to
	// Model (one of the Reason constants); count it in layer0_fallback_total{reason}.
	Fallback string
	// Left, when the request's first attempt did not land on its primary model (Fallback
	// unavailable or utilization), is a replica of the model it left and why it was out: the
	// first one down, ejected, breaker-open or above the utilisation threshold.
	Left Skip
}

// Name is the canonical spelling of the name the client asked for (a model, split or alias).
func (p *Plan) Name() string { return p.name }

// Model is the primary model the name resolved to (a split's drawn arm).
func (p *Plan) Model() string { return p.chain[0].name }

// Next returns the next attempt, counted outstanding on its replica until Report. When there is
// none it returns the last attempt's error if there was one (the engine's answer is the most
// useful thing to tell the client), or a 503 if no replica could be tried at all; a
// non-retryable last error (see Classify) is returned at once.
func (p *Plan) Next() (Attempt, error) {
	if p.inFlight {
		return Attempt{}, apierr.Wrap(apierr.API, errors.New("route: Next before Report"), "internal error")
	}
	from, retryAt, why := 0, -1, ""
	if p.started {
		if p.lastErr == nil {
			return Attempt{}, apierr.Wrap(apierr.API, errors.New("route: Next after a success"), "internal error")
		}
		reason, retryable := Classify(p.lastErr)
		if !retryable {
			return Attempt{}, p.lastErr
		}
		from, retryAt, why = p.cur, p.cur, reason
		if reason == ReasonContextLength {
			// The engine counted more than we did: the same model, and any no larger, cannot fit.
			from, retryAt = p.cur+1, -1
			if w := p.chain[p.cur].window; w > 0 {
				for j := p.cur + 1; j < len(p.chain); j++ {
					if cw := p.chain[j].window; cw > 0 && cw <= w {
						p.skip |= 1 << j
					}
				}
			}
		}
	}
	p.started = true
	now := p.t.now()
	if a, ok := p.walk(now, from, retryAt, why); ok {
		return a, nil
	}
	if p.lastErr != nil {
		return Attempt{}, p.lastErr
	}
	return Attempt{}, p.unavailable(now)
}

// walk finds the next replica from chain position from: first among replicas at or below the
// utilisation threshold anywhere down the chain, then among any that can serve. Position retryAt
// (if not -1) is the model that just failed; trying it again needs the retry budget.
func (p *Plan) walk(now time.Time, from, retryAt int, why string) (Attempt, bool) {
	budget := 0 // 0: not asked, 1: granted, -1: refused
	for pass := range 2 {
		strict := pass == 0
		for i := from; i < len(p.chain); i++ {
			if p.skip&(1<<i) != 0 {
				continue
			}
			m := p.chain[i]
			for {
				cands := p.candidates(m, now, strict)
				if len(cands) == 0 {
					break
				}
				if i == retryAt {
					if budget == 0 {
						budget = -1
						if m.budget.retry(now) {
							budget = 1
						}
					}
					if budget < 0 {
						break
					}
				}
				r := cands[p.pick(m, cands, now)]
				p.tried = append(p.tried, r)
				if !r.Begin() {
					continue // a half-open breaker's probe slots filled meanwhile
				}
				a := Attempt{Replica: r, Model: m.name, Upstream: m.upstream, Retry: i == retryAt}
				if !a.Retry {
					m.budget.request(now)
					if i > from || (p.cur >= 0 && i != p.cur) {
						a.Fallback = why
						if a.Fallback == "" {
							a.Fallback = p.leaveReason(now, from, strict)
							a.Left = p.left(now, from)
						}
					}
				}
				p.cur, p.last, p.inFlight = i, r, true
				return a, true
			}
		}
	}
	return Attempt{}, false
}

// leaveReason says why a first attempt did not land on chain position from.
func (p *Plan) leaveReason(now time.Time, from int, strict bool) string {
	switch {
	case p.skip&(1<<from) != 0:
		return ReasonContextLength
	case strict && len(p.candidates(p.chain[from], now, false)) > 0:
		return ReasonUtilization
	}
	return ReasonUnavailable
}

// left is the first replica of chain position from that could not take the request, and why;
// the zero Skip when the model was left for its context window.
func (p *Plan) left(now time.Time, from int) Skip {
	if p.skip&(1<<from) != 0 {
		return Skip{}
	}
	for _, r := range p.chain[from].replicas {
		if why := r.unavailableReason(now); why != "" {
			return Skip{Replica: r.Name, Reason: why}
		}
		if r.Utilization() > p.t.threshold {
			return Skip{Replica: r.Name, Reason: SkipUtilization}
		}
	}
	return Skip{}
}

// candidates lists m's replicas not yet tried and able to serve now, and in the strict pass only
// those below their limit (SetLimit) and at or below the utilisation threshold — or, for a picker that weighs load itself
// (LoadWeigher), all of them as long as one is at or below it. The slice is reused between calls.
func (p *Plan) candidates(m *model, now time.Time, strict bool) []*Replica {
	p.cands = p.cands[:0]
	_, weighs := m.picker.(LoadWeigher)
	below := false
next:
	for _, r := range m.replicas {
		for _, t := range p.tried {
			if t == r {
				continue next
			}
		}
		if !r.available(now) || strict && r.full() {
			continue
		}
		if over := r.Utilization() > p.t.threshold; strict && over && !weighs {
			continue
		} else if !over {
			below = true
		}
		p.cands = append(p.cands, r)
	}
	if strict && weighs && !below {
		p.cands = p.cands[:0] // every replica is busy: a fallback model below the threshold first
	}
	return p.cands
}

// unavailable is the 503 for a request no replica could take, with a retry-after when an
// ejection or open breaker will end.
func (p *Plan) unavailable(now time.Time) *apierr.Error {
	var soonest time.Time
	for i, m := range p.chain {
		if p.skip&(1<<i) != 0 {
			continue
		}
		for _, r := range m.replicas {
			if g := r.gate(now); !g.IsZero() && (soonest.IsZero() || g.Before(soonest)) {
				soonest = g
			}
		}
	}
	e := &apierr.Error{Kind: apierr.Unavailable, Code: "NO_REPLICA",
		Message:    "no replica of model " + quote(p.chain[0].name) + " or its fallbacks can take the request now",
		RetryAfter: p.t.recheck}
	if !soonest.IsZero() {
		e.RetryAfter = max(soonest.Sub(now), time.Millisecond)
	}
	return e
}

// Report records the outcome of the attempt Next returned: err (nil for success) and how long
// it took. It feeds the replica's ejection and breaker and frees its outstanding count. Call it
// exactly once per attempt, whether or not another attempt follows. It returns what the report
// did to the replica's health.
func (p *Plan) Report(err error, latency time.Duration) Verdict {
	if !p.inFlight {
		return Verdict{}
	}
	p.inFlight = false
	p.lastErr = err
	return p.last.Report(err, latency)
}
