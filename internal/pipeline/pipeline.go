// Package pipeline is the one place the order of the request path lives. A Pipeline is built
// from one configuration and never mutated; reload builds a new one and swaps it in. Serve runs
// the stages top to bottom — auth, size limits, model permission, rate limits, directives, the
// response cache (cache.go), token limits, context planning, route plan, then engine attempts
// with retries and fallbacks until one succeeds or content has reached the client — and fills
// one Record per request from which metrics and the access log are written once.
//
// An attempt's events pass through a sink that holds the stream's prelude (message start, block
// starts) until the first content delta: until then nothing of the attempt has reached the
// client, so a failure can still go to another replica or fallback model and the client sees
// one clean stream, or one clean HTTP error. A non-streamed answer is collected whole before
// anything is written, so for it every failure is still retryable.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/layer0ai/layer0/internal/admission"
	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/cache"
	"github.com/layer0ai/layer0/internal/engine"
	"github.com/layer0ai/layer0/internal/engine/passthrough"
	"github.com/layer0ai/layer0/internal/limit"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/money"
	"github.com/layer0ai/layer0/internal/prefix"
	"github.com/layer0ai/layer0/internal/route"
	"go.opentelemetry.io/otel/trace"
)

// Model is a name clients may ask for — a model, an alias or a split — as the models list shows
// it.
type Model struct {
	ID          string
	DisplayName string
	Created     time.Time
	// Tokens counts the input in the model's tokenizer (its engine's, when the engine can);
	// nil means the pipeline's Counter.
	Tokens engine.Counter
	// Context is what happens to an input no context window of the model holds.
	Context ContextPolicy
	// ShareAcrossKeys lets CacheLookup count every key's prompts for the name, not only the
	// asking key's own. The response cache's own sharing is its Policy's.
	ShareAcrossKeys bool
}

// Counter counts a request's input tokens when its engine cannot.
type Counter interface {
	CountRequest(r *llm.Request) int
}

// Bounder is a Counter that can bound a count without tokenizing (tokenizer.Codec): admission
// refuses a prompt whose lower bound does not fit an input-token limit before counting it, so a
// key cannot spend the tokenizer's CPU on prompts its limit refuses anyway. Every count layer0
// makes today is in that codec (the sim engine's included); an engine counting in another
// tokenizer would need its own bound.
type Bounder interface {
	RequestBounds(r *llm.Request) (lo, hi int)
}

// Engine is what the pipeline knows of a replica's engine beyond the engine itself.
type Engine struct {
	// URL is the engine's base URL, where /v1/layer/negotiate sends legacy clients; "" for an
	// engine embedded in this process.
	URL string
	// FirstByte, when positive, is how long an attempt may wait for its first content before
	// the pipeline gives up on it (timeout, so the request can fall back). Engines behind a
	// URL enforce their own timeouts and leave it 0; the embedded sim relies on it.
	FirstByte time.Duration
	// Prefix is the replica's entry in the prefix index, which learns the prompts it served;
	// nil when it is not indexed.
	Prefix *prefix.Replica
}

// Config is what a Pipeline is built from.
type Config struct {
	// Keys are the API keys. Nil or empty serves every caller as the anonymous key; the caller
	// of New enforces that this happens only on loopback (auth.Keys.CheckListen).
	Keys *auth.Keys
	// Limits enforces rate limits; nil limits nothing.
	Limits *limit.Limiter
	// Sizes bounds the body (checked by the server as it reads it), headers, message count and
	// content length.
	Sizes limit.Sizes
	// Routes resolves names and plans attempts. Required.
	Routes *route.Table
	// Models describe every name Routes knows, for the models list. A name Routes knows but
	// Models lacks is listed with its name as display name.
	Models []*Model
	// Engines describe replicas beyond their engine. Missing entries are the zero Engine.
	Engines map[*route.Replica]Engine
	// Tokens counts input tokens for models whose engine cannot. Nil counts 0.
	Tokens Counter
	// Cache is the response cache of the models that cache; nil caches nothing.
	Cache *cache.Cache
	// Offload maps the offload targets clients may name (directive or header) to the model,
	// alias or split each stands for.
	Offload map[string]string
	// Prefix is the prefix index: which replicas may hold which prompts. Nil indexes nothing.
	Prefix *prefix.Index
	// Admission queues requests for saturated pools (admit.go); nil admits every request at
	// once.
	Admission *admission.Gate
	// Spend prices requests and holds them to budgets (spend.go); nil prices nothing.
	Spend Spender
}

