package layer0_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/client"
	"github.com/layer0ai/layer0/internal/testcert"
)

// TestListenAndServe serves a gateway with the public API alone, as an application embedding
// layer0 would: TLS with HTTP/3 beside it and the admin listener, all on loopback. The official
// Anthropic SDK is served over TLS and told of HTTP/3 by Alt-Svc, layer0's client gets HTTP/3,
// the admin listener answers the operator's endpoints (and the API listener no longer serves
// them), and a cancel drains: a stream still running when the drain time runs out ends with an
// error, ListenAndServe returns nil, and every listener is closed.
func TestListenAndServe(t *testing.T) {
	certFile, keyFile, roots := testcert.Write(t, t.TempDir())
	const drain = 300 * time.Millisecond
	g, err := layer0.New(&layer0.Config{
		Server: layer0.Server{Addr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", HTTP3: true, ShutdownTimeout: drain,
			TLS: layer0.TLS{CertFile: certFile, KeyFile: keyFile}},
		Engines: map[string]layer0.EngineConfig{
			"echo": {Kind: layer0.KindSim, Sim: layer0.Sim{Mode: "echo"}},
			"slow": {Kind: layer0.KindSim, Sim: layer0.Sim{InterTokenLatency: 20 * time.Millisecond}},
		},
		Models: map[string]layer0.Model{"echo": {Engines: []string{"echo"}}, "slow": {Engines: []string{"slow"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan layer0.Serving, 1)
	done := make(chan error, 1)
	go func() { done <- g.ListenAndServe(ctx, func(s layer0.Serving) { ready <- s }) }()
	var s layer0.Serving
	select {
	case s = <-ready:
	case err := <-done:
		t.Fatalf("ListenAndServe: %v before serving", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not serving after 10s")
	}
	if s.Scheme != "https" || s.HTTP3 == nil || s.Admin == nil || s.HTTP3.String() != s.Addr.String() {
		t.Fatalf("serving %+v: want https, HTTP/3 on the API port, an admin address", s)
	}
	base := "https://" + s.Addr.String()
	tlsConf := &tls.Config{RootCAs: roots}

	// The Anthropic SDK over TLS (HTTP/2 by ALPN), told of HTTP/3 by Alt-Svc.
	var raw *http.Response
	sdk := anthropic.NewClient(option.WithBaseURL(base), option.WithAPIKey("unused"), option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf, ForceAttemptHTTP2: true}}))
	msg, err := sdk.Messages.New(ctx, anthropic.MessageNewParams{Model: "echo", MaxTokens: 64,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Served by the public API."))}},
		option.WithResponseInto(&raw))
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) == 0 || msg.Content[0].Text != "Served by the public API." {
		t.Errorf("SDK answer %+v, want the echo", msg.Content)
	}
	if raw.ProtoMajor != 2 || raw.Header.Get("Alt-Svc") != s.AltSvc || !strings.HasPrefix(s.AltSvc, `h3=":`) {
		t.Errorf("SDK answer over HTTP/%d with Alt-Svc %q, want HTTP/2 and %q", raw.ProtoMajor, raw.Header.Get("Alt-Svc"), s.AltSvc)
	}

	// layer0's client over HTTP/3, with a stream that is still running at the stop.
	c, err := client.New(client.Options{BaseURL: base, Protocol: client.SSE, TLSConfig: tlsConf, HTTP3: client.HTTP3On})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := c.Stream(context.Background(), &client.Request{Model: "slow", MaxTokens: 2000,
		Messages: []client.Message{client.TextMessage(client.RoleUser, "a very long answer please")}})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if got := stream.HTTPResponse().ProtoMajor; got != 3 {
		t.Errorf("layer0's client over HTTP/%d, want 3", got)
	}

	// The operator's endpoints are on the admin listener, not on the API one.
	if code, body := get(t, http.DefaultClient, "http://"+s.Admin.String()+"/metrics"); code != 200 || !strings.Contains(body, "layer0_requests_total") {
		t.Errorf("admin /metrics: %d %.200s", code, body)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf, ForceAttemptHTTP2: true}}
	if code, _ := get(t, hc, base+"/metrics"); code != http.StatusNotFound {
		t.Errorf("API listener /metrics: %d, want 404 with an admin listener", code)
	}
	hc.CloseIdleConnections()

	cancel()
	var last error
	for _, err := range stream.Events() {
		if err != nil {
			last = err
		}
	}
	var apiErr *client.Error
	if !errors.As(last, &apiErr) {
		t.Errorf("the stream running at the stop ended with %v, want the shutdown error in the stream", last)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ListenAndServe after the drain: %v, want nil", err)
		}
	case <-time.After(drain + 10*time.Second):
		t.Fatal("ListenAndServe did not return after the drain")
	}
	for _, a := range []net.Addr{s.Addr, s.Admin} {
		if conn, err := net.DialTimeout("tcp", a.String(), time.Second); err == nil {
			conn.Close()
			t.Errorf("%v still accepts connections after ListenAndServe returned", a)
		}
	}
}

// get returns the status and body of GET url.
func get(t *testing.T, hc *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
