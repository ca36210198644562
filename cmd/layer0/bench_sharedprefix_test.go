package main

import (
	"bytes"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/bench"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/syncbuf"
)

// TestBenchSharedPrefix runs `layer0 bench --workload shared-prefix` against an in-process
// layer0 with four sim replicas, in both formats: the report's cached and prompt tokens and its
// requests per replica must be what the gateway's access log says the engines served.
func TestBenchSharedPrefix(t *testing.T) {
	cfg, err := config.Parse([]byte(`
keys: [{name: bench, hash: ` + auth.HashHex("l0-bench") + `}]
engines:
  a: {kind: sim, sim: {ttft: 1ms, prefill_per_token: 2us, inter_token_latency: 100us, kv_cache_tokens: 2048}}
  b: {kind: sim, sim: {ttft: 1ms, prefill_per_token: 2us, inter_token_latency: 100us, kv_cache_tokens: 2048}}
  c: {kind: sim, sim: {ttft: 1ms, prefill_per_token: 2us, inter_token_latency: 100us, kv_cache_tokens: 2048}}
  d: {kind: sim, sim: {ttft: 1ms, prefill_per_token: 2us, inter_token_latency: 100us, kv_cache_tokens: 2048}}
models:
  pool: {engines: [a, b, c, d]}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"anthropic", "openai"} {
		t.Run(format, func(t *testing.T) {
			var access syncbuf.Buffer
			g, err := layer0.New(cfg, layer0.WithAccessLog(&access))
			if err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := server.HTTPServer(g, server.ListenOptions{ReadHeaderTimeout: 30 * time.Second})
			go srv.Serve(ln) //nolint:errcheck // ends at Close
			defer func() { srv.Close(); g.Close() }()

			const requests = 60
			var out, errOut bytes.Buffer
			err = runBench([]string{"--workload", "shared-prefix", "--url", "http://" + ln.Addr().String(),
				"--format", format, "--api-key", "l0-bench", "--model", "pool", "--groups", "4", "--users", "2",
				"--prefix-tokens", "300", "--turns", "3", "--skew", "0.4", "--requests", strconv.Itoa(requests),
				"--conns", "4", "--max-tokens", "4", "--json"}, &out, &errOut)
			if err != nil {
				t.Fatalf("runBench: %v (stderr %s)", err, errOut.String())
			}
			var rep bench.SharedPrefixReport
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
				t.Fatalf("output is not a JSON report: %v\n%s", err, out.String())
			}
			if rep.OK != requests || rep.Failed != 0 || rep.TTFT.Count != requests || rep.TTFT.P50 <= 0 ||
				rep.TTFT.P99 > rep.Latency.Max || rep.Groups != 4 || rep.Turns != 3 || rep.Skew != 0.4 || rep.Mode != "closed" {
				t.Fatalf("report: %+v", rep)
			}

			// What the engines reported, from the gateway's side.
			var prompt, cached uint64
			perReplica := map[string]uint64{}
			deadline := time.Now().Add(10 * time.Second)
			for lines := access.Lines(); ; lines = access.Lines() {
				if len(lines) >= requests || time.Now().After(deadline) {
					for _, line := range lines {
						var r struct {
							Engine    string `json:"engine"`
							Input     uint64 `json:"input_tokens"`
							CacheRead uint64 `json:"cache_read_input_tokens"`
						}
						if err := json.Unmarshal([]byte(line), &r); err != nil {
							t.Fatalf("access log: %v", err)
						}
						prompt += r.Input + r.CacheRead
						cached += r.CacheRead
						perReplica[r.Engine]++
					}
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if rep.PromptTokens != prompt || rep.CachedTokens != cached || cached == 0 {
				t.Errorf("report: %d of %d prompt tokens from cache; access log: %d of %d", rep.CachedTokens, rep.PromptTokens, cached, prompt)
			}
			if rep.PromptTokens < requests*300 {
				t.Errorf("%d prompt tokens over %d requests, want at least the 300-token prefixes", rep.PromptTokens, requests)
			}
			if len(rep.Replicas) != len(perReplica) {
				t.Errorf("per replica: report %v, access log %v", rep.Replicas, perReplica)
			}
			for r, n := range perReplica {
				if rep.Replicas[r] != n {
					t.Errorf("per replica: report %v, access log %v", rep.Replicas, perReplica)
				}
			}
		})
	}

	// The text report names what a reader compares, and is printed before the run's failure
	// (its one request refused) is the command's error.
	var out, errOut bytes.Buffer
	if err := runBench([]string{"--workload", "shared-prefix", "--url", "http://127.0.0.1:1", "--requests", "1",
		"--timeout", "2s"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "1 of 1 requests failed") {
		t.Fatalf("runBench against a closed port: %v, want 1 of 1 requests failed", err)
	}
	for _, want := range []string{"shared-prefix workload", "ttft", "from cache", "per replica", "transport"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestBenchSharedPrefixFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--workload", "zipf"},
		{"--workload", "shared-prefix", "--stream"},
		{"--workload", "shared-prefix", "--format", "binary"},
		{"--workload", "shared-prefix", "--skew", "2"},
	} {
		var out, errOut bytes.Buffer
		if err := runBench(args, &out, &errOut); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
