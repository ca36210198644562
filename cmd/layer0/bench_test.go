package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0/internal/bench"
	"github.com/layer0ai/layer0/internal/syncbuf"
	"github.com/layer0ai/layer0/internal/testcert"
)

func TestRunBench(t *testing.T) {
	up, err := bench.NewUpstream(bench.UpstreamConfig{Tokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = up.Serve(ln) }()
	defer up.Close()
	url := "http://" + ln.Addr().String()

	var out, errOut bytes.Buffer
	err = runBench([]string{"--url", url, "--format", "binary", "--binary-version", "2", "--requests", "5",
		"--conns", "2", "--header", "X-Test: 1", "--json", "--progress", "off"}, &out, &errOut)
	if err != nil {
		t.Fatalf("runBench: %v (stderr %s)", err, errOut.String())
	}
	var rep bench.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("output is not a JSON report: %v\n%s", err, out.String())
	}
	if rep.OK != 5 || rep.Tokens != 20 || rep.BinaryMode != "v2" || rep.Connections != 2 {
		t.Errorf("got ok %d tokens %d binary %q conns %d; want 5, 20, v2, 2", rep.OK, rep.Tokens, rep.BinaryMode, rep.Connections)
	}

	out.Reset()
	if err := runBench([]string{"--url", url, "--rate", "100", "--requests", "3", "--stream"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "open loop at 100 req/s") {
		t.Errorf("text report lacks the load line:\n%s", out.String())
	}
}

func TestRunBenchFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--format", "xml"},
		{"--http", "4"},
		{"--http", "3", "--url", "http://127.0.0.1:1"},
		{"--progress", "sometimes"},
		{"--header", "novalue"},
		{"extra"},
		{"--binary-version", "3", "--format", "binary"},
	} {
		var out, errOut bytes.Buffer
		if err := runBench(args, &out, &errOut); err == nil {
			t.Errorf("runBench(%q): got no error, want one", args)
		}
	}
}

func TestBenchHeaderFlag(t *testing.T) {
	var h benchHeaderFlag
	for _, s := range []string{"X-A: 1", "x-a:2", "Authorization: Bearer k"} {
		if err := h.Set(s); err != nil {
			t.Fatal(err)
		}
	}
	want := http.Header{"X-A": {"1", "2"}, "Authorization": {"Bearer k"}}
	if diff := cmp.Diff(want, http.Header(h)); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}
}

// TestRunBenchHTTP3 runs `layer0 bench` over HTTP/1.1 (TLS), HTTP/2 and HTTP/3 against the real
// serve command with server.tls and server.http3 (one port, TCP and UDP): every run succeeds on
// the protocol asked for, and counts bytes on the wire both ways — more than the bodies received.
func TestRunBenchHTTP3(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, _ := testcert.Write(t, dir)
	cfgFile := filepath.Join(dir, "layer0.yaml")
	cfg := fmt.Sprintf("server:\n  addr: 127.0.0.1:0\n  http3: true\n  tls: {cert_file: %s, key_file: %s}\n"+
		"engines:\n  sim: {kind: sim, sim: {inter_token_latency: 0s}}\nmodels:\n  sim: {engines: [sim]}\n", certFile, keyFile)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var sout, serr syncbuf.Buffer
	done := make(chan error, 1)
	go func() { done <- runServe([]string{"--config", cfgFile}, &sout, &serr) }()
	defer stopServe(t, done)
	listening := regexp.MustCompile(`listening on (https://[0-9.]+:[0-9]+)`)
	var url string
	for deadline := time.Now().Add(10 * time.Second); ; {
		if m := listening.FindStringSubmatch(sout.String()); m != nil && strings.Contains(sout.String(), "HTTP/3 on udp") {
			url = m[1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no start message; stdout %q stderr %q", sout.String(), serr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}

	const requests, tokens = 6, 20
	for _, tt := range []struct {
		http, format string
		stream       bool
	}{
		{"1.1", "anthropic", true}, {"2", "anthropic", true}, {"3", "anthropic", true},
		{"3", "anthropic", false}, {"3", "binary", true},
	} {
		var out, errOut bytes.Buffer
		args := []string{"--url", url, "--insecure", "--http", tt.http, "--format", tt.format, "--model", "sim",
			"--max-tokens", fmt.Sprint(tokens), "--requests", fmt.Sprint(requests), "--rate", "200", "--timeout", "10s",
			"--json", "--progress", "off"}
		if tt.stream {
			args = append(args, "--stream")
		}
		if err := runBench(args, &out, &errOut); err != nil {
			t.Fatalf("--http %s: %v (stderr %s)", tt.http, err, errOut.String())
		}
		var rep bench.Report
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("--http %s: output is not a JSON report: %v\n%s", tt.http, err, out.String())
		}
		if rep.HTTP != tt.http || rep.OK != requests || rep.Tokens != requests*tokens {
			t.Errorf("--http %s %s stream=%v: got HTTP/%s, %d ok, %d tokens (%v %v); want %d ok, %d tokens",
				tt.http, tt.format, tt.stream, rep.HTTP, rep.OK, rep.Tokens, rep.Errors, rep.ErrorSamples, requests, requests*tokens)
		}
		if w := rep.Wire; w.Sent == 0 || w.Received <= rep.Bytes || w.SentPerRequest <= 0 || w.PerToken <= 0 {
			t.Errorf("--http %s: wire %+v with %d body bytes, want both directions counted, more than the bodies", tt.http, w, rep.Bytes)
		}
	}
}

// A run whose requests fail exits 1 after printing its report, saying how many failed and why:
// a refused connection, and a server that answers 404 to every request. --allow-errors keeps
// exit 0 for the second (some requests were sent), never for a run that sent none.
func TestBenchExitsNonZeroOnFailures(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + closed.Addr().String()
	closed.Close()
	notFound := http.NewServeMux()
	srv := &http.Server{Handler: notFound, ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	for _, tc := range []struct {
		url, want string
	}{
		{refused, "4 of 4 requests failed, most with transport"},
		{"http://" + ln.Addr().String(), "4 of 4 requests failed, most with status_404"},
	} {
		var stdout, stderr bytes.Buffer
		code := run([]string{"bench", "--url", tc.url, "--requests", "4", "--progress", "off", "--timeout", "5s"}, &stdout, &stderr)
		if code != 1 || !strings.Contains(stderr.String(), tc.want) || !strings.Contains(stdout.String(), "failed") {
			t.Errorf("bench %s: exit %d, stderr %q, stdout %q; want 1, %q and the report", tc.url, code, stderr.String(), stdout.String(), tc.want)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"bench", "--url", "http://" + ln.Addr().String(), "--requests", "2", "--progress", "off", "--allow-errors"}, &stdout, &stderr); code != 0 {
		t.Errorf("bench --allow-errors: exit %d, stderr %q; want 0", code, stderr.String())
	}
}
