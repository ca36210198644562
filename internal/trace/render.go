package trace

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/layer0ai/layer0/internal/pipeline"
)

// Trace is one request's decisions, as GET /debug/requests/{id} serves it and `layer0 debug`
// reads it.
type Trace struct {
	ID        string    `json:"id"`
	Time      time.Time `json:"time"`
	Method    string    `json:"method"`
	Path      string    `json:"path"`
	Format    string    `json:"format,omitempty"`
	Stream    bool      `json:"stream"`
	Status    int       `json:"status"`
	ErrorType string    `json:"error_type,omitempty"`
	Error     string    `json:"error,omitempty"`
	// Auth and limits.
	Key  string `json:"key"`
	Team string `json:"team,omitempty"`
	// Cost is what the request cost (a decimal of the currency, docs/spend.md), when its model
	// has a price.
	Cost        string `json:"cost,omitempty"`
	RateLimited bool   `json:"rate_limited,omitempty"`
	// The name asked for, and what served it.
	Model     string `json:"model,omitempty"`
	Served    string `json:"served,omitempty"`
	Engine    string `json:"engine,omitempty"`
	Simulated bool   `json:"simulated,omitempty"`
	Passed    bool   `json:"pass_through,omitempty"`
	// The stages' decisions.
	Directives []string   `json:"directives,omitempty"`
	Offload    string     `json:"offload,omitempty"`
	Cache      string     `json:"cache,omitempty"`
	Context    *Context   `json:"context,omitempty"`
	Route      *Route     `json:"route,omitempty"`
	Admission  *Admission `json:"admission,omitempty"`
	Attempts   []Attempt  `json:"attempts,omitempty"`
	// AttemptsTotal counts every attempt; Attempts details the first few.
	AttemptsTotal int      `json:"attempts_total"`
	Fallbacks     []string `json:"fallbacks,omitempty"`
	Usage         Usage    `json:"usage"`
	Deltas        int      `json:"deltas"`
	Times         Times    `json:"times"`
}

// Context is what context planning cut.
type Context struct {
	Before       int `json:"tokens_before"`
	After        int `json:"tokens_after"`
	TurnsDropped int `json:"turns_dropped"`
}

// Admission is what the admission queue of a saturated pool did with the request.
type Admission struct {
	Band    string `json:"band"`
	Tenant  string `json:"tenant"`
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
	// Ahead and EstimateMs are the requests estimated to go first and the estimated wait, when
	// the request arrived to a full pool.
	Ahead      int     `json:"ahead,omitempty"`
	EstimateMs float64 `json:"estimate_ms,omitempty"`
	WaitedMs   float64 `json:"waited_ms,omitempty"`
}

// Route is what the prefix-aware picker weighed and chose for the last attempt.
type Route struct {
	Picker       string `json:"picker"`
	Reason       string `json:"reason"`
	PromptTokens int    `json:"prompt_tokens"`
	// Spread is how many replicas the prompt's hot prefix is spread over (route.Decision's);
	// absent when it is not.
	Spread     int         `json:"spread,omitempty"`
	Chosen     string      `json:"chosen"`
	Candidates []Candidate `json:"candidates"`
	Skipped    []Skipped   `json:"skipped,omitempty"`
	// Prediction is the chosen replica's predicted cached tokens next to the engine's report;
	// nil when the engine reported none to check against.
	Prediction *Prediction `json:"prediction,omitempty"`
	// CacheScope is set on the trace of a prefix pick read by the request's own key rather
	// than an operator (Trace.Own): ScopeOwn when the candidates' cached tokens, costs and the
	// prediction count only the blocks that key's own requests left, ScopeWithheld when they
	// were not counted for the request and show nothing cached. Absent: the full figures.
	CacheScope string `json:"cache_scope,omitempty"`

	owned bool // the candidates' own figures were counted (route.Decision.Owned)
}

// The values of Route.CacheScope.
const (
	ScopeOwn      = "own"
	ScopeWithheld = "withheld"
)

// Prediction is the prefix picker's prediction of the prompt tokens the chosen replica held,
// and what its engine reported serving from its cache.
type Prediction struct {
	Predicted int `json:"predicted_cached_tokens"`
	Engine    int `json:"engine_cached_tokens"`
}

// Skipped is a replica that was not weighed, and why: down, ejected, breaker, utilization, or
// tried (an earlier attempt failed there).
type Skipped struct {
	Replica string `json:"replica"`
	Reason  string `json:"reason"`
}

// Candidate is one replica the picker weighed.
type Candidate struct {
	Replica     string  `json:"replica"`
	Cached      int     `json:"cached_tokens"`
	Outstanding int64   `json:"outstanding"`
	Utilization float64 `json:"utilization"`
	Cost        float64 `json:"cost"`

	own int // of Cached, what the request's key put there (route.Candidate.Own)
}

