package layer0_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/layer0ai/layer0"
)

// echoGateway returns a gateway whose model "sim" answers with the last user message (the sim
// engine's echo mode), so that the examples' output is predictable. The fields left out take
// their defaults.
func echoGateway() *layer0.Gateway {
	cfg := &layer0.Config{
		Engines: map[string]layer0.EngineConfig{"sim": {Kind: layer0.KindSim, Sim: layer0.Sim{Mode: "echo"}}},
		Models:  map[string]layer0.Model{"sim": {Engines: []string{"sim"}}},
	}
	g, err := layer0.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	return g
}

// Do with a Collector returns the whole answer at once. The conversation names each turn's
// author with the re-exported roles.
func ExampleGateway_Do() {
	g := echoGateway()
	defer g.Close()
	req := &layer0.Request{
		Model:     "sim",
		MaxTokens: 64,
		System:    []layer0.Block{{Type: layer0.BlockText, Text: "Repeat what the user says."}},
		Messages: []layer0.Message{
			{Role: layer0.RoleUser, Content: []layer0.Block{{Type: layer0.BlockText, Text: "Hi"}}},
			{Role: layer0.RoleAssistant, Content: []layer0.Block{{Type: layer0.BlockText, Text: "Hi"}}},
			{Role: layer0.RoleUser, Content: []layer0.Block{{Type: layer0.BlockText, Text: "layer0 runs in-process."}}},
		},
	}
	var c layer0.Collector
	if err := g.Do(context.Background(), req, &c); err != nil {
		log.Fatal(err)
	}
	for _, b := range c.Response.Content {
		if b.Type == layer0.BlockText {
			fmt.Println(b.Text)
		}
	}
	fmt.Println("stop:", c.Response.Stop, c.Response.Stop == layer0.StopEndTurn)
	// Output:
	// layer0 runs in-process.
	// stop: end_turn true
}

// printer is a streaming Sink: it prints text as it arrives. Events must not be kept after
// Send returns (engines reuse them), so it copies what it needs.
type printer struct{ deltas int }

func (p *printer) Send(ev *layer0.Event) error {
	switch ev.Kind {
	case layer0.EventTextDelta:
		p.deltas++
		fmt.Printf("[%s]", ev.Text)
	case layer0.EventStop:
		fmt.Printf("\nstop: %s after %d output tokens\n", ev.Stop, ev.Usage.OutputTokens)
	}
	return nil
}

// Flush is where a network sink would write what Send buffered.
func (p *printer) Flush() error { return nil }

// Do with a streaming Sink sees each event as the engine produces it: here, every text delta
// in brackets, and the answer cut by max_tokens.
func ExampleGateway_Do_stream() {
	g := echoGateway()
	defer g.Close()
	req := &layer0.Request{
		Model:     "sim",
		MaxTokens: 4,
		Messages: []layer0.Message{
			{Role: layer0.RoleUser, Content: []layer0.Block{{Type: layer0.BlockText, Text: "Streaming, one token at a time."}}},
		},
	}
	if err := g.Do(context.Background(), req, &printer{}); err != nil {
		log.Fatal(err)
	}
	// Output:
	// [Streaming][,][ one][ token]
	// stop: max_tokens after 4 output tokens
}

// shout is an application's own engine: it answers with the last user message in capitals.
type shout struct{}

func (shout) Generate(ctx context.Context, req *layer0.Request, sink layer0.Sink) error {
	var text string
	if n := len(req.Messages); n > 0 {
		for _, b := range req.Messages[n-1].Content {
			if b.Type == layer0.BlockText {
				text += b.Text
			}
		}
	}
	events := []layer0.Event{
		{Kind: layer0.EventStart, Model: req.Model},
		{Kind: layer0.EventBlockStart, Block: layer0.BlockText},
		{Kind: layer0.EventTextDelta, Text: strings.ToUpper(text)},
		{Kind: layer0.EventBlockStop},
		{Kind: layer0.EventStop, Stop: layer0.StopEndTurn, Usage: layer0.Usage{OutputTokens: 1}},
	}
	for i := range events {
		if err := sink.Send(&events[i]); err != nil {
			return err
		}
	}
	return sink.Flush()
}

// Close releases nothing: shout holds no connection.
func (shout) Close() error { return nil }

// WithEngine plugs in an engine of the application's own: the configuration names its kind
// like any other, and the gateway routes, limits and meters it like any other.
func ExampleWithEngine() {
	newShout := func(name string, cfg layer0.EngineConfig) (layer0.Engine, error) { return shout{}, nil }
	cfg := &layer0.Config{
		Engines: map[string]layer0.EngineConfig{"loud": {Kind: "shout"}},
		Models:  map[string]layer0.Model{"loud": {Engines: []string{"loud"}}},
	}
	g, err := layer0.New(cfg, layer0.WithEngine("shout", newShout))
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	var c layer0.Collector
	req := &layer0.Request{Model: "loud", MaxTokens: 16, Messages: []layer0.Message{
		{Role: layer0.RoleUser, Content: []layer0.Block{{Type: layer0.BlockText, Text: "hello"}}},
	}}
	if err := g.Do(context.Background(), req, &c); err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.Response.Content[0].Text)
	// Output:
	// HELLO
}

