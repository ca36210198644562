package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/layer0ai/layer0/internal/bench"
	"github.com/layer0ai/layer0/internal/llm"
)

// The one-connection section measures what layer0 adds to a single client's request when
// nothing else is in flight: one HTTP/1.1 connection, one request at a time (closed loop,
// `layer0 bench --conns 1`), directly, through layer0 and through the bare proxy. The three run
// in alternating rounds — direct, layer0, proxy, then proxy, layer0, direct, … — so that a
// change of the machine's load during the section falls on all of them alike, and what layer0
// adds is taken within each round.

// The targets of the one-connection section, for a non-streamed answer's latency and a
// stream's time to first token.
const (
	targetOneConnP50 = 100 * time.Microsecond
	targetOneConnP99 = 300 * time.Microsecond
)

// oneConnScenarios are the kinds of traffic the section measures.
var oneConnScenarios = []scenario{
	{Name: "non-streaming, Anthropic JSON", format: llm.FormatAnthropic},
	{Name: "streaming 100 tokens, Anthropic SSE", format: llm.FormatAnthropic, stream: true},
}

// oneConnTarget is one way the generator reaches the upstream.
type oneConnTarget struct {
	name string // as the report prints it
	url  string
	gw   *child // the process between the generator and the upstream; nil for direct
}

// oneConnResult is one scenario measured at one connection: each target's report per round,
// and the CPU time per request the processes used in it (nil where /proc could not tell).
type oneConnResult struct {
	Name      string          `json:"name"`
	Stream    bool            `json:"stream"`
	Direct    []*bench.Report `json:"direct"`
	Layer0    []*bench.Report `json:"layer0"`
	Proxy     []*bench.Report `json:"bare_proxy,omitempty"`
	DirectCPU []*cpuUse       `json:"direct_cpu,omitempty"`
	Layer0CPU []*cpuUse       `json:"layer0_cpu,omitempty"`
	ProxyCPU  []*cpuUse       `json:"bare_proxy_cpu,omitempty"`
	// Profiles are the CPU profiles of layer0 and the bare proxy in the last round.
	Profiles []string `json:"profiles,omitempty"`
}

// oneConnMetric picks the figure of a report the section compares: latency (the whole answer or
// stream) or time to first token.
type oneConnMetric func(r *bench.Report) bench.Percentiles

func latencyOf(r *bench.Report) bench.Percentiles { return r.Latency }
func ttftOf(r *bench.Report) bench.Percentiles    { return r.TTFT }

// quantile is the median over the rounds of the rounds' p50 (p99) of metric m, or -1 when no
// round had a successful request.
func quantile(rounds []*bench.Report, m oneConnMetric, p99 bool) time.Duration {
	var ds []time.Duration
	for _, r := range rounds {
		if r != nil && r.OK > 0 {
			ds = append(ds, pick(m(r), p99))
		}
	}
	return median(ds)
}

// addedOver is the median over the rounds of what through adds to direct at p50 (p99) of metric
// m, each round's difference taken between the two runs of that round. ok is false when no round
// has both.
func addedOver(direct, through []*bench.Report, m oneConnMetric, p99 bool) (d time.Duration, ok bool) {
	var ds []time.Duration
	for i := range min(len(direct), len(through)) {
		a, b := direct[i], through[i]
		if a != nil && b != nil && a.OK > 0 && b.OK > 0 {
			ds = append(ds, pick(m(b), p99)-pick(m(a), p99))
		}
	}
	if len(ds) == 0 {
		return 0, false
	}
	return median(ds), true
}

// sums adds up the requests of rounds: sent and failed.
func sums(rounds []*bench.Report) (sent, failed uint64) {
	for _, r := range rounds {
		sent, failed = sent+r.Sent, failed+r.Failed
	}
	return sent, failed
}

// runOneConn measures each one-connection scenario: a warm-up of o.warmup per target, then
// o.oneConnRnds rounds of o.oneConnDur per target, in alternating order.
func runOneConn(ctx context.Context, o options, upURL, gwURL string, up, gw, proxy *child) ([]oneConnResult, error) {
	targets := []oneConnTarget{{"direct", upURL, nil}, {"layer0", gwURL, gw}}
	if proxy != nil {
		targets = append(targets, oneConnTarget{"bare proxy", "http://" + proxy.fields[0], proxy})
	}
	one := o
	one.conns = 1
	var out []oneConnResult
	for _, sc := range oneConnScenarios {
		res := oneConnResult{Name: sc.Name, Stream: sc.stream}
		for _, t := range targets {
			if _, err := bench.Run(ctx, load(one, sc, t.url, 0, o.warmup)); err != nil {
				return nil, fmt.Errorf("one connection, %s warm-up: %w", t.name, err)
			}
		}
		for round := range o.oneConnRnds {
			for i := range targets {
				if round%2 == 1 {
					i = len(targets) - 1 - i
				}
				t := targets[i]
				logf("%s: one connection, %s (round %d of %d)", sc.Name, t.name, round+1, o.oneConnRnds)
				var prof chan profile
				if round == o.oneConnRnds-1 && t.gw != nil && len(t.gw.fields) > 1 {
					// The last round is profiled, so that where layer0's time goes at one
					// connection can be set beside the bare proxy's; the profiler's own cost
					// falls on one round of several, whose median the section prints.
					prof = make(chan profile, 1)
					file := filepath.Join(o.out, "cpu-one-connection-"+slug(sc.Name)+"-"+slug(t.name)+".pprof")
					go func() { prof <- fetchProfile(ctx, t.gw.fields[1], file, o.oneConnDur-500*time.Millisecond) }()
				}
				rep, cpu, err := (cpuMeter{up: up, gw: t.gw}).run(ctx, load(one, sc, t.url, 0, o.oneConnDur))
				if prof != nil {
					if pr := <-prof; pr.err == nil {
						res.Profiles = append(res.Profiles, pr.file)
					}
				}
				if err != nil {
					return nil, fmt.Errorf("one connection, %s: %w", t.name, err)
				}
				use := cpu.per(rep.OK)
				switch t.name {
				case "direct":
					res.Direct, res.DirectCPU = append(res.Direct, rep), append(res.DirectCPU, use)
				case "layer0":
					res.Layer0, res.Layer0CPU = append(res.Layer0, rep), append(res.Layer0CPU, use)
				default:
					res.Proxy, res.ProxyCPU = append(res.Proxy, rep), append(res.ProxyCPU, use)
				}
			}
		}
		out = append(out, res)
	}
	return out, ctx.Err()
}

