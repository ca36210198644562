package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/client"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/testcert"
)

// TestShutdownEndsHTTP3StreamsWithAnError stops a server with HTTP/3 whose drain time runs out
// while streams over QUIC are still going: each must end with the shutdown error, in the stream.
func TestShutdownEndsHTTP3StreamsWithAnError(t *testing.T) {
	g, err := layer0.New(parseConfig(t, `
engines:
  slow: {kind: sim, sim: {inter_token_latency: 20ms}}
models:
  slow: {engines: [slow]}
`))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	certFile, keyFile, roots := testcert.Write(t, t.TempDir())
	srv := server.HTTPServer(g, server.ListenOptions{ReadHeaderTimeout: 5 * time.Second})
	if err := server.EnableTLS(srv, certFile, keyFile, nil); err != nil {
		t.Fatal(err)
	}
	ln, err := g.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h3, err := server.ListenHTTP3(srv, ln)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	const drain = 200 * time.Millisecond
	tcpDone, h3Done := make(chan error, 1), make(chan error, 1)
	go func() { tcpDone <- server.Serve(ctx, srv, ln, drain, nil) }()
	go func() { h3Done <- h3.Serve(ctx, drain) }()

	protocols := []client.Protocol{client.SSE, client.Binary2Text}
	results := make(chan error, len(protocols))
	started := make(chan struct{}, len(protocols))
	for _, p := range protocols {
		c, err := client.New(client.Options{BaseURL: "https://" + ln.Addr().String(), Protocol: p,
			TLSConfig: &tls.Config{RootCAs: roots}, HTTP3: client.HTTP3On})
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.Stream(context.Background(), &llm.Request{Model: "slow", MaxTokens: 2000,
			Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "a very long answer please"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.HTTPResponse().ProtoMajor; got != 3 {
			t.Fatalf("%v: HTTP/%d, want 3", p, got)
		}
		go func() {
			first := true
			var last error
			for ev, err := range s.Events() {
				if err != nil {
					last = err
					break
				}
				if first && ev.Kind == llm.EventTextDelta {
					first = false
					started <- struct{}{}
				}
			}
			results <- last
		}()
	}
	for range protocols {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("streams did not start")
		}
	}
	stop() // SIGTERM
	for range protocols {
		select {
		case err := <-results:
			if err == nil || !strings.Contains(err.Error(), "shutting down") {
				t.Errorf("a stream over HTTP/3 ended with %v, want the shutdown error", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a stream did not end")
		}
	}
	// The TCP listener had nothing running; HTTP/3 had to end its streams.
	for _, w := range []struct {
		name string
		c    chan error
		want error
	}{{"TCP", tcpDone, nil}, {"HTTP/3", h3Done, server.ErrDrainTimeout}} {
		select {
		case err := <-w.c:
			if (w.want == nil && err != nil) || (w.want != nil && !errors.Is(err, w.want)) {
				t.Errorf("%s Serve: got %v, want %v", w.name, err, w.want)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("the %s listener did not stop", w.name)
		}
	}
}