// Pipeline is one immutable configuration of the request path. Build it with New.
type Pipeline struct {
	keys    *auth.Keys
	limits  *limit.Limiter
	sizes   limit.Sizes
	routes  *route.Table
	models  []*Model          // every name, sorted by ID
	byID    map[string]*Model // by canonical name
	engines map[*route.Replica]Engine
	tokens  Counter
	cache   *cache.Cache
	offload map[string]string
	prefix  *prefix.Index
	admit   *admission.Gate
	spend   Spender
}

// New builds a pipeline from c.
func New(c Config) (*Pipeline, error) {
	if c.Routes == nil {
		return nil, errors.New("pipeline: no routing table")
	}
	p := &Pipeline{keys: c.Keys, limits: c.Limits, sizes: c.Sizes, routes: c.Routes, engines: c.Engines,
		tokens: c.Tokens, cache: c.Cache, offload: c.Offload, prefix: c.Prefix, admit: c.Admission, byID: map[string]*Model{}}
	if c.Spend != nil && !isNil(c.Spend) {
		p.spend = c.Spend
	}
	for _, m := range c.Models {
		if _, ok := c.Routes.Resolve(m.ID); !ok {
			return nil, errors.New("pipeline: model " + strconv.Quote(m.ID) + " is not in the routing table")
		}
		p.byID[m.ID] = m
	}
	for _, name := range c.Routes.Names() {
		if _, ok := p.byID[name]; !ok {
			p.byID[name] = &Model{ID: name, DisplayName: name}
		}
	}
	for _, m := range p.byID {
		p.models = append(p.models, m)
	}
	sort.Slice(p.models, func(i, j int) bool { return p.models[i].ID < p.models[j].ID })
	return p, nil
}

// Models returns every name clients may ask for, in id order. The slice must not be modified.
func (p *Pipeline) Models() []*Model { return p.models }

// Model finds a name clients may ask for, exactly or ignoring '-', '.' and case.
func (p *Pipeline) Model(id string) (*Model, error) {
	name, ok := p.routes.Resolve(id)
	if !ok {
		return nil, notFound(id)
	}
	return p.byID[name], nil
}

func notFound(id string) *apierr.Error {
	return &apierr.Error{Kind: apierr.NotFound, Param: "model", Code: "model_not_found",
		Message: "model: " + quote(id) + " not found"}
}

func quote(s string) string {
	if len(s) > 128 {
		s = s[:128] + "…"
	}
	return strconv.Quote(s)
}

// Routes is the routing table, for the replicas' state (metrics, health checks).
func (p *Pipeline) Routes() *route.Table { return p.routes }

// Limits is the rate limiter (nil when nothing is limited), for the next pipeline to adopt its
// state on reload.
func (p *Pipeline) Limits() *limit.Limiter { return p.limits }

// Cache is the response cache (nil when no model caches), for the next pipeline to adopt its
// stores on reload.
func (p *Pipeline) Cache() *cache.Cache { return p.cache }

// Sizes are the request size limits, the body's among them (the server checks it as it reads).
func (p *Pipeline) Sizes() *limit.Sizes { return &p.sizes }

// Call is one request going through the pipeline.
type Call struct {
	// Request is the decoded request. Serve does not modify it.
	Request *llm.Request
	// Sink receives the response events. A *llm.Collector is recognised: nothing reaches the
	// client until Serve returns, so Serve resets it and retries after any failure.
	Sink llm.Sink
	// Header holds the request's HTTP headers, from which Serve authenticates the caller when
	// Key is nil.
	Header http.Header
	// Key is the caller, when the server authenticated it already (Admit), or Anonymous for an
	// in-process call.
	Key *auth.Key
	// Forward, when set, offers the pass-through path (see Forward).
	Forward *Forward
	// Record is filled in by the stages; the server writes metrics and the log from it.
	Record Record
	// Traced is set when the context Serve is given carries the request's recorded span: each
	// attempt then gets a span id of its own (Try.Span), sent to its engine as the parent, for
	// the attempt's span built from the Record. Otherwise the engines are sent the context's
	// span, if any, unchanged.
	Traced bool

	up    llm.Request // the request as the engine sees it
	st    stage       // what the directive and context stages made of the request
	lease limit.Lease
	att   attemptSink
	fw    countingWriter
	pass  passthrough.Pass // the pass-through call, here rather than allocated per attempt
	cache cacheCall
	pr    *prefix.Prompt // the prompt's tokens, for a model with indexed replicas
}