// oneConnFigure is a figure the section prints for a scenario.
type oneConnFigure struct {
	name   string
	m      oneConnMetric
	target bool // the section's targets apply to it
}

// metrics are the figures printed for the scenario: latency, and for a stream time to first
// token first.
func (r oneConnResult) metrics() []oneConnFigure {
	if r.Stream {
		return []oneConnFigure{{"time to first token", ttftOf, true}, {"whole stream", latencyOf, false}}
	}
	return []oneConnFigure{{"latency", latencyOf, true}}
}

// middleCPU is the median over the rounds of the CPU per request of the process between the
// generator and the upstream, or -1.
func middleCPU(cpu []*cpuUse) time.Duration {
	var ds []time.Duration
	for _, c := range cpu {
		if c != nil {
			ds = append(ds, c.Layer0)
		}
	}
	return median(ds)
}

// printOneConn writes the one-connection section.
func printOneConn(w io.Writer, o options, res []oneConnResult) {
	if len(res) == 0 {
		return
	}
	rounds := len(res[0].Direct)
	fmt.Fprintf(w, "\n== one connection, one request at a time (closed loop, --conns 1): %d rounds of %s per target ==\n",
		rounds, o.oneConnDur)
	fmt.Fprintf(w, "%-12s %9s %9s  %10s %10s  %s\n", "", "p50", "p99", "added p50", "p99", "notes")
	for _, r := range res {
		runs := []struct {
			name   string
			rounds []*bench.Report
			cpu    []*cpuUse
		}{{"direct", r.Direct, r.DirectCPU}, {"layer0", r.Layer0, r.Layer0CPU}, {"bare proxy", r.Proxy, r.ProxyCPU}}
		for _, mt := range r.metrics() {
			fmt.Fprintf(w, "%s: %s\n", r.Name, mt.name)
			for _, run := range runs {
				if len(run.rounds) == 0 {
					continue
				}
				add50, add99 := "", ""
				if run.name != "direct" {
					add50, add99 = "n/a", "n/a"
					if d, ok := addedOver(r.Direct, run.rounds, mt.m, false); ok {
						add50 = signed(d)
					}
					if d, ok := addedOver(r.Direct, run.rounds, mt.m, true); ok {
						add99 = signed(d)
					}
				}
				var notes []string
				if sent, failed := sums(run.rounds); failed > 0 {
					notes = append(notes, fmt.Sprintf("%d of %d failed", failed, sent))
				} else {
					notes = append(notes, fmt.Sprintf("%d requests", sent))
				}
				if c := middleCPU(run.cpu); c >= 0 && run.name != "direct" {
					notes = append(notes, fmt.Sprintf("%s CPU/request in %s", dur(c), run.name))
				}
				fmt.Fprintf(w, "  %-10s %9s %9s  %10s %10s  %s\n", run.name,
					durOrNA(quantile(run.rounds, mt.m, false)), durOrNA(quantile(run.rounds, mt.m, true)),
					add50, add99, strings.Join(notes, "; "))
			}
		}
	}
	fmt.Fprintf(w, "(medians over the rounds; added = layer0 or bare proxy minus direct within each round, its median over\n"+
		" the rounds; the order of the targets alternates between rounds; CPU per request from /proc)\n")
	for _, r := range res {
		if len(r.Profiles) > 0 {
			fmt.Fprintf(w, "CPU profiles of the last round, %s: %s\n", r.Name, strings.Join(r.Profiles, " "))
		}
	}
}

// checkOneConn checks the one-connection targets of the scenarios measured.
func checkOneConn(check func(ok bool, format string, args ...any), res []oneConnResult) {
	for _, r := range res {
		for _, mt := range r.metrics() {
			if !mt.target {
				continue
			}
			d50, ok50 := addedOver(r.Direct, r.Layer0, mt.m, false)
			d99, ok99 := addedOver(r.Direct, r.Layer0, mt.m, true)
			a50, a99 := "n/a", "n/a"
			if ok50 {
				a50 = signed(d50)
			}
			if ok99 {
				a99 = signed(d99)
			}
			_, fd := sums(r.Direct)
			sent, fl := sums(r.Layer0)
			fail := ""
			if fd+fl > 0 {
				fail = fmt.Sprintf(" — requests failed: direct %d, layer0 %d of %d", fd, fl, sent)
			}
			check(fd+fl == 0 && ok50 && ok99 && d50 <= targetOneConnP50 && d99 <= targetOneConnP99,
				"%s, %s at one connection: layer0 adds %s at p50 (target ≤ %s) and %s at p99 (target ≤ %s)%s",
				r.Name, mt.name, a50, dur(targetOneConnP50), a99, dur(targetOneConnP99), fail)
		}
	}
}
