// Command bench is layer0's reproducible performance report (`make bench`). In one run on one
// machine it starts the fast upstream and a layer0 gateway in front of it as separate processes,
// drives both with the open-loop load generator (internal/bench) at several fixed rates and at
// saturation — non-streaming, and 100-token streams in Anthropic SSE and binary — and at one
// connection with one request at a time, and prints layer0's added latency (p50, p99), its
// maximum throughput as a share of the direct figure, the peak memory of 10,000 open streams,
// the gateway's CPU profile, the same 100-token streams through layer0 over HTTP/1.1, HTTP/2
// (TLS) and HTTP/3 (QUIC) — time to first token, bytes on the wire — and the hot paths' go test
// benchmarks. The generator runs in this process; the three share the machine's cores, as they
// would on the 2-core target.
//
// The gateway child runs exactly what `layer0 serve` runs (layer0.New, server.HTTPServer) plus a
// pprof listener, and for the protocol comparison a second, TLS listener with HTTP/3 on its port
// (server.tls and server.http3 in its configuration, a self-signed loopback certificate). Its engine is the upstream reached as an `anthropic` engine; where this build
// has no such engine, the embedded sim (zero delays) stands in, and the report says so.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the report's flags.
type options struct {
	duration    time.Duration
	warmup      time.Duration
	rates       []float64     // non-streaming open-loop rates
	streamRates []float64     // streaming open-loop rates
	conns       int           // closed-loop connections for saturation
	streams     int           // concurrent streams of the memory test; 0 skips it
	proxy       bool          // measure the bare proxy too (bench/proxy.go)
	oneConn     bool          // measure at one connection, one request at a time (bench/oneconn.go)
	oneConnDur  time.Duration // length of each one-connection run
	oneConnRnds int           // rounds of the one-connection section, each target once per round
	protocols   bool          // compare HTTP/1.1, HTTP/2 and HTTP/3 through layer0 (bench/protocols.go)
	protoRate   float64       // their open-loop rate, req/s
	protoRounds int           // rounds of the three protocols
	engine      string        // engine kind the gateway reaches the upstream with
	http1       string        // the gateway's server of cleartext HTTP/1.1 (config server.http1)
	out         string        // directory for logs, profiles and report.json
	gobench     string        // packages for go test -bench; "" skips
	benchtime   string
}

func main() {
	if run := childMain(os.Args[1:]); run != nil {
		exit(run())
	}
	var o options
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "length of each measured run")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "closed-loop warm-up before each target's runs")
	rates := fs.String("rates", "500,1000,2000", "non-streaming open-loop rates, req/s")
	streamRates := fs.String("stream-rates", "250,500,1000", "streaming open-loop rates, req/s")
	fs.IntVar(&o.conns, "conns", 32, "closed-loop connections for the saturation runs")
	fs.IntVar(&o.streams, "streams", 10000, "concurrent open streams for the memory test (0 skips)")
	fs.BoolVar(&o.proxy, "proxy", true, "also measure a bare net/http proxy, the floor of layer0's design, at saturation and at the target rate")
	fs.BoolVar(&o.oneConn, "one-conn", true, "also measure at one connection, one request at a time: direct, through layer0 and through the bare proxy in alternating rounds")
	fs.DurationVar(&o.oneConnDur, "one-conn-duration", 2*time.Second, "length of each one-connection run")
	fs.IntVar(&o.oneConnRnds, "one-conn-rounds", 3, "rounds of the one-connection section, each target once per round")
	fs.StringVar(&o.http1, "http1", "lean", "server of the gateway's cleartext HTTP/1.1: net/http or lean (config server.http1)")
	fs.BoolVar(&o.protocols, "protocols", true, "also compare HTTP/1.1, HTTP/2 (TLS) and HTTP/3 (QUIC) through layer0: time to first token and bytes on the wire")
	fs.Float64Var(&o.protoRate, "protocol-rate", 100, "open-loop rate of the protocol comparison, req/s")
	fs.IntVar(&o.protoRounds, "protocol-rounds", 3, "rounds of the protocol comparison, each protocol once per round")
	fs.StringVar(&o.engine, "engine", "anthropic", "engine kind layer0 reaches the upstream with: anthropic, openai or sim")
	fs.StringVar(&o.out, "out", "", "directory for logs, profiles and report.json (default: a new temporary directory)")
	fs.StringVar(&o.gobench, "gobench", "./...", "packages whose go test benchmarks end the report (empty skips)")
	fs.StringVar(&o.benchtime, "benchtime", "200ms", "go test -benchtime")
	_ = fs.Parse(os.Args[1:])
	var err error
	if o.rates, err = parseRates(*rates); err == nil {
		o.streamRates, err = parseRates(*streamRates)
	}
	if err == nil && o.oneConn && (o.oneConnRnds < 1 || o.oneConnDur <= 0) {
		err = errors.New("-one-conn-rounds and -one-conn-duration must be positive")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if o.out == "" {
		if o.out, err = os.MkdirTemp("", "layer0-bench-"); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
	} else if err = os.MkdirAll(o.out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := report(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// childMain returns the child the arguments ask this executable to be (see startChild), or nil
// for none.
func childMain(args []string) func() error {
	if len(args) == 0 {
		return nil
	}
	switch args[0] {
	case childUpstream:
		return func() error { return runUpstreamChild(args[1:]) }
	case childGateway:
		return func() error { return runGatewayChild(args[1:]) }
	case childProxy:
		return func() error { return runProxyChild(args[1:]) }
	}
	return nil
}

func exit(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// parseRates parses a comma-separated list of positive rates.
func parseRates(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		r, err := strconv.ParseFloat(f, 64)
		if err != nil || r <= 0 {
			return nil, fmt.Errorf("rate %q: want a positive number", f)
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, errors.New("no rates given")
	}
	return out, nil
}

// logf writes a progress line to stderr, so that stdout holds only the report.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}
