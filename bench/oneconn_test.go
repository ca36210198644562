package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/bench"
)

// TestMain lets the test binary be the report's children, as the report's executable is: the
// tests start it with a child's arguments (startChild runs os.Executable).
func TestMain(m *testing.M) {
	if run := childMain(os.Args[1:]); run != nil {
		exit(run())
	}
	os.Exit(m.Run())
}

// TestOneConnSection runs the one-connection section briefly against real children — the fast
// upstream, layer0 in front of it and the bare proxy — and checks that every target was measured
// in every round, without failures, with time to first token for the stream, and printed.
func TestOneConnSection(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	o := options{warmup: 50 * time.Millisecond, oneConn: true, oneConnDur: 150 * time.Millisecond, oneConnRnds: 2,
		engine: "anthropic", http1: "lean", out: t.TempDir()}
	up, err := startChild(o.out, "upstream", childUpstream, "--tokens", "100")
	if err != nil {
		t.Fatal(err)
	}
	defer up.stop()
	upURL := "http://" + up.fields[0]
	gw, note, err := startGateway(o, upURL, "", tlsFiles{})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.stop()
	if !strings.Contains(note, `"anthropic" engine`) {
		t.Fatalf("layer0 does not reach the upstream: %s", note)
	}
	gwURL := "http://" + gw.fields[0]
	if err := waitReady(ctx, gwURL); err != nil {
		t.Fatal(err)
	}
	proxy, err := startChild(o.out, "bare-proxy", childProxy, "--upstream", up.fields[0], "--http1", o.http1)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.stop()

	res, err := runOneConn(ctx, o, upURL, gwURL, up, gw, proxy)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(oneConnScenarios) {
		t.Fatalf("got %d scenarios, want %d", len(res), len(oneConnScenarios))
	}
	for _, r := range res {
		for name, rounds := range map[string][]*bench.Report{"direct": r.Direct, "layer0": r.Layer0, "bare proxy": r.Proxy} {
			if len(rounds) != o.oneConnRnds {
				t.Errorf("%s, %s: %d rounds, want %d", r.Name, name, len(rounds), o.oneConnRnds)
			}
			for i, rep := range rounds {
				if rep.OK == 0 || rep.Failed > 0 || rep.Connections != 1 || rep.Mode != "closed" || rep.PeakInFlight != 1 {
					t.Errorf("%s, %s, round %d: %d ok, %d failed, %d connections (%s loop), %d in flight at most; want all ok, one at a time",
						r.Name, name, i+1, rep.OK, rep.Failed, rep.Connections, rep.Mode, rep.PeakInFlight)
				}
				if r.Stream && rep.TTFT.Count != rep.OK {
					t.Errorf("%s, %s, round %d: time to first token of %d streams, want %d", r.Name, name, i+1, rep.TTFT.Count, rep.OK)
				}
			}
		}
		if _, ok := addedOver(r.Direct, r.Layer0, latencyOf, false); !ok {
			t.Errorf("%s: no added latency", r.Name)
		}
	}
	var b strings.Builder
	printReport(&b, o, &result{OneConn: res})
	t.Log(b.String())
	for _, want := range []string{
		"== one connection, one request at a time (closed loop, --conns 1): 2 rounds of 150ms per target ==",
		"non-streaming, Anthropic JSON: latency\n  direct",
		"streaming 100 tokens, Anthropic SSE: time to first token\n  direct",
		"streaming 100 tokens, Anthropic SSE: whole stream\n  direct",
		"\n  bare proxy ",
		"non-streaming, Anthropic JSON, latency at one connection: layer0 adds",
		"streaming 100 tokens, Anthropic SSE, time to first token at one connection: layer0 adds",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// TestOneConnFigures checks the section's arithmetic: each target's figure is the median of its
// rounds', what layer0 adds is taken within each round and its median judged, and a failure
// fails the target whatever the figures.
func TestOneConnFigures(t *testing.T) {
	us := time.Microsecond
	rep := func(p50, p99, ttft50, ttft99 time.Duration, failed uint64) *bench.Report {
		return &bench.Report{Outcome: bench.Outcome{Sent: 1000, OK: 1000 - failed, Failed: failed},
			Latency: bench.Percentiles{P50: p50, P99: p99}, TTFT: bench.Percentiles{P50: ttft50, P99: ttft99}}
	}
	// Round 2 ran while the machine was busy: direct and layer0 slowed down together.
	res := oneConnResult{Name: "sse", Stream: true,
		Direct: []*bench.Report{rep(100*us, 200*us, 90*us, 150*us, 0), rep(400*us, 900*us, 300*us, 800*us, 0), rep(110*us, 210*us, 95*us, 160*us, 0)},
		Layer0: []*bench.Report{rep(180*us, 450*us, 170*us, 400*us, 0), rep(490*us, 1200*us, 390*us, 1100*us, 0), rep(200*us, 420*us, 180*us, 430*us, 0)},
	}
	if got := quantile(res.Layer0, ttftOf, false); got != 180*us {
		t.Errorf("layer0 ttft p50: got %v, want the median round's 180µs", got)
	}
	if got, ok := addedOver(res.Direct, res.Layer0, ttftOf, false); !ok || got != 85*us {
		t.Errorf("added ttft p50: got %v %v, want 85µs (the median of 80, 90, 85)", got, ok)
	}
	if got, ok := addedOver(res.Direct, res.Layer0, ttftOf, true); !ok || got != 270*us {
		t.Errorf("added ttft p99: got %v %v, want 270µs (the median of 250, 300, 270)", got, ok)
	}
	if _, ok := addedOver(res.Direct, nil, ttftOf, false); ok {
		t.Error("added over no rounds: got a figure")
	}
	json := oneConnResult{Name: "json",
		Direct: []*bench.Report{rep(100*us, 200*us, 0, 0, 0), rep(100*us, 200*us, 0, 0, 0)},
		Layer0: []*bench.Report{rep(250*us, 400*us, 0, 0, 0), rep(260*us, 410*us, 0, 0, 2)},
	}
	var b strings.Builder
	printTargets(&b, &result{OneConn: []oneConnResult{res, json}})
	for _, want := range []string{
		"[ ok ] sse, time to first token at one connection: layer0 adds +85µs at p50 (target ≤ 100µs) and +270µs at p99 (target ≤ 300µs)",
		"[MISS] json, latency at one connection: layer0 adds +160µs at p50 (target ≤ 100µs) and +210µs at p99 (target ≤ 300µs) — requests failed: direct 0, layer0 2 of 2000",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("targets lack %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "whole stream at one connection") {
		t.Errorf("the whole stream has no target, but was judged:\n%s", b.String())
	}
}
