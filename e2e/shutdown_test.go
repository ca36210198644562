package e2e

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/syncbuf"
)

// TestShutdownEndsStreamsWithAnError stops a server whose drain time runs out while streams are
// still going: each stream must end with an error event (not a silent cut) and be logged.
func TestShutdownEndsStreamsWithAnError(t *testing.T) {
	var access syncbuf.Buffer
	g, err := layer0.New(parseConfig(t, `
engines:
  slow: {kind: sim, sim: {inter_token_latency: 20ms}}
models:
  slow: {engines: [slow]}
`), layer0.WithAccessLog(&access))
	if err != nil {
		t.Fatal(err)
	}
	srv := server.HTTPServer(g, server.ListenOptions{ReadHeaderTimeout: 5 * time.Second})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		ln, err := server.Listen("127.0.0.1:0", server.ConnLimit{})
		if err != nil {
			done <- err
			return
		}
		done <- server.Serve(ctx, srv, ln, 200*time.Millisecond, func(a net.Addr) { addrc <- a.String() })
	}()
	c := anthropicClient("http://" + <-addrc)

	const n = 5
	results := make(chan error, n)
	started := make(chan struct{}, n)
	for range n {
		go func() {
			s := c.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{
				Model: "slow", MaxTokens: 2000, Messages: userText("a very long answer please"),
			})
			first := true
			for s.Next() {
				if first && s.Current().Type == "content_block_delta" {
					first = false
					started <- struct{}{}
				}
			}
			results <- s.Err()
		}()
	}
	for range n {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("streams did not start")
		}
	}
	stop() // SIGTERM
	for range n {
		select {
		case err := <-results:
			if err == nil || !strings.Contains(err.Error(), "shutting down") {
				t.Errorf("stream ended with %v, want the shutdown error", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a stream did not end")
		}
	}
	if err := <-done; !errors.Is(err, server.ErrDrainTimeout) {
		t.Errorf("Serve: got %v, want ErrDrainTimeout", err)
	}
	g.Close() // writes the queued access log records
	if got := strings.Count(access.String(), `"error_type":"api_error"`); got != n {
		t.Errorf("access log: got %d records of ended streams, want %d:\n%s", got, n, access.String())
	}
}