// Attempt is one engine attempt.
type Attempt struct {
	Model    string `json:"model"`
	Replica  string `json:"replica"`
	Retry    bool   `json:"retry,omitempty"`
	Fallback string `json:"fallback,omitempty"`
	// Left is, for a first attempt that did not land on the primary model, a replica of the
	// model left and why it could not take the request.
	Left *Skipped `json:"left,omitempty"`
	// AtMs is when the attempt began, in milliseconds from the request's start.
	AtMs  float64 `json:"at_ms"`
	Ms    float64 `json:"ms"`
	Error string  `json:"error,omitempty"`
	// EjectedMs, when positive, is how long this failure ejected the replica for.
	EjectedMs float64 `json:"ejected_ms,omitempty"`
	// BreakerOpened is set when this failure opened the replica's breaker.
	BreakerOpened bool `json:"breaker_opened,omitempty"`
}

// Usage is the tokens the request consumed.
type Usage struct {
	Input         int `json:"input_tokens"`
	Output        int `json:"output_tokens"`
	CacheRead     int `json:"cache_read_input_tokens,omitempty"`
	CacheCreation int `json:"cache_creation_input_tokens,omitempty"`
}

// Times are the request's times in milliseconds: total in layer0, spent waiting on engines,
// to the first content delta, and layer0's own (total minus engine).
type Times struct {
	TotalMs    float64 `json:"total_ms"`
	EngineMs   float64 `json:"engine_ms"`
	TTFTMs     float64 `json:"ttft_ms,omitempty"`
	OverheadMs float64 `json:"overhead_ms"`
}

// FromRecord is the trace of rec, a request to path with method that took total.
func FromRecord(rec *pipeline.Record, method, path string, total time.Duration) *Trace {
	return build(&entry{rec: *rec, method: method, path: path, duration: total})
}

// build turns a kept entry into its trace.
func build(e *entry) *Trace {
	rec := &e.rec
	t := &Trace{ID: rec.RequestID, Time: rec.Start, Method: e.method, Path: e.path, Stream: rec.Stream,
		Status: rec.Status, ErrorType: rec.ErrorType, Key: rec.Key, RateLimited: rec.RateLimited,
		Model: rec.Model, Served: rec.Served, Engine: rec.Engine, Simulated: rec.Simulated, Passed: rec.Passed,
		Offload: rec.Offload, Cache: rec.Cache, AttemptsTotal: rec.Attempts, Fallbacks: rec.Fallbacks,
		Deltas: rec.Deltas,
		Usage: Usage{Input: rec.Usage.InputTokens, Output: rec.Usage.OutputTokens,
			CacheRead: rec.Usage.CacheReadInputTokens, CacheCreation: rec.Usage.CacheCreationInputTokens}}
	t.Format = rec.Format.String()
	t.Team = rec.Team
	if rec.Priced {
		t.Cost = rec.Cost.String()
	}
	if rec.Cause != nil {
		t.Error = rec.Cause.Error()
	}
	if d := rec.Directives.String(); d != "" {
		t.Directives = strings.Split(d, ",")
	}
	if c := &rec.Context; c.Truncated {
		t.Context = &Context{Before: c.Before, After: c.After, TurnsDropped: c.TurnsDropped}
	}
	if a := &rec.Admission; a.Band != "" {
		t.Admission = &Admission{Band: a.Band, Tenant: a.Tenant, Outcome: a.Outcome, Reason: a.Reason, Ahead: a.Ahead,
			EstimateMs: ms(a.Estimate), WaitedMs: ms(a.Waited)}
	}
	if p := &rec.Pick; p.Picker != "" {
		r := &Route{Picker: p.Picker, Reason: p.Reason, PromptTokens: p.PromptTokens, Spread: p.Spread, owned: p.Owned}
		for i := 0; i < p.N; i++ {
			c := &p.Candidates[i]
			r.Candidates = append(r.Candidates, Candidate{Replica: c.Replica, Cached: c.Cached,
				Outstanding: c.Outstanding, Utilization: c.Utilization, Cost: c.Cost, own: c.Own})
		}
		for i := 0; i < p.NSkipped; i++ {
			r.Skipped = append(r.Skipped, Skipped{Replica: p.Skipped[i].Replica, Reason: p.Skipped[i].Reason})
		}
		if p.Chosen >= 0 && p.Chosen < p.N {
			r.Chosen = p.Candidates[p.Chosen].Replica
		}
		if pr := rec.Prediction; pr.Checked {
			r.Prediction = &Prediction{Predicted: pr.Predicted, Engine: pr.Engine}
		}
		t.Route = r
	}
	for i := 0; i < min(rec.Attempts, pipeline.MaxTries); i++ {
		tr := &rec.Tries[i]
		a := Attempt{Model: tr.Model, Replica: tr.Replica, Retry: tr.Retry, Fallback: tr.Fallback, AtMs: ms(tr.At), Ms: ms(tr.Took),
			EjectedMs: ms(tr.Verdict.Ejected), BreakerOpened: tr.Verdict.BreakerOpened}
		if tr.Err != nil {
			a.Error = tr.Err.Error()
		}
		if tr.Left.Replica != "" {
			a.Left = &Skipped{Replica: tr.Left.Replica, Reason: tr.Left.Reason}
		}
		t.Attempts = append(t.Attempts, a)
	}
	t.Times = Times{TotalMs: ms(e.duration), EngineMs: ms(rec.EngineTime), TTFTMs: ms(rec.TTFT),
		OverheadMs: ms(max(e.duration-rec.EngineTime, 0))}
	return t
}

