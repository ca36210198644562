package pipeline

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/engine"
	"github.com/layer0ai/layer0/internal/engine/passthrough"
	"github.com/layer0ai/layer0/internal/fakeclock"
	"github.com/layer0ai/layer0/internal/limit"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/route"
)

// clock is the injected clock, moved by hand.
type clock = fakeclock.Clock

func newClock() *clock { return fakeclock.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) }

// scripted is an engine that plays a script: fail before any event, or send the prelude (start
// and block start) and then fail (an error inside a 200 stream before any content), or hang
// after the prelude, or send some deltas and fail, or answer in full.
type scripted struct {
	err      error    // the failure
	prelude  bool     // fail after the prelude rather than before any event
	after    int      // fail after this many deltas (with err)
	hang     bool     // wait for the context after the prelude
	words    []string // the answer's deltas; default: "one", " two", " three"
	input    int      // input tokens reported; default 10
	lateIn   bool     // report the input only at the stop (the start says 0), as OpenAI streams do
	release  chan struct{}
	calls    atomic.Int32
	entered  chan struct{} // receives a value when Generate starts, if not nil
	received atomic.Value  // the last request's model
}

func (e *scripted) Close() error { return nil }

func (e *scripted) Generate(ctx context.Context, req *llm.Request, sink llm.Sink) error {
	e.calls.Add(1)
	e.received.Store(req.Model)
	if e.entered != nil {
		e.entered <- struct{}{}
	}
	if e.release != nil {
		select {
		case <-e.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if e.err != nil && !e.prelude && e.after == 0 {
		return e.err
	}
	in := e.input
	if in == 0 {
		in = 10
	}
	words := e.words
	if words == nil {
		words = []string{"one", " two", " three"}
	}
	ev := llm.Event{Kind: llm.EventStart, Model: req.Model, Usage: llm.Usage{InputTokens: in}}
	if e.lateIn {
		ev.Usage.InputTokens = 0
	}
	if err := sink.Send(&ev); err != nil {
		return err
	}
	ev = llm.Event{Kind: llm.EventBlockStart, Index: 0, Block: llm.BlockText}
	if err := sink.Send(&ev); err != nil {
		return err
	}
	if err := sink.Flush(); err != nil {
		return err
	}
	if e.hang {
		<-ctx.Done()
		return ctx.Err()
	}
	if e.prelude {
		return e.err
	}
	for i, w := range words {
		if e.after > 0 && i == e.after {
			_ = sink.Flush()
			return e.err
		}
		ev = llm.Event{Kind: llm.EventTextDelta, Index: 0, Text: w}
		if err := sink.Send(&ev); err != nil {
			return err
		}
		if err := sink.Flush(); err != nil {
			return err
		}
	}
	ev = llm.Event{Kind: llm.EventBlockStop, Index: 0}
	if err := sink.Send(&ev); err != nil {
		return err
	}
	ev = llm.Event{Kind: llm.EventStop, Usage: llm.Usage{InputTokens: in, OutputTokens: len(words)}}
	return sink.Send(&ev)
}

// recorder is a client sink that writes down what reaches it, flushes included.
type recorder struct {
	log []string
}

func (r *recorder) Send(ev *llm.Event) error {
	switch ev.Kind {
	case llm.EventStart:
		r.log = append(r.log, "start "+ev.Model)
	case llm.EventBlockStart:
		r.log = append(r.log, fmt.Sprintf("block %d", ev.Index))
	case llm.EventTextDelta, llm.EventToolDelta:
		r.log = append(r.log, "text "+ev.Text)
	case llm.EventBlockStop:
		r.log = append(r.log, fmt.Sprintf("block_stop %d", ev.Index))
	case llm.EventStop:
		r.log = append(r.log, fmt.Sprintf("stop %d", ev.Usage.OutputTokens))
	}
	return nil
}

func (r *recorder) Flush() error {
	if n := len(r.log); n == 0 || r.log[n-1] != "flush" {
		r.log = append(r.log, "flush")
	}
	return nil
}

// forwarder is a pass-through engine: it writes body to the client, optionally failing before
// writing or after part of it.
type forwarder struct {
	scripted
	format llm.Format
	body   string
	cutAt  int // fail after writing this many bytes; 0: write everything
}

func (f *forwarder) Format() llm.Format { return f.format }

func (f *forwarder) Forward(_ context.Context, p *passthrough.Pass, w passthrough.Writer) (passthrough.Result, error) {
	f.calls.Add(1)
	f.received.Store(p.Model)
	if f.err != nil && f.cutAt == 0 {
		return passthrough.Result{}, f.err
	}
	b := f.body
	if f.cutAt > 0 {
		b = b[:f.cutAt]
	}
	n, err := io.WriteString(w, b)
	if err != nil {
		return passthrough.Result{Bytes: int64(n)}, err
	}
	if f.cutAt > 0 {
		return passthrough.Result{Bytes: int64(n)}, f.err
	}
	return passthrough.Result{Bytes: int64(n), Usage: llm.Usage{InputTokens: 7, OutputTokens: 3}}, nil
}

// rig is a pipeline over named fake engines.
type rig struct {
	p     *Pipeline
	reps  map[string]*route.Replica
	clock *clock
	lim   *limit.Limiter
}

type rigModel struct {
	name      string
	engines   []string
	window    int
	fallbacks []string
}

type rigOptions struct {
	keys      []auth.Spec
	global    limit.Limits
	sizes     limit.Sizes
	firstByte time.Duration
	splits    []route.Split
	aliases   map[string]string
	rand      func(int) int
}

func newRig(t testing.TB, engines map[string]any, models []rigModel, o rigOptions) *rig {
	t.Helper()
	r := &rig{reps: map[string]*route.Replica{}, clock: newClock()}
	pol := policy()
	pol.Now = r.clock.Now
	infos := map[*route.Replica]Engine{}
	for name, e := range engines {
		eng, ok := e.(engine.Engine)
		if !ok {
			t.Fatalf("engine %s is not an engine", name)
		}
		rep := route.NewReplica(name, eng, pol)
		r.reps[name] = rep
		infos[rep] = Engine{URL: "http://" + name + ".example:8000", FirstByte: o.firstByte}
	}
	var rms []route.Model
	for _, m := range models {
		rm := route.Model{Name: m.name, ContextWindow: m.window, Fallbacks: m.fallbacks, Upstream: m.name + "-up"}
		for _, en := range m.engines {
			rm.Replicas = append(rm.Replicas, r.reps[en])
		}
		rms = append(rms, rm)
	}
	table, err := route.New(routing(route.Config{Models: rms, Splits: o.splits, Aliases: o.aliases, Now: r.clock.Now,
		Rand: o.rand, Picker: &route.RoundRobin{}}))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.New(o.keys)
	if err != nil {
		t.Fatal(err)
	}
	r.lim = limit.New(limit.Config{Global: o.global, Keys: keys.Limits(), Now: r.clock.Now})
	r.p, err = New(Config{Keys: keys, Limits: r.lim, Sizes: o.sizes, Routes: table, Engines: infos,
		Tokens: wordCounter{}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// wordCounter counts one token per word of the messages' text, plus one per message.
type wordCounter struct{}

func (wordCounter) CountRequest(r *llm.Request) int {
	n := 0
	for _, m := range r.Messages {
		n++
		for _, b := range m.Content {
			n += len(strings.Fields(b.Text))
		}
	}
	return n
}

func request(model, text string) *llm.Request {
	return &llm.Request{Model: model, MaxTokens: 100, Messages: []llm.Message{{Role: llm.RoleUser,
		Content: []llm.Block{{Type: llm.BlockText, Text: text}}}}}
}

// serve runs one request through the rig with the given key and sink.
func (r *rig) serve(req *llm.Request, key string, sink llm.Sink) (*Call, error) {
	h := http.Header{}
	if key != "" {
		h.Set("X-Api-Key", key)
	}
	c := &Call{Request: req, Sink: sink, Header: h}
	c.Record.Start = time.Now()
	return c, r.p.Serve(context.Background(), c)
}

// routing gives c the default configuration's routing values, as the gateway gives the table
// the configuration's (filled in by internal/config).
func routing(c route.Config) route.Config {
	r := config.Default().Routing
	c.UtilizationThreshold = r.FallbackUtilizationThreshold
	c.Budget = route.BudgetConfig{Ratio: r.RetryBudget.Ratio, MinRetries: r.RetryBudget.MinRetries, Window: r.RetryBudget.Window}
	c.RecheckAfter = r.Health.Interval
	return c
}

// policy is the default configuration's replica policy.
func policy() route.Policy {
	r := config.Default().Routing
	return route.PolicyOf(r.Ejection, r.Breaker, r.Health)
}
