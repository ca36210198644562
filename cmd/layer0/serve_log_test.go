package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/syncbuf"
	"github.com/layer0ai/layer0/internal/testcert"
)

// waitUntil polls cond every 10ms for up to 10s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func fileLines(path string) []string {
	b, _ := os.ReadFile(path)
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// TestServeAccessLogFile starts the real command with log.access_log.path over TLS: API
// requests are logged to the file and health checks are not; after the file is renamed and the
// process gets SIGUSR1 the next record goes to a new file at the path; and everything on stderr
// is JSON, including net/http's own error for a failed TLS handshake.
func TestServeAccessLogFile(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, roots := testcert.Write(t, dir)
	logFile := filepath.Join(dir, "access.log")
	cfgFile := filepath.Join(dir, "layer0.yaml")
	cfg := fmt.Sprintf("server:\n  addr: 127.0.0.1:0\n  tls: {cert_file: %s, key_file: %s}\nlog:\n  access_log: {path: %s}\n",
		certFile, keyFile, logFile)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut syncbuf.Buffer
	done := make(chan error, 1)
	go func() { done <- runServe([]string{"--config", cfgFile}, &out, &errOut) }()
	listening := regexp.MustCompile(`listening on https://([0-9.]+:[0-9]+)`)
	var addr string
	waitUntil(t, "the start message", func() bool {
		m := listening.FindStringSubmatch(out.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	defer hc.CloseIdleConnections()
	getOK := func(path string) {
		t.Helper()
		resp, err := hc.Get("https://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
	}
	getOK("/healthz")
	getOK("/readyz")
	getOK("/v1/models")
	waitUntil(t, "the first record in the file", func() bool { return strings.Contains(fileLines(logFile)[0], `"path":"/v1/models"`) })

	if err := os.Rename(logFile, logFile+".1"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the reopen", func() bool { return strings.Contains(errOut.String(), `"msg":"access log reopened"`) })
	getOK("/v1/models/sim")
	waitUntil(t, "the second record in the new file", func() bool { return strings.Contains(fileLines(logFile)[0], `"path":"/v1/models/sim"`) })

	// A client that is not speaking TLS: net/http logs the handshake error through the logger.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")) //nolint:errcheck // the server drops it
	c.SetReadDeadline(time.Now().Add(5 * time.Second))           //nolint:errcheck
	c.Read(make([]byte, 512))                                    //nolint:errcheck // until the server closes
	c.Close()
	waitUntil(t, "net/http's handshake error", func() bool { return strings.Contains(errOut.String(), "TLS handshake error") })

	stopServe(t, done)
	if old := fileLines(logFile + ".1"); len(old) != 1 || !strings.Contains(old[0], `"path":"/v1/models"`) {
		t.Errorf("the rotated file: %q, want the first API request alone (no health checks)", old)
	}
	if cur := fileLines(logFile); len(cur) != 1 {
		t.Errorf("the new file: %q, want the second API request alone", cur)
	}
	for line := range strings.Lines(errOut.String()) {
		if !json.Valid([]byte(line)) {
			t.Errorf("stderr line not JSON: %q", line)
		}
	}
	if strings.Contains(errOut.String(), `"msg":"request"`) {
		t.Errorf("access records on stderr with a file configured:\n%s", errOut.String())
	}
}

// TestServeRedisDownLogsJSON starts the real command with the limits on a Redis that is not
// there (a loopback port nothing listens on): the Redis client's own complaints (a failed dial)
// reach stderr as JSON records of the process's logger, like every other line.
func TestServeRedisDownLogsJSON(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "layer0.yaml")
	cfg := fmt.Sprintf("server:\n  addr: 127.0.0.1:0\nstore: {kind: redis, url: \"redis://%s\"}\nlimits:\n  global: {requests_per_minute: 100}\n", dead)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut syncbuf.Buffer
	done := make(chan error, 1)
	go func() { done <- runServe([]string{"--config", cfgFile}, &out, &errOut) }()
	waitUntil(t, "the start message", func() bool { return strings.Contains(out.String(), "listening on") })
	waitUntil(t, "the Redis client's failed dial on stderr", func() bool { return strings.Contains(errOut.String(), "failed to dial") })
	stopServe(t, done)
	for line := range strings.Lines(errOut.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("stderr line not JSON: %q", line)
		} else if strings.Contains(line, "failed to dial") && (rec["msg"] != "redis client" || rec["level"] != "WARN") {
			t.Errorf("the Redis client's line: %q, want msg \"redis client\" at WARN", line)
		}
	}
}