// Forward is the pass-through offer of a call: when an attempt's engine speaks the client's
// format (passthrough.Forwarder) the client's body goes to it with only the model rewritten, and its
// bytes come back to Out unchanged, instead of events to the Sink.
type Forward struct {
	// Body is the client's request body, not modified.
	Body []byte
	// Out receives the engine's answer. Nothing is written to it before an attempt succeeds
	// in starting, so a failed attempt leaves it untouched.
	Out passthrough.Writer
	// Query is the raw query of the client's URL (passthrough.Pass.Query).
	Query string
}

// Record is what one request did, filled in as it goes and written once at the end.
type Record struct {
	RequestID string
	Start     time.Time
	Format    llm.Format
	Stream    bool
	// Key is the API key's name ("" when serving without auth). Never the key.
	Key string
	// Team is the key's team ("" for none).
	Team string
	// Model is the canonical name the client asked for (a model, alias or split).
	Model string
	// Served is the model that served the request: Model's, a split's arm, or a fallback.
	Served    string
	Engine    string // the replica of the last attempt
	Simulated bool   // the engine is a simulator
	// Attempts counts engine attempts (1 when the first succeeded).
	Attempts int
	// Fallbacks lists, in order, the reasons the request moved down its fallback chain.
	Fallbacks []string
	// RateLimited is set when layer0's own limits refused the request.
	RateLimited bool
	// Passed is set when the answer took the pass-through path.
	Passed    bool
	Status    int
	ErrorType string
	Cause     error // the internal error, for the log only
	Usage     llm.Usage
	// Cost is what the request cost, from the price of the model and engine that served it and
	// Usage; Priced says the model has a price (else Cost is 0). See internal/spend.
	Cost   money.Micros
	Priced bool
	// TTFT is the time from Start to the first content delta.
	TTFT time.Duration
	// EngineTime is the time spent waiting on engines (excluding time spent writing to the
	// client); the gateway's own overhead is the total minus this.
	EngineTime time.Duration
	// FirstEventEngine is EngineTime as of the moment the response started towards the client,
	// for headers written at that moment.
	FirstEventEngine time.Duration
	// Deltas counts the content deltas of the attempt that served.
	Deltas int
	// Cache is what the response cache did: CacheHit, CacheCoalesced, CacheMiss, CacheRefresh,
	// CacheBypass, or "" when the model does not cache.
	Cache string
	// Directives are the directives the system prompt carried (applied and stripped).
	Directives Directives
	// Offload is the offload target the request was sent to ("" for none).
	Offload string
	// Admission is what the admission queue did (its Band is "" when the model is not gated).
	Admission admission.Decision
	// Context is what context planning cut.
	Context ContextRecord
	// Pick is what a prefix-aware picker weighed and chose for the last attempt; its Picker is
	// "" when none decided.
	Pick route.Decision
	// Prediction is the prefix picker's prediction of the served replica's cached tokens,
	// checked against the engine's report (Checked is false when there was none to check).
	Prediction Prediction
	// Tries are the first MaxTries attempts in order (Attempts counts them all): for the
	// decision trace, which must not allocate on the request path.
	Tries [MaxTries]Try
	// ResponseID and ResponseModel are the id and model the serving engine's answer started
	// with; Stop is why it ended, when Stopped. The pass-through path leaves them unset.
	ResponseID    string
	ResponseModel string
	Stop          llm.StopReason
	Stopped       bool
}

// MaxTries is how many attempts a Record keeps the detail of.
const MaxTries = 4