// Own makes t the trace the request's own key may read when it is not an operator (an admin
// key, or the admin listener, reads t as built). The prefix picker weighed every block the
// engines hold, whoever sent it: those figures would tell the key which prompts other keys sent
// (a right guess of another key's system prompt shows cached tokens, a wrong one none), which
// POST /v1/cache never tells it. So each candidate's cached tokens become those the key's own
// requests left (ScopeOwn), or none when they were not counted (ScopeWithheld), its cost is what
// it would be with only those cached, the prediction is made from them, and the reasons "cache"
// and "load" — which say whether anything at all was cached — both read "cost". The replica
// chosen, the loads and the engine's own report are left: the response tells the key those.
func (t *Trace) Own() {
	r := t.Route
	if r == nil || r.Picker != "prefix" {
		return
	}
	r.CacheScope = ScopeOwn
	if !r.owned {
		r.CacheScope = ScopeWithheld
	}
	chosen := 0
	for i := range r.Candidates {
		c := &r.Candidates[i]
		own := 0
		if r.owned {
			own = c.own
		}
		c.Cost += float64(c.Cached - own)
		c.Cached = own
		if c.Replica == r.Chosen {
			chosen = own
		}
	}
	if r.Reason == "cache" || r.Reason == "load" {
		r.Reason = "cost"
	}
	if p := r.Prediction; p != nil {
		if !r.owned {
			r.Prediction = nil
		} else {
			p.Predicted = pipeline.Predicted(chosen, t.Usage.Input+t.Usage.CacheRead+t.Usage.CacheCreation)
		}
	}
}

// Lines renders t for a person, one line per decision, in the order the stages ran.
func (t *Trace) Lines() []string {
	var out lines
	out.add("request", "%s %s %s (%s%s) at %s", t.ID, t.Method, t.Path, t.Format, streamed(t.Stream),
		t.Time.UTC().Format(time.RFC3339Nano))
	key := t.Key
	if key == "" {
		key = "anonymous"
	}
	out.add("auth", "key %s", key)
	if t.RateLimited {
		out.add("limits", "refused by layer0's rate limits")
	}
	if t.Model != "" {
		out.add("model", "asked for %s", t.Model)
	}
	if len(t.Directives) > 0 {
		out.add("directives", "applied %s", strings.Join(t.Directives, ", "))
	}
	if t.Offload != "" {
		out.add("offload", "sent to %s", t.Offload)
	}
	if t.Cache != "" {
		out.add("cache", "%s", t.Cache)
	}
	if c := t.Context; c != nil {
		out.add("context", "cut %d → %d input tokens (%d turns dropped)", c.Before, c.After, c.TurnsDropped)
	}
	if a := t.Admission; a != nil {
		out.add("admission", "%s", a.line())
	}
	if t.Route != nil {
		t.Route.lines(&out)
	}
	t.attemptLines(&out)
	if n := t.AttemptsTotal - len(t.Attempts); n > 0 {
		out.add("attempts", "%d more not detailed (%d in all)", n, t.AttemptsTotal)
	}
	if t.Served != "" {
		t.servedLine(&out)
	}
	out.add("usage", "%d input tokens, %d output tokens (cache read %d, created %d), %d deltas",
		t.Usage.Input, t.Usage.Output, t.Usage.CacheRead, t.Usage.CacheCreation, t.Deltas)
	result := strconv.Itoa(t.Status)
	if t.ErrorType != "" {
		result += " " + t.ErrorType
	}
	if t.Error != "" {
		result += ": " + t.Error
	}
	out.add("status", "%s", result)
	tm := t.Times
	out.add("times", "total %.3fms, engine %.3fms, ttft %.3fms, overhead %.3fms", tm.TotalMs, tm.EngineMs, tm.TTFTMs, tm.OverheadMs)
	return out
}