// WithEngineKind plugs in an engine kind with settings of its own: the engine's options block
// reaches its factory as decoded, and Validate checks it first — when the file is loaded, and
// by New and Reload — so a bad value is a configuration error at engines.NAME.options. This kind
// decorates a built-in engine (NewBuiltinEngine): it puts a prefix before each text delta.
func ExampleWithEngineKind() {
	kind := layer0.EngineKind{
		Validate: func(name string, cfg layer0.EngineConfig) error {
			if _, ok := cfg.Options["prefix"].(string); !ok {
				return fmt.Errorf("prefix: a string is required")
			}
			return nil
		},
		Build: func(name string, cfg layer0.EngineConfig) (layer0.Engine, error) {
			inner := cfg
			inner.Kind, inner.Options, inner.Sim = layer0.KindSim, nil, layer0.Sim{Mode: "echo"}
			e, err := layer0.NewBuiltinEngine(name, inner)
			if err != nil {
				return nil, err
			}
			return prefixed{Engine: e, prefix: cfg.Options["prefix"].(string)}, nil
		},
	}
	opt := layer0.WithEngineKind("prefixed", kind)
	cfg := &layer0.Config{
		Engines: map[string]layer0.EngineConfig{"p": {Kind: "prefixed", Options: map[string]any{"prefix": 42}}},
		Models:  map[string]layer0.Model{"p": {Engines: []string{"p"}}},
	}
	_, err := layer0.New(cfg, opt)
	fmt.Println(err)
	cfg.Engines["p"] = layer0.EngineConfig{Kind: "prefixed", Options: map[string]any{"prefix": "> "}}
	g, err := layer0.New(cfg, opt)
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	var c layer0.Collector
	req := &layer0.Request{Model: "p", MaxTokens: 16, Messages: []layer0.Message{layer0.TextMessage(layer0.RoleUser, "hello")}}
	if err := g.Do(context.Background(), req, &c); err != nil {
		log.Fatal(err)
	}
	fmt.Println(c.Response.Content[0].Text)
	// Output:
	// layer0: engines.p.options: prefix: a string is required
	// > hello
}

// prefixed decorates an engine: it puts its prefix before the first text delta.
type prefixed struct {
	layer0.Engine
	prefix string
}

func (p prefixed) Generate(ctx context.Context, req *layer0.Request, sink layer0.Sink) error {
	return p.Engine.Generate(ctx, req, &prefixSink{Sink: sink, prefix: p.prefix})
}

// prefixSink adds prefix to the first text delta that passes through it.
type prefixSink struct {
	layer0.Sink
	prefix string
}

func (s *prefixSink) Send(ev *layer0.Event) error {
	if ev.Kind == layer0.EventTextDelta && s.prefix != "" {
		e := *ev
		e.Text, s.prefix = s.prefix+e.Text, ""
		return s.Sink.Send(&e)
	}
	return s.Sink.Send(ev)
}

// bySize is a Picker: a request whose input is longer than limit tokens goes to the replica
// named big, the others to the least loaded of the rest.
type bySize struct {
	big   string
	limit int
}

func (p bySize) Pick(req *layer0.PickRequest, replicas []layer0.ReplicaLoad) int {
	best := -1
	for i, r := range replicas {
		if r.Name == p.big {
			if req.InputTokens > p.limit {
				return i
			}
			continue
		}
		if best < 0 || r.Outstanding < replicas[best].Outstanding {
			best = i
		}
	}
	if best < 0 {
		return 0 // big is the only replica that can take it now
	}
	return best
}

// WithPicker plugs in a replica picker of the application's own, which the configuration names
// like a built-in one (routing.picker, or a model's routing.picker); a name that is neither
// built in nor registered is refused. The answer's X-Layer0-Engine header says which replica
// served.
func ExampleWithPicker() {
	sim := layer0.EngineConfig{Kind: layer0.KindSim, Sim: layer0.Sim{Mode: "echo"}}
	cfg := &layer0.Config{
		Engines: map[string]layer0.EngineConfig{"small": sim, "big": sim},
		Models:  map[string]layer0.Model{"m": {Engines: []string{"small", "big"}}},
		Routing: layer0.Routing{Picker: "by_size"},
	}
	_, err := layer0.New(cfg)
	fmt.Println(err)
	g, err := layer0.New(cfg, layer0.WithPicker("by_size", func(model string) layer0.Picker {
		return bySize{big: "big", limit: 20}
	}))
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	srv := httptest.NewServer(g)
	defer srv.Close()
	for _, prompt := range []string{"Hi", strings.Repeat("A much longer question. ", 10)} {
		body := fmt.Sprintf(`{"model":"m","max_tokens":4,"messages":[{"role":"user","content":%q}]}`, prompt)
		resp, err := http.Post(srv.URL+"/v1/messages", "application/json", strings.NewReader(body))
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("X-Layer0-Engine"))
	}
	// Output:
	// layer0: routing.picker: unknown picker "by_size" (want p2c, round_robin, prefix or sticky)
	// 200 small
	// 200 big
}