// Try is one engine attempt as the Record keeps it.
type Try struct {
	Model    string // the model the attempt served (the primary, or a fallback)
	Replica  string
	Retry    bool          // another replica of the same model after a failure
	Fallback string        // why the request moved to Model down its fallback chain ("" for none)
	Left     route.Skip    // for a first attempt off the primary: a replica of the model left, and why
	At       time.Duration // when the attempt began, from the Record's Start
	Took     time.Duration
	// FirstByte is when the attempt's first content arrived, from its start; 0 when none did.
	FirstByte time.Duration
	// Span is the id of the attempt's span, the parent the engine was sent in its
	// traceparent; zero when the request is not traced.
	Span    trace.SpanID
	Err     error         // nil when the attempt served
	Verdict route.Verdict // what the failure did to the replica: ejected, breaker opened
}

// Simulator is implemented by engines that simulate a model, or that can tell an answer came
// from one (an engine behind a URL that is another layer0 serving its sim engine).
type Simulator interface {
	Simulated() bool
}

// Serve runs the call through the stages in order. It returns an *apierr.Error where the stage
// could classify its failure; the server writes it in the client's format (as an HTTP error if
// nothing was written yet, else inside the stream).
func (p *Pipeline) Serve(ctx context.Context, c *Call) error {
	rec := &c.Record
	req := c.Request
	key, name, err := p.identify(c)
	if err != nil {
		return err
	}

	// L2 rate limits: the request and its concurrency slot before any token is counted (the
	// tokenizer is the costly part of admission), then the input estimated in the model's
	// tokenizer (settled below with the engine's own count).
	if c.lease, err = p.limits.Admit(ctx, key.Name); err != nil {
		rec.RateLimited = apierr.IsRateLimit(err)
		return err
	}
	lease := &c.lease
	defer lease.Release() //nolint:errcheck // a store that cannot release leaves the limit stricter

	// Directives in the system prompt (and the offload header), applied and stripped before
	// anything is counted: the request from here on is the engines' (directives.go).
	if req, name, err = p.applyDirectives(c, key, name); err != nil {
		return err
	}
	// The response cache: a hit is answered here, before any token is counted (cache.go); the
	// key is the request as the engines will see it, directives applied.
	if p.cache != nil {
		if done, err := p.cached(ctx, c, name); done {
			return err
		}
		defer c.cache.end(ctx)
	}
	// Input tokens, counted only where a stage needs them before the engine runs: an input-token
	// limit, a context window the prompt's bound does not prove it fits, a truncate budget, the
	// prefix index, a budget. Otherwise the count waits until something asks for it (the start
	// event's estimate, attemptSink.estimate), which on the pass-through path and for most
	// engines is never.
	var input int
	if err := p.fits(ctx, lease, req); err != nil {
		rec.RateLimited = apierr.IsRateLimit(err)
		return err
	}
	counted := lease.CountsInput() || c.st.set.TruncateBudget > 0 || p.indexed(name) || p.budgeted(key.Name) ||
		!p.fitsUncounted(name, req)
	if counted {
		input, err = p.countPrompt(ctx, c, name, req)
		defer c.putPrompt()
		if err != nil {
			return err
		}
	}
	if err := lease.Reserve(ctx, input); err != nil {
		rec.RateLimited = apierr.IsRateLimit(err)
		return err
	}
	// Budgets: the worst case reserved against every budget of the key, its team and the
	// server, settled to the actual cost when the request ends (spend.go).
	hold, err := p.reserveSpend(ctx, key.Name, name, req, input)
	if err != nil {
		_ = lease.Settle(0, 0)
		rec.RateLimited = apierr.IsRateLimit(err)
		return err
	}
	defer p.settleSpend(c, hold)

	// Context planning: an input no window holds is cut to fit where allowed (context.go).
	if req, input, err = p.planContext(c, name, req, input); err != nil {
		_ = lease.Settle(0, 0)
		return err
	}
	if c.pr != nil && rec.Context.Truncated {
		p.prefix.Render(c.pr, req) // the index and the picker weigh the prompt the engine gets
	}

	// L3/L5 the route: split arm, context-length filtering, fallback chain.
	plan, err := p.routes.Plan(name, key.Name, input)
	if err != nil {
		_ = lease.Settle(0, 0)
		return err
	}
	plan.SetPrompt(c.pr, &rec.Pick)
	if key.Debug && !key.Admin {
		// The key may read its own traces, which show only what its own prompts left in the
		// engines' caches (trace: another key's prompts are not its to learn).
		plan.SetOwn(key.Name)
	}
	plan.SetHeader(c.Header)
	plan.SetRequest(req)

	// Admission: a saturated pool's requests wait here, by band and tenant, or are shed.
	slot, err := p.admitPool(ctx, c, plan.Model(), key.Name)
	if err != nil {
		_ = lease.Settle(0, 0)
		return err
	}
	defer slot.Release()

	if err := p.attempts(ctx, c, plan, name, lease, input, counted); err != nil {
		return err
	}
	p.checkPrediction(c)
	settleServed(c, lease, input)
	p.store(ctx, c)
	return nil
}

