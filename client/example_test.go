package client_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/client"
)

// A request is built from the client package alone: the roles, block types and TextMessage are
// re-exported, so a program needs no other package of layer0 to ask a question.
func ExampleClient_Message() {
	// A gateway on loopback whose sim repeats the user's message (a real one is a URL away).
	g := echoGateway()
	defer g.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: g}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	defer srv.Close()

	c, err := client.New(client.Options{BaseURL: "http://" + ln.Addr().String(), Protocol: client.Binary2})
	if err != nil {
		log.Fatal(err)
	}
	resp, err := c.Message(context.Background(), &client.Request{
		Model:     "sim",
		MaxTokens: 64,
		Messages:  []client.Message{client.TextMessage(client.RoleUser, "Hello from the client package.")},
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, b := range resp.Content {
		if b.Type == client.BlockText {
			fmt.Println(b.Text)
		}
	}
	fmt.Println("stop:", resp.Stop, resp.Stop == client.StopEndTurn)
	// Output:
	// Hello from the client package.
	// stop: end_turn true
}

// A stream is read event by event with the client's own names for the event kinds; the gateway
// here is served with layer0's public Serve on a loopback listener, as an application would.
func ExampleStream_Events() {
	g := echoGateway()
	defer g.Close()
	ln, err := g.Listen("127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- g.Serve(ctx, ln, nil, nil) }()
	defer func() { stop(); <-served }()

	c, err := client.New(client.Options{BaseURL: "http://" + ln.Addr().String(), Protocol: client.SSE})
	if err != nil {
		log.Fatal(err)
	}
	s, err := c.Stream(context.Background(), &client.Request{
		Model:     "sim",
		MaxTokens: 64,
		System:    []client.Block{{Type: client.BlockText, Text: "Repeat the user."}},
		Messages:  []client.Message{client.TextMessage(client.RoleUser, "Streamed, event by event.")},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	var text string
	for ev, err := range s.Events() {
		if err != nil {
			log.Fatal(err)
		}
		switch ev.Kind {
		case client.EventTextDelta:
			text += ev.Text
		case client.EventStop:
			fmt.Println(text)
			fmt.Println("stop:", ev.Stop == client.StopEndTurn)
		}
	}
	// Output:
	// Streamed, event by event.
	// stop: true
}

// echoGateway is a gateway whose sim repeats the user's message.
func echoGateway() *layer0.Gateway {
	g, err := layer0.New(&layer0.Config{
		Engines: map[string]layer0.EngineConfig{"sim": {Kind: layer0.KindSim, Sim: layer0.Sim{Mode: "echo"}}},
		Models:  map[string]layer0.Model{"sim": {Engines: []string{"sim"}}},
	})
	if err != nil {
		log.Fatal(err)
	}
	return g
}
