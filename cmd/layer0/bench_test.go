package main

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0/internal/bench"
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
		{"--http", "3"},
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
