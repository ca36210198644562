package layer0_test

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/config"
	l0 "github.com/layer0ai/layer0/internal/engine/layer0"
	"github.com/layer0ai/layer0/internal/h3"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/testcert"
	"github.com/layer0ai/layer0/internal/upstream"
)

// TestPeerOverHTTP3 runs the engine against a real layer0 serving TLS and HTTP/3, with
// LAYER0_HTTP3=on (no fallback, so every answer came over QUIC): the binary protocol and the
// JSON/SSE API both stream whole answers.
func TestPeerOverHTTP3(t *testing.T) {
	cfg, err := config.Parse([]byte("engines:\n  sim: {kind: sim}\nmodels:\n  sim: {engines: [sim]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := layer0.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	certFile, keyFile, roots := testcert.Write(t, t.TempDir())
	srv := server.HTTPServer(g, server.ListenOptions{ReadHeaderTimeout: 5 * time.Second})
	if err := server.EnableTLS(srv, certFile, keyFile, nil); err != nil {
		t.Fatal(err)
	}
	ln, err := server.Listen("127.0.0.1:0", server.ConnLimit{Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	hs, err := server.ListenHTTP3(srv, ln)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- server.Serve(ctx, srv, ln, time.Second, nil) }()
	go func() { done <- hs.Serve(ctx, time.Second) }()
	defer func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		}
	}()
	getenv := func(k string) string {
		if k == h3.EnvVar {
			return "on"
		}
		return ""
	}
	for _, protocol := range []string{l0.ProtocolBinary, l0.ProtocolJSON} {
		e, err := l0.New("core", config.Engine{Kind: config.KindLayer0, URL: "https://" + ln.Addr().String(),
			Timeouts: config.Timeouts{Connect: time.Second, FirstByte: 5 * time.Second, Idle: 5 * time.Second, Total: 10 * time.Second}},
			l0.Options{Protocol: protocol, Upstream: upstream.Options{Getenv: getenv, TLSConfig: &tls.Config{RootCAs: roots}}})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			req := &llm.Request{Model: "sim", MaxTokens: 50, Stream: true,
				Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "Tell me about QUIC."}}}}}
			var c llm.Collector
			if err := e.Generate(context.Background(), req, &c); err != nil {
				t.Fatalf("%s request %d: %v", protocol, i, err)
			}
			if r := c.Response; r.Usage.OutputTokens == 0 || len(r.Content) == 0 || r.Content[0].Text == "" {
				t.Errorf("%s request %d: got %+v", protocol, i, r)
			}
		}
		if got, want := e.Binary(), protocol == l0.ProtocolBinary; got != want {
			t.Errorf("%s: binary %v, want %v", protocol, got, want)
		}
		e.Client().CloseIdle()
	}
}
