package layer0_test

import (
	"context"
	"fmt"
	"log"
	"strings"

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
