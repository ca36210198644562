package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	stdlog "log"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/layer0ai/layer0/internal/syncbuf"
	"github.com/layer0ai/layer0/internal/testcert"
)

// TestServeHTTP3 starts the real command with server.tls and server.http3: it says where HTTP/3
// listens, its TLS answers advertise it, a request over QUIC is served, and SIGTERM stops both.
func TestServeHTTP3(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, roots := testcert.Write(t, dir)
	cfgFile := filepath.Join(dir, "layer0.yaml")
	cfg := fmt.Sprintf("server:\n  addr: 127.0.0.1:0\n  http3: true\n  tls: {cert_file: %s, key_file: %s}\n", certFile, keyFile)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut syncbuf.Buffer
	done := make(chan error, 1)
	go func() { done <- runServe([]string{"--config", cfgFile}, &out, &errOut) }()
	listening := regexp.MustCompile(`listening on https://([0-9.]+:[0-9]+)`)
	deadline := time.Now().Add(10 * time.Second)
	var addr string
	for {
		if m := listening.FindStringSubmatch(out.String()); m != nil && strings.Contains(out.String(), "HTTP/3 on udp") {
			addr = m[1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no start message; stdout %q stderr %q", out.String(), errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A library's line through the standard log package (as QUIC's buffer warning is) is JSON.
	stdlog.Print("a library says hello")
	if !strings.Contains(errOut.String(), `"level":"WARN","msg":"a library says hello"`) {
		t.Errorf("a standard log line in the process log: %q, want a JSON record at WARN", errOut.String())
	}
	tc := &tls.Config{RootCAs: roots}
	h2 := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}
	resp, err := h2.Get("https://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	h2.CloseIdleConnections()
	if got := resp.Header.Get("Alt-Svc"); !strings.HasPrefix(got, `h3=":`+addr[strings.LastIndex(addr, ":")+1:]+`"`) {
		t.Errorf("Alt-Svc: got %q, want h3 on port of %s", got, addr)
	}
	tr := &http3.Transport{TLSClientConfig: tc}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/healthz", nil)
	resp, err = tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	tr.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 3 {
		t.Errorf("over QUIC: %s %s %q, want 200 over HTTP/3", resp.Proto, resp.Status, body)
	}
	stopServe(t, done)
}
