package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/bench"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/testcert"
)

// The protocol comparison sends the same 100-token streams through layer0 over HTTP/1.1 on its
// cleartext listener, and over HTTP/2 (TLS) and HTTP/3 (QUIC) on its TLS listener's port, at one
// modest open-loop rate: what each protocol costs in time to first token, in bytes on the wire
// and in CPU on both ends, far from saturation.

// targetH3TTFT is how much longer HTTP/3's median time to first token may be than HTTP/2's.
const targetH3TTFT = 0.10

// protocol is one way the generator reaches layer0.
type protocol struct {
	name string // as the report prints it
	http string // bench.Report.HTTP
	tls  bool   // on the TLS listener's port
}

var protocols = []protocol{
	{"HTTP/1.1 cleartext", "1.1", false},
	{"HTTP/2 TLS", "2", true},
	{"HTTP/3 QUIC", "3", true},
}

// protocolRun is one protocol's measurements, one report per round.
type protocolRun struct {
	Protocol string          `json:"protocol"`
	HTTP     string          `json:"http"`
	Rounds   []*bench.Report `json:"rounds"`
	// CPU is, per round, the CPU time per request of the generator, the upstream and layer0.
	CPU []*cpuUse `json:"cpu,omitempty"`
}

// ttft is the median over the rounds of the rounds' median (p99: 99th percentile) time to first
// token, or -1 when no round had a successful request.
func (p *protocolRun) ttft(p99 bool) time.Duration {
	var ds []time.Duration
	for _, r := range p.Rounds {
		if r.OK > 0 {
			ds = append(ds, pick(r.TTFT, p99))
		}
	}
	return median(ds)
}

// end is the median over the rounds of the rounds' median stream duration, or -1.
func (p *protocolRun) end() time.Duration {
	var ds []time.Duration
	for _, r := range p.Rounds {
		if r.OK > 0 {
			ds = append(ds, r.Latency.P50)
		}
	}
	return median(ds)
}

// wire is the bytes sent and received per request and both per token over all the rounds.
func (p *protocolRun) wire() (sent, received, perToken float64) {
	var s, r, reqs, toks uint64
	for _, rep := range p.Rounds {
		s, r, reqs, toks = s+rep.Wire.Sent, r+rep.Wire.Received, reqs+rep.Sent, toks+rep.Tokens
	}
	if reqs > 0 {
		sent, received = float64(s)/float64(reqs), float64(r)/float64(reqs)
	}
	if toks > 0 {
		perToken = float64(s+r) / float64(toks)
	}
	return sent, received, perToken
}

// cpu is the median over the rounds of the generator's and layer0's CPU per request, or nil.
func (p *protocolRun) cpu() *cpuUse {
	var gen, l0 []time.Duration
	for _, c := range p.CPU {
		if c != nil {
			gen, l0 = append(gen, c.Generator), append(l0, c.Layer0)
		}
	}
	if len(gen) == 0 {
		return nil
	}
	return &cpuUse{Generator: median(gen), Layer0: median(l0)}
}

// sums adds up the rounds' requests: sent, failed and sent late.
func (p *protocolRun) sums() (sent, failed, late uint64) {
	for _, r := range p.Rounds {
		sent, failed, late = sent+r.Sent, failed+r.Failed, late+r.Late
	}
	return sent, failed, late
}

// protocolResult is one scenario measured over every protocol.
type protocolResult struct {
	Name string         `json:"name"`
	Rate float64        `json:"rate"`
	Runs []*protocolRun `json:"runs"`
}

// run returns the run of the protocol whose Report.HTTP is http, or nil.
func (r protocolResult) run(http string) *protocolRun {
	for _, p := range r.Runs {
		if p.HTTP == http {
			return p
		}
	}
	return nil
}

// h3Ratio is the median over the rounds of HTTP/3's median (p99: 99th percentile) time to first
// token divided by HTTP/2's in the same round — the two run one after the other in every round,
// so a change of the machine's load between rounds moves both — or 0 when no round has both.
func (r protocolResult) h3Ratio(p99 bool) float64 {
	h2, h3 := r.run("2"), r.run("3")
	if h2 == nil || h3 == nil {
		return 0
	}
	var qs []float64
	for i := range min(len(h2.Rounds), len(h3.Rounds)) {
		a, b := h3.Rounds[i], h2.Rounds[i]
		if a.OK > 0 && b.OK > 0 && pick(b.TTFT, p99) > 0 {
			qs = append(qs, float64(pick(a.TTFT, p99))/float64(pick(b.TTFT, p99)))
		}
	}
	if len(qs) == 0 {
		return 0
	}
	slices.Sort(qs)
	return qs[len(qs)/2]
}

func pick(p bench.Percentiles, p99 bool) time.Duration {
	if p99 {
		return p.P99
	}
	return p.P50
}