// settleServed settles the lease of a call an engine served with the engine's own count, which
// refunds or charges the estimate's error — or, where the engine sent none, with the input
// estimate and one output token per delta sent, which the request is then billed for
// (cutUsage).
func settleServed(c *Call, lease *limit.Lease, input int) {
	rec := &c.Record
	u := &rec.Usage
	if c.att.stopped || rec.Passed {
		_ = lease.Settle(u.InputTokens+u.CacheReadInputTokens+u.CacheCreationInputTokens, u.OutputTokens)
	} else {
		_ = lease.Settle(input, rec.Deltas)
		c.att.cutUsage() // an answer without a stop has no final usage either
	}
}

// identify runs the stages that say who is calling and what for, before any rate is spent: L4
// auth (the server may have admitted the request already), L2 size limits on the decoded
// request (body and headers are checked as they arrive), and L5 the name asked for and whether
// the key may use it — permissions are on the names clients send.
func (p *Pipeline) identify(c *Call) (*auth.Key, string, error) {
	key, err := p.caller(c.Key, c.Header, &c.Record)
	if err != nil {
		return nil, "", err
	}
	if err := p.sizes.Check(c.Request); err != nil {
		return nil, "", err
	}
	name, err := p.permit(key, c.Request.Model, &c.Record)
	if err != nil {
		return nil, "", err
	}
	return key, name, nil
}

// attempts runs the plan's attempts, until one succeeds or content has reached the client. Only
// then is a failure final; before it, the plan decides between another replica, the next
// fallback model, or giving up with the most useful error. A final failure has settled the
// lease; a success leaves it to the caller, which settles with the engine's own count.
func (p *Pipeline) attempts(ctx context.Context, c *Call, plan *route.Plan, name string, lease *limit.Lease, input int, counted bool) error {
	rec := &c.Record
	s := &c.att
	s.init(p, c, name, lease, input, counted)
	for {
		a, err := plan.Next()
		if err != nil {
			_ = lease.Settle(0, 0) // nothing was served
			return err
		}
		rec.Attempts++
		if a.Fallback != "" {
			rec.Fallbacks = append(rec.Fallbacks, a.Fallback)
		}
		rec.Served, rec.Engine = a.Model, a.Replica.Name
		s.sim, _ = a.Replica.Engine.(Simulator)
		s.noteSimulated()
		// The replica holds the prompt's blocks from its prefill on: recorded now, the
		// requests routed while this one runs find them (prefix.go).
		p.record(c, a.Replica)
		actx, span := ctx, trace.SpanID{}
		if c.Traced {
			actx, span = attemptContext(ctx)
		}
		ttft := rec.TTFT
		t0 := time.Now()
		err = p.attempt(actx, c, &a, t0)
		took := time.Since(t0)
		if s.clientErr != nil {
			// The client stopped reading (or went away) while the attempt wrote to it: whatever
			// the engine's call returned after that, the failure is the client's, and must not
			// count against the replica (it ended the call, which frees the engine's slot).
			err = s.clientErr
		}
		rec.addTry(&a, t0, took, ttft, span, err, plan.Report(err, took))
		if err == nil {
			s.noteSimulated() // an engine behind a URL knows once it has answered
			return nil
		}
		if s.committed {
			// Content reached the client: the error ends the stream. Settle and record what was
			// served (cutUsage).
			_ = lease.Settle(input, rec.Deltas)
			s.cutUsage()
			return err
		}
		s.discard()
	}
}

