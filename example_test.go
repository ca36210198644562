package layer0_test

import (
	"context"
	"fmt"
	"log"

	"github.com/layer0ai/layer0"
)

// echoGateway returns a gateway whose model "sim" answers with the last user message (the sim
// engine's echo mode), so that the examples' output is predictable.
func echoGateway() *layer0.Gateway {
	cfg := layer0.DefaultConfig()
	e := cfg.Engines["sim"]
	e.Sim.Mode = "echo"
	cfg.Engines["sim"] = e
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
