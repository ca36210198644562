package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/testcert"
)

// startTLSGateway serves g's handler over TLS the way `layer0 serve` does, with HTTP/3 on the
// same port when withH3, and returns the https URL and the roots that trust its certificate.
func startTLSGateway(t *testing.T, g *gateway, withH3 bool) (string, *x509.CertPool) {
	t.Helper()
	certFile, keyFile, roots := testcert.Write(t, t.TempDir())
	srv := server.HTTPServer(g.h, server.ListenOptions{ReadHeaderTimeout: 5 * time.Second})
	if err := server.EnableTLS(srv, certFile, keyFile, nil); err != nil {
		t.Fatal(err)
	}
	ln, err := server.Listen("127.0.0.1:0", server.ConnLimit{Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	var h3 *server.HTTP3
	if withH3 {
		if h3, err = server.ListenHTTP3(srv, ln); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	n := 1
	go func() { done <- server.Serve(ctx, srv, ln, time.Second, nil) }()
	if h3 != nil {
		n++
		go func() { done <- h3.Serve(ctx, time.Second) }()
	}
	t.Cleanup(func() {
		cancel()
		for range n {
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		}
	})
	return "https://" + ln.Addr().String(), roots
}

// streamText streams a question and returns the answer's text and the HTTP major version.
func streamText(t *testing.T, c *Client, p Protocol) (string, int) {
	t.Helper()
	model := "claude-3-5-sonnet-20240620"
	if p == Binary1 {
		model = "claude35sonnet20240620"
	}
	s, err := c.Stream(context.Background(), userRequest(model, "Tell me about gateways.", 40))
	if err != nil {
		t.Fatalf("%v: %v", p, err)
	}
	var col llm.Collector
	for ev, err := range s.Events() {
		if err != nil {
			t.Fatalf("%v: %v", p, err)
		}
		col.Send(ev)
	}
	r := col.Response
	if r.Usage.OutputTokens == 0 || text(&r) == "" {
		t.Errorf("%v: incomplete answer %+v", p, r)
	}
	return text(&r), s.HTTPResponse().ProtoMajor
}

// Every protocol streams over HTTP/3 (on: no fallback, so nothing else could have carried it),
// and the answers are the ones HTTP/2 gives.
func TestHTTP3Streams(t *testing.T) {
	g := startGateway(t)
	url, roots := startTLSGateway(t, g, true)
	for _, p := range allProtocols {
		h2, err := New(Options{BaseURL: url, Protocol: p, TLSConfig: &tls.Config{RootCAs: roots}, HTTP3: HTTP3Off})
		if err != nil {
			t.Fatal(err)
		}
		want, major := streamText(t, h2, p)
		if major != 2 {
			t.Errorf("%v with HTTP3Off: HTTP/%d, want 2", p, major)
		}
		h2.CloseIdleConnections()
		c, err := New(Options{BaseURL: url, Protocol: p, TLSConfig: &tls.Config{RootCAs: roots}, HTTP3: HTTP3On})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // a fresh connection, then the same one again
			got, major := streamText(t, c, p)
			if major != 3 {
				t.Errorf("%v with HTTP3On: HTTP/%d, want 3", p, major)
			}
			if got != want || got == "" {
				t.Errorf("%v over HTTP/3: got %q, want %q", p, got, want)
			}
		}
		c.CloseIdleConnections()
	}
}

// With the gateway's UDP port closed, auto falls back to HTTP/2 within the handshake timeout.
func TestHTTP3AutoFallsBack(t *testing.T) {
	g := startGateway(t)
	url, roots := startTLSGateway(t, g, false)
	const timeout = 300 * time.Millisecond
	c, err := New(Options{BaseURL: url, Protocol: Binary2Text, TLSConfig: &tls.Config{RootCAs: roots},
		HTTP3: HTTP3Auto, HTTP3Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseIdleConnections()
	start := time.Now()
	if _, major := streamText(t, c, Binary2Text); major != 2 {
		t.Errorf("fallback over HTTP/%d, want 2", major)
	}
	if took := time.Since(start); took > timeout+2*time.Second {
		t.Errorf("the first answer took %v, want about the handshake timeout %v", took, timeout)
	}
	start = time.Now()
	if _, major := streamText(t, c, SSE); major != 2 {
		t.Errorf("second request over HTTP/%d, want 2", major)
	}
	if took := time.Since(start); took >= timeout {
		t.Errorf("the second request took %v: it waited for HTTP/3 again", took)
	}
}

func TestHTTP3FromEnv(t *testing.T) {
	t.Setenv("LAYER0_HTTP3", "sometimes")
	if _, err := New(Options{BaseURL: "https://127.0.0.1:1"}); err == nil {
		t.Error("LAYER0_HTTP3=sometimes: got nil error")
	}
	t.Setenv("LAYER0_HTTP3", "auto")
	c, err := New(Options{BaseURL: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.hc.Transport.(interface{ UsesHTTP3(string) bool }); !ok {
		t.Errorf("LAYER0_HTTP3=auto: transport %T is not the HTTP/3 one", c.hc.Transport)
	}
}