// median is the middle value (the upper one of an even count), or -1 for none.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return -1
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// runProtocols measures the 100-token streaming scenarios over each protocol: gwURL is layer0's
// cleartext listener, tlsURL its TLS one (HTTP/3 on the same port). Each scenario runs
// o.protoRounds rounds, each protocol once per round, in the order HTTP/1.1, HTTP/2, HTTP/3 and
// back, so that HTTP/2 and HTTP/3 always run next to each other.
func runProtocols(ctx context.Context, o options, gwURL, tlsURL string, up, gw *child) ([]protocolResult, error) {
	var out []protocolResult
	for _, sc := range []scenario{
		{Name: "streaming 100 tokens, Anthropic SSE", format: llm.FormatAnthropic, stream: true},
		{Name: "streaming 100 tokens, binary v1", format: llm.FormatBinary, stream: true},
	} {
		res := protocolResult{Name: sc.Name, Rate: o.protoRate}
		cfg := func(p protocol) bench.Config {
			c := bench.Config{URL: gwURL, Format: sc.format, Stream: sc.stream, Model: benchModel,
				MaxTokens: streamTokens, Timeout: 10 * time.Second, MaxInFlight: 1000,
				HTTP2: p.http == "2", HTTP3: p.http == "3"}
			if p.tls {
				c.URL, c.Insecure = tlsURL, true // the report's own self-signed loopback certificate
			}
			return c
		}
		for _, p := range protocols {
			c := cfg(p)
			c.Connections, c.Duration = 4, o.warmup
			if _, err := bench.Run(ctx, c); err != nil {
				return nil, fmt.Errorf("%s warm-up: %w", p.name, err)
			}
			res.Runs = append(res.Runs, &protocolRun{Protocol: p.name, HTTP: p.http})
		}
		for round := range o.protoRounds {
			for i := range protocols {
				if round%2 == 1 {
					i = len(protocols) - 1 - i
				}
				p, run := protocols[i], res.Runs[i]
				logf("%s: %g req/s through layer0 over %s (round %d of %d)", sc.Name, o.protoRate, p.name, round+1, o.protoRounds)
				c := cfg(p)
				c.Rate, c.Duration = o.protoRate, o.duration
				rep, cpu, err := (cpuMeter{up: up, gw: gw}).run(ctx, c)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", p.name, err)
				}
				run.Rounds, run.CPU = append(run.Rounds, rep), append(run.CPU, cpu.per(rep.Sent))
			}
		}
		out = append(out, res)
	}
	return out, ctx.Err()
}

// printProtocols writes the protocol comparison.
func printProtocols(w io.Writer, res []protocolResult) {
	for _, r := range res {
		rounds := 0
		if len(r.Runs) > 0 {
			rounds = len(r.Runs[0].Rounds)
		}
		fmt.Fprintf(w, "\n== HTTP/1.1, HTTP/2 and HTTP/3 through layer0: %s at %g req/s, %d rounds ==\n", r.Name, r.Rate, rounds)
		fmt.Fprintf(w, "%-19s %9s %9s %9s  %9s %9s %9s  %9s %9s  %s\n", "protocol", "ttft p50", "p99", "end p50",
			"sent/req", "recv/req", "B/token", "CPU gen", "layer0", "notes")
		for _, run := range r.Runs {
			gen, l0 := "n/a", "n/a"
			if c := run.cpu(); c != nil {
				gen, l0 = dur(c.Generator), dur(c.Layer0)
			}
			sent, recv, perTok := run.wire()
			var notes []string
			reqs, failed, late := run.sums()
			if failed > 0 {
				notes = append(notes, fmt.Sprintf("%d of %d failed", failed, reqs))
			}
			if reqs > 0 && float64(late) >= 0.01*float64(reqs) {
				notes = append(notes, fmt.Sprintf("generator sent %.0f%% late", 100*float64(late)/float64(reqs)))
			}
			fmt.Fprintf(w, "%-19s %9s %9s %9s  %9.0f %9.0f %9.1f  %9s %9s  %s\n", run.Protocol, durOrNA(run.ttft(false)),
				durOrNA(run.ttft(true)), durOrNA(run.end()), sent, recv, perTok, gen, l0, strings.Join(notes, "; "))
		}
		if q := r.h3Ratio(false); q > 0 {
			fmt.Fprintf(w, "HTTP/3 ÷ HTTP/2 time to first token (median of the rounds' ratios): %.2f at p50, %.2f at p99\n", q, r.h3Ratio(true))
		}
	}
	if len(res) > 0 {
		fmt.Fprintf(w, "(medians over the rounds; ttft and end from each request's scheduled send; bytes: TCP payload for\n"+
			" HTTP/1.1 and TLS, UDP payload for QUIC, no IP/TCP/UDP headers, handshakes shared out over the run)\n")
	}
}

func durOrNA(d time.Duration) string {
	if d < 0 {
		return "n/a"
	}
	return dur(d)
}

// tlsFiles are the certificate and key files of the gateway's TLS listener ("" for none).
type tlsFiles struct{ cert, key string }

// writeCert writes a self-signed certificate for 127.0.0.1 into dir with internal/testcert, which
// reports failure through a testing.TB: certTB turns its Fatal into an error.
func writeCert(dir string) (f tlsFiles, err error) {
	tb := &certTB{}
	defer func() {
		if r := recover(); r != nil {
			if r != errCertFatal {
				panic(r)
			}
			err = tb.err
		}
	}()
	f.cert, f.key, _ = testcert.Write(tb, dir)
	return f, nil
}

var errCertFatal = errors.New("certificate: fatal")

// certTB is the testing.TB testcert.Write needs: Helper does nothing, Fatal records its
// arguments and unwinds to writeCert. The embedded interface is nil: testcert calls nothing else.
type certTB struct {
	testing.TB
	err error
}

func (*certTB) Helper() {}

func (c *certTB) Fatal(args ...any) {
	c.err = fmt.Errorf("certificate: %s", fmt.Sprint(args...))
	panic(errCertFatal)
}
