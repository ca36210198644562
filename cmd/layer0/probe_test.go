package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/probe"
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/testcert"
)

// `layer0 probe` against layer0's TLS listener prints the negotiated ALPN and the SETTINGS, and
// the request of each API; --json carries the same for scripts.
func TestProbeCommandTLS(t *testing.T) {
	g, err := layer0.New(layer0.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile, _ := testcert.Write(t, dir)
	srv := server.HTTPServer(g, server.ListenOptions{ReadHeaderTimeout: 30 * time.Second})
	if err := server.EnableTLS(srv, certFile, keyFile, nil); err != nil {
		t.Fatal(err)
	}
	ln, err := g.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Serve(ctx, srv, ln, time.Second, nil) }()
	t.Cleanup(func() { stop(); <-done; g.Close() })
	url := "https://" + ln.Addr().String()

	var stdout, stderr bytes.Buffer
	if code := run([]string{"probe", url, "--ca", certFile, "--timeout", "20s"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr.String(), stdout.String())
	}
	out := stdout.String()
	for _, want := range []string{"alpn      offered anthropic-v3, h2, http/1.1 → negotiated anthropic-v3",
		"http2     SETTINGS over tls", "ENABLE_CONNECT_PROTOCOL  1", "MAX_HEADER_LIST_SIZE     65536",
		"INITIAL_WINDOW_SIZE      2097152", "http3     not advertised (no Alt-Svc)",
		"anthropic POST /v1/messages 200 HTTP/2.0", "openai    POST /v1/chat/completions 200 HTTP/2.0",
		"binary    POST /v1/messages 200 HTTP/2.0", "X-Request-Id: L0-"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	stdout.Reset()
	var r probe.Report
	if code := run([]string{"probe", "--json", "--insecure", url}, &stdout, &stderr); code != 0 ||
		json.Unmarshal(stdout.Bytes(), &r) != nil || r.TLS == nil || r.TLS.ALPN != "anthropic-v3" || r.TLS.Verified || len(r.APIs) != 3 {
		t.Fatalf("--json: exit %d: %s %s", code, stdout.String(), stderr.String())
	}

	// Without the authority the handshake fails: the report says so, and the exit code is 1.
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"probe", url}, &stdout, &stderr); code != 1 || !strings.Contains(stdout.String(), "tls       handshake failed") ||
		!strings.Contains(stderr.String(), "layer0: probe: TLS handshake: ") {
		t.Errorf("unknown authority: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	if code := run([]string{"probe", url, "--ca", filepath.Join(dir, "missing.pem")}, &stdout, &stderr); code != 1 {
		t.Errorf("--ca of a missing file: exit %d", code)
	}
}

// The key taken from the environment is never printed, not even as a flag's default in --help.
func TestHelpDoesNotPrintTheKey(t *testing.T) {
	t.Setenv(apiKeyEnv, "l0-secret-from-env")
	for _, cmd := range []string{"probe", "debug", "bench"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{cmd, "--help"}, &stdout, &stderr); code != 0 ||
			strings.Contains(stdout.String()+stderr.String(), "l0-secret-from-env") || !strings.Contains(stdout.String(), "$LAYER0_API_KEY") {
			t.Errorf("%s --help: exit %d, the key printed or its variable not named:\n%s", cmd, code, stdout.String())
		}
	}
}
