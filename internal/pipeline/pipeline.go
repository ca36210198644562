// Package pipeline is the one place the order of the request path lives. A Pipeline is built
// from one configuration and never mutated; reload builds a new one and swaps it in. Serve runs
// the stages top to bottom — resolve the model, check the context window, call the engine — and
// fills one Record per request from which metrics and the access log are written once.
package pipeline

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/engine"
	"github.com/layer0ai/layer0/internal/llm"
)

// Replica is one engine instance serving a model.
type Replica struct {
	Name   string
	Engine engine.Engine
}

// Model is a model id clients may ask for and the pool that serves it.
type Model struct {
	ID            string
	DisplayName   string
	Created       time.Time
	Upstream      string // model name sent to the engine
	ContextWindow int    // input tokens; 0 means unbounded
	Replicas      []Replica
}

// Counter counts a request's input tokens when its engine cannot.
type Counter interface {
	CountRequest(r *llm.Request) int
}

// Pipeline is one immutable configuration of the request path. Build it with New.
type Pipeline struct {
	models []*Model          // sorted by ID, for listing
	byID   map[string]*Model // exact ids
	byNorm map[string]*Model // ids with '-', '.' removed and lowercased
	tokens Counter
}

// New returns a pipeline serving models, counting tokens with tokens where an engine cannot.
func New(models []*Model, tokens Counter) *Pipeline {
	p := &Pipeline{
		models: append([]*Model(nil), models...),
		byID:   make(map[string]*Model, len(models)),
		byNorm: make(map[string]*Model, len(models)),
		tokens: tokens,
	}
	sort.Slice(p.models, func(i, j int) bool { return p.models[i].ID < p.models[j].ID })
	for _, m := range p.models {
		p.byID[m.ID] = m
		p.byNorm[NormalizeModel(m.ID)] = m
	}
	return p
}

// NormalizeModel folds a model name for loose matching: '-' and '.' removed, ASCII lowercased,
// so "claude35sonnet20240620" matches "claude-3-5-sonnet-20240620" (the binary protocol's
// clients strip dashes; SYSTEM.md §3.3).
func NormalizeModel(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '-' || c == '.':
			continue
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		b.WriteByte(c)
	}
	return b.String()
}

// Models returns the models in id order. The slice must not be modified.
func (p *Pipeline) Models() []*Model { return p.models }

// Model finds a model by exact id, then by its normalized form.
func (p *Pipeline) Model(id string) (*Model, error) {
	if m, ok := p.byID[id]; ok {
		return m, nil
	}
	if m, ok := p.byNorm[NormalizeModel(id)]; ok {
		return m, nil
	}
	return nil, &apierr.Error{Kind: apierr.NotFound, Param: "model", Code: "model_not_found",
		Message: "model: " + quote(id) + " not found"}
}

func quote(s string) string {
	if len(s) > 128 {
		s = s[:128] + "…"
	}
	return `"` + s + `"`
}

// Call is one request going through the pipeline.
type Call struct {
	// Request is the decoded request. Serve does not modify it.
	Request *llm.Request
	// Sink receives the response events.
	Sink llm.Sink
	// Record is filled in by the stages; the server writes metrics and the log from it.
	Record Record
}

// Record is what one request did, filled in as it goes and written once at the end.
type Record struct {
	RequestID string
	Start     time.Time
	Format    llm.Format
	Stream    bool
	Model     string // the model id resolved
	Engine    string // the replica that served
	Simulated bool   // the engine is a simulator
	Status    int
	ErrorType string
	Cause     error // the internal error, for the log only
	Usage     llm.Usage
	// TTFT is the time from Start to the first content delta.
	TTFT time.Duration
	// EngineTime is the time spent waiting on the engine (excluding time spent writing to the
	// client); the gateway's own overhead is the total minus this.
	EngineTime time.Duration
	// FirstEventEngine is EngineTime as of the first event, for headers written at that moment.
	FirstEventEngine time.Duration
	// Deltas counts content deltas sent.
	Deltas int
}

// Simulator is implemented by engines that simulate a model.
type Simulator interface {
	Simulated() bool
}

// CountTokens resolves the request's model and counts its input tokens in that model's tokenizer.
func (p *Pipeline) CountTokens(req *llm.Request) (int, error) {
	m, err := p.Model(req.Model)
	if err != nil {
		return 0, err
	}
	return p.count(m, req)
}

func (p *Pipeline) count(m *Model, req *llm.Request) (int, error) {
	if len(m.Replicas) > 0 {
		if c, ok := m.Replicas[0].Engine.(engine.Counter); ok {
			return c.CountTokens(req)
		}
	}
	if p.tokens == nil {
		return 0, nil
	}
	return p.tokens.CountRequest(req), nil
}

// Serve runs the call through the stages in order. It returns an *apierr.Error where the stage
// could classify its failure; the server writes it in the client's format.
func (p *Pipeline) Serve(ctx context.Context, c *Call) error {
	rec := &c.Record
	req := c.Request

	// L5 model routing: resolve the model id.
	m, err := p.Model(req.Model)
	if err != nil {
		return err
	}
	rec.Model = m.ID

	// Context window: an input that cannot fit is refused before any engine is called.
	if m.ContextWindow > 0 {
		n, err := p.count(m, req)
		if err != nil {
			return err
		}
		if n > m.ContextWindow {
			return &apierr.Error{Kind: apierr.InvalidRequest, Param: "messages", Code: "context_length_exceeded",
				Message: "prompt is too long: " + strconv.Itoa(n) + " tokens > " + strconv.Itoa(m.ContextWindow) + " maximum"}
		}
	}

	// L3 pick a replica.
	if len(m.Replicas) == 0 {
		return apierr.New(apierr.Unavailable, "model %s has no engine", m.ID)
	}
	rep := m.Replicas[0]
	rec.Engine = rep.Name
	if s, ok := rep.Engine.(Simulator); ok {
		rec.Simulated = s.Simulated()
	}

	// The engine sees the upstream model name; the caller's request is left untouched.
	up := *req
	up.Model = m.Upstream
	ts := timingSink{inner: c.Sink, rec: rec, model: req.Model}
	t0 := time.Now()
	ts.t0 = t0
	err = rep.Engine.Generate(ctx, &up, &ts)
	rec.EngineTime += time.Since(t0) - ts.inSink
	return err
}

// timingSink separates the engine's time from the time spent writing to the client and notes
// the first content delta; it is the only per-event work the pipeline adds.
type timingSink struct {
	inner  llm.Sink
	rec    *Record
	t0     time.Time
	inSink time.Duration
	first  bool
	model  string // the model the client asked for, shown instead of the upstream name
}

func (t *timingSink) Send(ev *llm.Event) error {
	switch ev.Kind {
	case llm.EventTextDelta, llm.EventToolDelta:
		t.rec.Deltas++
		if !t.first {
			t.first = true
			now := time.Now()
			t.rec.TTFT = now.Sub(t.rec.Start)
		}
	case llm.EventStart:
		t.rec.FirstEventEngine = t.rec.EngineTime + time.Since(t.t0) - t.inSink
		if ev.Model != t.model {
			// The engine names its upstream model; the client sees the id it asked for. A copy,
			// since the engine owns ev.
			start := *ev
			start.Model = t.model
			return t.inner.Send(&start)
		}
	case llm.EventStop:
		t.rec.Usage = ev.Usage
	}
	return t.inner.Send(ev)
}

func (t *timingSink) Flush() error {
	s := time.Now()
	err := t.inner.Flush()
	t.inSink += time.Since(s)
	return err
}
