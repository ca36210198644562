package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/trace"
)

// Every command prints its usage on stdout with --help or -h and exits 0, without running.
func TestHelpExitsZero(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--help"}, "layer0 serve"},
		{[]string{"-h"}, "layer0 serve"},
		{[]string{"help"}, "layer0 debug REQUEST_ID"},
		{[]string{"serve", "--help"}, "usage: layer0 serve"},
		{[]string{"serve", "--config", "/nonexistent.yaml", "-h"}, "-config"},
		{[]string{"config", "check", "--help"}, "usage: layer0 config check FILE"},
		{[]string{"keys", "-h"}, "usage: layer0 keys new"},
		{[]string{"keys", "new", "--help"}, "--name NAME"},
		{[]string{"config", "--help"}, "usage: layer0 config check FILE"},
		{[]string{"config", "check", "-h"}, "usage: layer0 config check FILE"},
		{[]string{"bench", "upstream", "--help"}, "-ttft"},
		{[]string{"version", "--help"}, "usage: layer0 version"},
		{[]string{"help", "--help"}, "layer0 version"},
		{[]string{"bench", "--help"}, "-url"},
		{[]string{"bench", "upstream", "-h"}, "-tokens"},
		{[]string{"debug", "--help"}, "usage: layer0 debug REQUEST_ID"},
		{[]string{"debug", "req_1", "-h"}, "-json"},
		{[]string{"debug", "--verbose", "--help"}, "layer0 debug --verbose"},
		{[]string{"probe", "--help"}, "usage: layer0 probe URL"},
		{[]string{"probe", "https://example.test", "-h"}, "-insecure"},
		{[]string{"help"}, "layer0 probe URL"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(tc.args, &stdout, &stderr)
		if code != 0 || !strings.Contains(stdout.String(), tc.want) || stderr.Len() != 0 {
			t.Errorf("layer0 %s: exit %d, stdout %q, stderr %q; want 0 and usage with %q on stdout",
				strings.Join(tc.args, " "), code, stdout.String(), stderr.String(), tc.want)
		}
	}
}

// A usage mistake prints the usage line once, without the command's prefix, and exits 2.
func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"keys"}, {"config"}, {"debug"}, {"debug", "a", "b"}, {"debug", "--verbose"}, {"probe"}, {"probe", "a", "b"}, {"nope"}} {
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), "usage") || strings.Contains(stderr.String(), "layer0: usage") {
			t.Errorf("layer0 %s: exit %d, stderr %q; want 2 and the usage", strings.Join(args, " "), code, stderr.String())
		}
	}
}

// debugGateway serves a gateway keeping traces, whose model "chat" fails over from a primary
// answering 529, and returns the base URL of its admin listener (or of its main one when
// admin is false) after one request, and that request's id.
func debugGateway(t *testing.T, admin bool) (base, id string) {
	t.Helper()
	text := `
debug: {requests: 4}
keys:
  - {name: dbg, hash: ` + auth.HashHex("l0-dbg") + `, debug: true}
engines:
  primary: {kind: sim, sim: {fail: {status: 529}}}
  backup: {kind: sim}
models:
  chat: {engines: [primary], fallback: [backup]}
  backup: {engines: [backup]}
`
	if admin {
		text += "server: {admin_addr: 127.0.0.1:0}\n"
	}
	cfg, err := config.Parse([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	g, err := layer0.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	main, adm := httptest.NewServer(g), httptest.NewServer(g.AdminHandler())
	t.Cleanup(func() { main.Close(); adm.Close(); g.Close() })
	req, _ := http.NewRequest(http.MethodPost, main.URL+"/v1/messages",
		strings.NewReader(`{"model":"chat","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("X-Api-Key", "l0-dbg")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Layer0-Debug", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body) //nolint:errcheck // only the headers matter
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("request: %s", resp.Status)
	}
	id = resp.Header.Get("X-Layer0-Trace-Id")
	if id == "" {
		t.Fatal("no X-Layer0-Trace-Id")
	}
	if admin {
		return adm.URL, id
	}
	return main.URL, id
}

// runUntil runs the command until it succeeds (the trace is kept as the request's handler
// returns, just after the client has its answer) or a few seconds have passed.
func runUntil(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		if code == 0 || time.Now().After(deadline) {
			return stdout.String(), stderr.String(), code
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestDebugPrintsTheTrace(t *testing.T) {
	admin, id := debugGateway(t, true)
	out, errs, code := runUntil(t, "debug", id, "--url", admin)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"[DEBUG] request: " + id + " POST /v1/messages", "[DEBUG] auth: key dbg",
		"[DEBUG] attempt 1: chat on primary", "failed: ", "[DEBUG] attempt 2: backup on backup (fallback: overloaded)",
		"[DEBUG] served: backup by backup", "[DEBUG] status: 200"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(line, "[DEBUG] ") {
			t.Errorf("line %q is not one decision", line)
		}
	}

	out, errs, code = runUntil(t, "debug", "--json", "--url", admin, id)
	var tr trace.Trace
	if code != 0 || json.Unmarshal([]byte(out), &tr) != nil || tr.ID != id || tr.Served != "backup" || len(tr.Attempts) != 2 {
		t.Fatalf("--json: exit %d, %s %s", code, out, errs)
	}

	var stdout, stderr bytes.Buffer
	if code := run([]string{"debug", "req_gone", "--url", admin}, &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "404") || !strings.Contains(stderr.String(), "no trace of request") {
		t.Errorf("unknown id: exit %d, stderr %q", code, stderr.String())
	}
}

// Without an admin address the traces are on the main listener, for a key with debug.
func TestDebugOnTheMainListener(t *testing.T) {
	base, id := debugGateway(t, false)
	out, errs, code := runUntil(t, "debug", id, "--url", base, "--key", "l0-dbg")
	if code != 0 || !strings.Contains(out, "[DEBUG] served: backup by backup") {
		t.Fatalf("exit %d: %s %s", code, out, errs)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"debug", id, "--url", base}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "401") {
		t.Errorf("without a key: exit %d, stderr %q", code, stderr.String())
	}
}

// A flag the command does not know, a value that does not parse or an argument too many is a
// usage mistake: exit 2, with the flag set's own message and usage on stderr, never 1.
func TestArgumentMistakesExit2(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--bogus"}, {"serve", "extra"},
		{"bench", "--rate", "abc"}, {"bench", "--bogus"}, {"bench", "--http", "9"}, {"bench", "--workload", "x"},
		{"bench", "--format", "xml"}, {"bench", "upstream", "--bogus"},
		{"probe", "--bogus", "x"}, {"debug", "--bogus", "x"}, {"keys", "new", "--bogus"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		if code != 2 || stderr.Len() == 0 || stdout.Len() != 0 {
			t.Errorf("layer0 %s: exit %d, stdout %q, stderr %q; want 2 and the mistake on stderr",
				strings.Join(args, " "), code, stdout.String(), stderr.String())
		}
	}
}