// lines collects a trace's lines, each "[DEBUG] stage: text".
type lines []string

// add appends the line of stage, its text formatted from format and args.
func (l *lines) add(stage, format string, args ...any) {
	*l = append(*l, "[DEBUG] "+stage+": "+fmt.Sprintf(format, args...))
}

// lines adds the route's lines to out: the candidates the picker weighed, with what it weighed
// (a sticky picker, the replica's rank for the session; the others, the cached prompt and
// load), the replicas it skipped, its pick and the prediction checked against the engine.
func (r *Route) lines(out *lines) {
	if r.Picker == "sticky" {
		// The sticky picker weighs no prompt: its cost is the replica's rank for the session.
		for _, c := range r.Candidates {
			out.add("route", "candidate %s: rank %.0f for the session, %d in flight, utilization %.2f",
				c.Replica, c.Cost, c.Outstanding, c.Utilization)
		}
		out.add("route", "picked %s (sticky; reason: %s)", r.Chosen, r.Reason)
	} else {
		for _, c := range r.Candidates {
			out.add("route", "candidate %s: cached %d/%d tokens, %d in flight, utilization %.2f, cost %.0f",
				c.Replica, c.Cached, r.PromptTokens, c.Outstanding, c.Utilization, c.Cost)
		}
		for _, s := range r.Skipped {
			out.add("route", "skipped %s (%s)", s.Replica, s.Reason)
		}
		cached := 0
		for _, c := range r.Candidates {
			if c.Replica == r.Chosen {
				cached = c.Cached
			}
		}
		why := r.Reason
		if r.Spread > 1 {
			why += "; prefix hot: spread to " + strconv.Itoa(r.Spread) + " replicas"
		}
		out.add("route", "picked %s (cache %d/%d tokens; reason: %s)", r.Chosen, cached, r.PromptTokens, why)
		if r.CacheScope != "" {
			out.add("route", "cached tokens shown: %s (only this key's own prompts count; the pick weighed all)", r.CacheScope)
		}
		if p := r.Prediction; p != nil {
			out.add("route", "predicted %d cached tokens on %s, the engine reported %d", p.Predicted, r.Chosen, p.Engine)
		}
	}
}

// attemptLines adds a line per detailed attempt to out, each after the line of the fallback
// that led to it, if any, and before the ejection or breaker opening its failure caused.
func (t *Trace) attemptLines(out *lines) {
	from := t.Model // the model the request leaves when it falls back
	for i, a := range t.Attempts {
		if a.Fallback != "" {
			why := a.Fallback
			if a.Left != nil {
				why += ": " + a.Left.Replica + " " + a.Left.Reason
			}
			out.add("fallback", "%s → %s (reason: %s) at +%.3fms", from, a.Model, why, a.AtMs)
		}
		from = a.Model
		what := "served"
		if a.Error != "" {
			what = "failed: " + a.Error
		}
		how := ""
		switch {
		case a.Fallback != "":
			how = " (fallback: " + a.Fallback + ")"
		case a.Retry:
			how = " (retry)"
		}
		out.add("attempt "+strconv.Itoa(i+1), "%s on %s%s at +%.3fms, %.3fms, %s", a.Model, a.Replica, how, a.AtMs, a.Ms, what)
		end := a.AtMs + a.Ms
		if a.EjectedMs > 0 {
			out.add("ejection", "%s ejected for %s at +%.3fms", a.Replica,
				time.Duration(a.EjectedMs*float64(time.Millisecond)), end)
		}
		if a.BreakerOpened {
			out.add("breaker", "%s's breaker opened at +%.3fms", a.Replica, end)
		}
	}
}

// servedLine adds the line of the engine that served to out: how (pass-through, simulated),
// the first token's time and the end's.
func (t *Trace) servedLine(out *lines) {
	via := ""
	if t.Passed {
		via = ", pass-through"
	}
	if t.Simulated {
		via += ", simulated"
	}
	first := ""
	if t.Times.TTFTMs > 0 {
		first = fmt.Sprintf("; first token at +%.3fms", t.Times.TTFTMs)
	}
	out.add("served", "%s by %s%s%s, done at +%.3fms", t.Served, t.Engine, via, first, t.Times.TotalMs)
}

// line renders the admission decision for Lines.
func (a *Admission) line() string {
	s := fmt.Sprintf("band %s, tenant %s: %s", a.Band, a.Tenant, a.Outcome)
	if a.Outcome != "admitted" {
		s += fmt.Sprintf(" (queued behind %d, estimated %.3fms, waited %.3fms)", a.Ahead, a.EstimateMs, a.WaitedMs)
	}
	if a.Reason != "" {
		s += ", reason: " + a.Reason
	}
	return s
}

func streamed(s bool) string {
	if s {
		return ", stream"
	}
	return ""
}