// addTry keeps the detail of attempt a, begun at t0, in the Record's Tries while there is room
// (the first MaxTries attempts). ttft is the Record's TTFT before the attempt: a change means
// the attempt's first content arrived.
func (rec *Record) addTry(a *route.Attempt, t0 time.Time, took, ttft time.Duration, span trace.SpanID, err error, verdict route.Verdict) {
	n := rec.Attempts - 1
	if n >= MaxTries {
		return
	}
	var at, fb time.Duration // 0 for a caller that keeps no Start
	if !rec.Start.IsZero() {
		at = t0.Sub(rec.Start)
		if rec.TTFT != ttft {
			fb = rec.TTFT - at
		}
	}
	rec.Tries[n] = Try{Model: a.Model, Replica: a.Replica.Name, Retry: a.Retry, Fallback: a.Fallback,
		Left: a.Left, At: at, Took: took, FirstByte: fb, Span: span, Err: err, Verdict: verdict}
}

// RateHeader sets the caller's rate-limit headers on h from the call's lease — with a shared
// store, from the state the request's own limit operations saw, without another round trip — and
// reports whether it did: false when the call was not admitted by the limits (the caller then
// reads them with Limiter.Header).
func (c *Call) RateHeader(h http.Header) bool {
	if !c.lease.Admitted() {
		return false
	}
	c.lease.Header(h)
	return true
}

// errFirstByte is the cause of an attempt canceled for sending no content in time.
var errFirstByte = errors.New("pipeline: no first token within the engine's first_byte timeout")

// attempt runs one engine call: the pass-through path when offered and possible, else events
// through the attempt sink.
func (p *Pipeline) attempt(ctx context.Context, c *Call, a *route.Attempt, t0 time.Time) error {
	info := p.engines[a.Replica]
	actx := ctx
	var cancel context.CancelCauseFunc
	if info.FirstByte > 0 {
		actx, cancel = context.WithCancelCause(ctx)
		c.att.timer = time.AfterFunc(info.FirstByte, func() { cancel(errFirstByte) })
	}
	err := p.generate(actx, c, a, t0)
	if cancel != nil {
		c.att.timer.Stop()
		c.att.timer = nil
		if err != nil && ctx.Err() == nil && errors.Is(context.Cause(actx), errFirstByte) {
			// The engine's own error is a context cancellation, which must not reach
			// Classify (a canceled request is never retried): keep only its text.
			err = &apierr.Error{Kind: apierr.Timeout, Code: "FIRST_BYTE_TIMEOUT",
				Message: "the engine sent no first token within " + info.FirstByte.String(),
				Cause:   fmt.Errorf("%w (the engine returned: %v)", errFirstByte, err)}
		}
		cancel(nil)
	}
	return err
}

func (p *Pipeline) generate(ctx context.Context, c *Call, a *route.Attempt, t0 time.Time) error {
	rec := &c.Record
	s := &c.att
	s.begin(t0)
	if f, ok := a.Replica.Engine.(passthrough.Forwarder); ok && c.Forward != nil && !c.st.edited && passthrough.Speaks(f, c.Request.Format) {
		c.fw = countingWriter{w: c.Forward.Out, att: &c.att}
		c.pass = passthrough.Pass{Body: c.Forward.Body, Model: a.Upstream, ClientModel: c.Request.Model, Format: c.Request.Format,
			Header: c.Header, Query: c.Forward.Query, Checked: true, Stream: c.Request.Stream}
		res, err := f.Forward(ctx, &c.pass, &c.fw)
		rec.EngineTime += time.Since(t0)
		if err == nil || c.fw.n > 0 {
			rec.Passed, rec.Usage, rec.Deltas = true, res.Usage, res.Deltas
		}
		return err
	}
	c.up = *c.request()
	c.up.Model = a.Upstream
	err := a.Replica.Engine.Generate(ctx, &c.up, s)
	rec.EngineTime += time.Since(t0) - s.inSink
	if err == nil && !s.committed && s.col == nil {
		// A complete answer that was all prelude (no content, no stop): release it.
		err = s.commit()
	}
	if err == nil && s.pending > 0 {
		_ = s.lease.Charge(s.pending)
		s.pending = 0
	}
	return err
}
