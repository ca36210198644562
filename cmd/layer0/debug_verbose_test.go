package main

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/layer0ai/layer0"
)

// `layer0 debug --verbose --model chat 'hello'` against examples/gateway.yaml explains the
// request: the primary's 529, its ejection, the fallback taken and the replica that served,
// each with its time, in that order. The next request finds the primary ejected and goes
// straight to the fallback.
func TestDebugVerboseExample(t *testing.T) {
	cfg, err := layer0.LoadConfig("../../examples/gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g, err := layer0.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(func() { srv.Close(); g.Close() })

	var stdout, stderr bytes.Buffer
	code := run([]string{"debug", "--verbose", "--url", srv.URL, "--key", "l0-demo-alpha", "--model", "chat",
		"--max-tokens", "8", "hello"}, &stdout, &stderr)
	out := stdout.String()
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr.String(), out)
	}
	answer, traceLines, ok := strings.Cut(out, "\n\n[DEBUG] ")
	if !ok || strings.TrimSpace(answer) == "" {
		t.Fatalf("want the answer, a blank line, then the trace:\n%s", out)
	}
	// The decisions, in order, each with its time from the request's start.
	steps := []*regexp.Regexp{
		regexp.MustCompile(`(?m)^\[DEBUG\] attempt 1: chat on overloaded at \+([0-9.]+)ms, ([0-9.]+)ms, failed: simulated overload: .*status 529$`),
		regexp.MustCompile(`(?m)^\[DEBUG\] ejection: overloaded ejected for 30s at \+([0-9.]+)ms$`),
		regexp.MustCompile(`(?m)^\[DEBUG\] fallback: chat → chat-fallback \(reason: overloaded\) at \+([0-9.]+)ms$`),
		regexp.MustCompile(`(?m)^\[DEBUG\] attempt 2: chat-fallback on fallback \(fallback: overloaded\) at \+([0-9.]+)ms, ([0-9.]+)ms, served$`),
		regexp.MustCompile(`(?m)^\[DEBUG\] served: chat-fallback by fallback, simulated; first token at \+([0-9.]+)ms, done at \+([0-9.]+)ms$`),
	}
	text := "[DEBUG] " + traceLines
	pos, last := 0, 0.0
	for _, re := range steps {
		loc := re.FindStringSubmatchIndex(text)
		if loc == nil || loc[0] < pos {
			t.Fatalf("no line matching %s after the previous one:\n%s", re, text)
		}
		pos = loc[1]
		at, err := strconv.ParseFloat(text[loc[2]:loc[3]], 64)
		if err != nil || at < last {
			t.Errorf("%s: time %q before the previous decision's %.3fms", re, text[loc[2]:loc[3]], last)
		}
		last = at
	}
	// The realistic fallback takes 150ms to its first token: the times are real.
	if last < 100 {
		t.Errorf("served's first token at +%.3fms, want the fallback's ~150ms", last)
	}
	if !regexp.MustCompile(`(?m)^\[DEBUG\] client: HTTP/1.1 200, first byte [0-9.]+ms, first token [0-9.]+ms, end [0-9.]+ms, [0-9]+ bytes, request id L0-`).MatchString(text) {
		t.Errorf("no client line:\n%s", text)
	}

	// --json: the same request for scripts; the primary is ejected now, so the first attempt
	// is the fallback, and says the primary's replica was out, ejected.
	stdout.Reset()
	code = run([]string{"debug", "--verbose", "--json", "--url", srv.URL, "--key", "l0-demo-alpha", "--model", "chat",
		"--max-tokens", "4", "hello"}, &stdout, &stderr)
	var rep verboseReport
	if code != 0 || json.Unmarshal(stdout.Bytes(), &rep) != nil || rep.Trace == nil || rep.Client == nil {
		t.Fatalf("--json: exit %d: %s %s", code, stdout.String(), stderr.String())
	}
	if a := rep.Trace.Attempts; len(a) != 1 || a[0].Replica != "fallback" || a[0].Fallback != "unavailable" ||
		a[0].Left == nil || a[0].Left.Replica != "overloaded" || a[0].Left.Reason != "ejected" {
		t.Errorf("attempts with the primary ejected: %+v", a)
	}
	if rep.Client.Status != 200 || rep.Client.Text == "" || rep.Client.Headers["X-Request-Id"] != rep.Trace.ID {
		t.Errorf("client: %+v, trace id %s", rep.Client, rep.Trace.ID)
	}

	// A key without debug gets its answer but no trace, and is told why.
	stdout.Reset()
	stderr.Reset()
	code = run([]string{"debug", "--verbose", "--url", srv.URL, "--key", "l0-demo-beta", "--model", "small",
		"--max-tokens", "2", "hello"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "needs debug: true") {
		t.Errorf("key without debug: exit %d, stderr %q", code, stderr.String())
	}
	// A refused request is reported in the client's line and the exit code.
	stdout.Reset()
	stderr.Reset()
	code = run([]string{"debug", "--verbose", "--url", srv.URL, "--key", "l0-demo-beta", "--model", "chat", "hello"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "403") || !strings.Contains(stdout.String(), "[DEBUG] client: HTTP/1.1 403") {
		t.Errorf("forbidden model: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}

// On the embedded default (no file, no keys, loopback) traces simply work: `layer0 debug
// --verbose 'hello'` prints the answer and its trace with no key, and `layer0 debug ID` finds the
// kept trace on the main listener.
func TestDebugVerboseOnTheDefault(t *testing.T) {
	g, err := layer0.New(layer0.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(func() { srv.Close(); g.Close() })
	var stdout, stderr bytes.Buffer
	code := run([]string{"debug", "--verbose", "--url", srv.URL, "--max-tokens", "8", "hello"}, &stdout, &stderr)
	if code != 0 || !strings.Contains(stdout.String(), "[DEBUG] served: sim by sim") {
		t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, stderr.String(), stdout.String())
	}
	id := regexp.MustCompile(`request id (L0-\S+)`).FindStringSubmatch(stdout.String())
	if id == nil {
		t.Fatalf("no request id in:\n%s", stdout.String())
	}
	stdout.Reset()
	if code := run([]string{"debug", id[1], "--url", srv.URL}, &stdout, &stderr); code != 0 ||
		!strings.Contains(stdout.String(), "[DEBUG] request: "+id[1]) {
		t.Errorf("debug %s: exit %d, stderr %q, stdout:\n%s", id[1], code, stderr.String(), stdout.String())
	}
}