// countingStore is a LimitStore that keeps the counters in the default memory store and counts
// the rate cells' takes.
type countingStore struct {
	layer0.LimitStore
	takes *int
}

func (s countingStore) Rate(id string) layer0.RateCell {
	return countingCell{RateCell: s.LimitStore.Rate(id), takes: s.takes}
}

type countingCell struct {
	layer0.RateCell
	takes *int
}

func (c countingCell) Take(ctx context.Context, now time.Time, r layer0.LimitRate, cost int64) (layer0.LimitStatus, bool, error) {
	*c.takes++ // the example makes one request at a time
	return c.RateCell.Take(ctx, now, r, cost)
}

// WithLimitStore keeps the rate limits' counters where the application says — a database,
// another shared store — instead of in memory or Redis. Here the store counts the takes of a
// global limit of one request a minute: the second request is refused.
func ExampleWithLimitStore() {
	var takes int
	cfg := &layer0.Config{
		Engines: map[string]layer0.EngineConfig{"sim": {Kind: layer0.KindSim, Sim: layer0.Sim{Mode: "echo"}}},
		Models:  map[string]layer0.Model{"sim": {Engines: []string{"sim"}}},
		Limits:  layer0.Limits{Global: layer0.Rates{RequestsPerMinute: 1}},
	}
	g, err := layer0.New(cfg, layer0.WithLimitStore(countingStore{LimitStore: layer0.NewMemoryLimitStore(), takes: &takes}))
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	for range 2 {
		var c layer0.Collector
		req := &layer0.Request{Model: "sim", MaxTokens: 4, Messages: []layer0.Message{layer0.TextMessage(layer0.RoleUser, "hi")}}
		var e *layer0.Error
		if err := g.Do(context.Background(), req, &c); errors.As(err, &e) {
			fmt.Println("refused:", e.Status())
		} else {
			fmt.Println("served:", c.Response.Stop)
		}
	}
	fmt.Println("takes:", takes)
	// Output:
	// served: end_turn
	// refused: 429
	// takes: 2
}

// PassThrough keeps the pass-through path of a built-in engine that an application's engine
// wraps: a client that speaks the engine's format gets the engine's own bytes (here its
// system_fingerprint, which the gateway's canonical answer has no field for), and the wrapper's
// Generate serves the clients of other formats. The engine is an OpenAI-compatible server on
// loopback.
func ExamplePassThrough() {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c1","object":"chat.completion","model":"llama","system_fingerprint":"fp_1",`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":"Hello."},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`)
	}))
	defer up.Close()
	var generated int
	kind := layer0.EngineKind{Build: func(name string, cfg layer0.EngineConfig) (layer0.Engine, error) {
		cfg.Kind, cfg.Options = layer0.KindOpenAI, nil
		inner, err := layer0.NewBuiltinEngine(name, cfg)
		if err != nil {
			return nil, err
		}
		return layer0.PassThrough(counting{Engine: inner, n: &generated}, inner), nil
	}}
	g, err := layer0.New(&layer0.Config{
		Engines: map[string]layer0.EngineConfig{"gpu": {Kind: "counted", URL: up.URL}},
		Models:  map[string]layer0.Model{"llama": {Engines: []string{"gpu"}}},
	}, layer0.WithEngineKind("counted", kind))
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	srv := httptest.NewServer(g)
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"llama","messages":[{"role":"user","content":"Hi"}]}`))
	if err != nil {
		log.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, strings.Contains(string(b), `"system_fingerprint":"fp_1"`), "generated:", generated)
	resp, err = http.Post(srv.URL+"/v1/messages", "application/json",
		strings.NewReader(`{"model":"llama","max_tokens":8,"messages":[{"role":"user","content":"Hi"}]}`))
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "generated:", generated)
	// Output:
	// 200 true generated: 0
	// 200 generated: 1
}

// counting decorates an engine: it counts the requests it generates (one at a time here).
type counting struct {
	layer0.Engine
	n *int
}

func (c counting) Generate(ctx context.Context, req *layer0.Request, sink layer0.Sink) error {
	*c.n++
	return c.Engine.Generate(ctx, req, sink)
}
