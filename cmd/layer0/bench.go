package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/layer0ai/layer0/internal/bench"
)

const benchUsage = `Usage:
  layer0 bench [flags]                  load a server at a fixed rate (--rate) or with N connections (--conns)
  layer0 bench --workload shared-prefix [flags]
                                        groups of users sharing long system prompts, conversations growing
                                        turn by turn: TTFT, the share of prompt tokens the engines served
                                        from cache, and requests per replica
  layer0 bench upstream [--addr ...]    run the fast upstream that benchmarks put behind layer0

Flags:
`

// runBench implements `layer0 bench` and `layer0 bench upstream`.
func runBench(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "upstream" {
		return runBenchUpstream(args[1:], stdout, stderr)
	}
	fs := newFlagSet("bench", benchUsage, stderr)
	var (
		cfg     bench.Config
		headers benchHeaderFlag
	)
	fs.StringVar(&cfg.URL, "url", "http://127.0.0.1:8080", "server base URL, or a full URL with its path")
	format := fs.String("format", "anthropic", "request format: anthropic, openai or binary")
	fs.BoolVar(&cfg.Stream, "stream", false, "ask for streamed responses (SSE); binary always streams")
	fs.IntVar(&cfg.BinaryVersion, "binary-version", 1, "binary protocol version: 1 or 2")
	fs.BoolVar(&cfg.BinaryText, "binary-text", false, "binary version 2: ask for text frames instead of token IDs")
	httpVersion := fs.String("http", "1.1", "HTTP version: 1.1, 2 (h2 over TLS for https, h2c prior knowledge for http), or 3 (QUIC; https only)")
	fs.BoolVar(&cfg.NetHTTP, "nethttp", false, "use net/http's client for cleartext HTTP/1.1 instead of the built-in one")
	fs.BoolVar(&cfg.Insecure, "insecure", false, "skip TLS certificate verification")
	fs.Float64Var(&cfg.Rate, "rate", 0, "open loop: requests per second, latency measured from each request's scheduled time; 0 = closed loop")
	fs.IntVar(&cfg.MaxInFlight, "max-inflight", 10000, "open loop: most requests in flight (worker pool size)")
	fs.IntVar(&cfg.Connections, "conns", 1, "closed loop: number of connections, each one request at a time (shared-prefix: default 16)")
	fs.IntVar(&cfg.H2Conns, "h2-conns", 1, "HTTP/2 and HTTP/3: number of connections the requests share")
	fs.DurationVar(&cfg.Duration, "duration", 0, "how long to send requests (default 10s when --requests is not set)")
	fs.IntVar(&cfg.Requests, "requests", 0, "number of requests to send (0: bounded by --duration only)")
	fs.DurationVar(&cfg.Timeout, "timeout", 30*time.Second, "per-request timeout")
	fs.DurationVar(&cfg.LateAfter, "late-after", time.Millisecond, "a request sent this far behind its schedule counts as late")
	fs.StringVar(&cfg.Model, "model", "sim", "model to request; shared-prefix: a comma-separated list sends group g to the g-th mod their number")
	fs.IntVar(&cfg.MaxTokens, "max-tokens", 100, "max_tokens to request (shared-prefix: default 16)")
	fs.StringVar(&cfg.Prompt, "prompt", "", "user message (default: a short sentence)")
	fs.StringVar(&cfg.APIKey, "api-key", "", "API key (default $LAYER0_API_KEY)")
	fs.Var(&headers, "header", "extra request header NAME:VALUE (repeatable)")
	allowErrors := fs.Bool("allow-errors", false, "exit 0 even when requests fail (a run that overloads a server on purpose)")
	workload := fs.String("workload", "single", "single (one request body for the whole run) or shared-prefix")
	var sp bench.SharedPrefixConfig
	fs.IntVar(&sp.Groups, "groups", 8, "shared-prefix: groups of users, each with its own system prompt")
	fs.IntVar(&sp.UsersPerGroup, "users", 4, "shared-prefix: users per group")
	fs.IntVar(&sp.PrefixTokens, "prefix-tokens", 1000, "shared-prefix: length of each group's system prompt in tokens")
	fs.IntVar(&sp.Turns, "turns", 1, "shared-prefix: requests per conversation, each carrying the ones before")
	fs.Float64Var(&sp.Skew, "skew", 0, "shared-prefix: share of requests sent by group 0 (0: groups drawn evenly)")
	fs.StringVar(&sp.SessionHeader, "session-header", "x-session-id", "shared-prefix: header carrying each conversation's id (\"-\": none)")
	fs.Uint64Var(&sp.Seed, "seed", 1, "shared-prefix: seed of the draw of groups and users")
	jsonOut := fs.Bool("json", false, "print the report as JSON")
	progress := fs.String("progress", "auto", "progress bar on stderr: auto (when a terminal), on or off")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("bench: unexpected argument %q", fs.Arg(0))
	}
	defaultKey(&cfg.APIKey)
	var err error
	if cfg.Format, err = bench.ParseFormat(*format); err != nil {
		return usageError{err: err}
	}
	switch *httpVersion {
	case "1.1", "1":
	case "2":
		cfg.HTTP2 = true
	case "3":
		cfg.HTTP3 = true
	default:
		return usagef("bench: --http %q: want 1.1, 2 or 3", *httpVersion)
	}
	cfg.Header = http.Header(headers)
	switch *progress {
	case "on":
		cfg.Progress = stderr
	case "auto":
		if benchIsTerminal(stderr) {
			cfg.Progress = stderr
		}
	case "off":
	default:
		return usagef("bench: --progress %q: want auto, on or off", *progress)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch *workload {
	case "single":
	case "shared-prefix":
		return runSharedPrefix(ctx, fs, cfg, sp, *jsonOut, *allowErrors, stdout)
	default:
		return usagef("bench: --workload %q: want single or shared-prefix", *workload)
	}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	return benchResult(rep, rep.Outcome, *jsonOut, *allowErrors, stdout)
}

// benchResult prints a run's report (as JSON with jsonOut) and then says, as the command's
// error, why the run failed: no request sent, or some failed (unless allowErrors).
func benchResult(rep interface{ WriteText(io.Writer) error }, o bench.Outcome, jsonOut, allowErrors bool, stdout io.Writer) error {
	var err error
	if jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = rep.WriteText(stdout)
	}
	if err != nil {
		return err
	}
	if oerr := o.Err(); oerr != nil && (!allowErrors || o.Sent == 0) {
		return fmt.Errorf("bench: %w", oerr) // the report is printed; the exit code says the run failed
	}
	return nil
}

// runSharedPrefix runs `layer0 bench --workload shared-prefix`: the flags common to both
// workloads come from cfg, those left unset take the workload's own defaults.
func runSharedPrefix(ctx context.Context, fs *flag.FlagSet, cfg bench.Config, sp bench.SharedPrefixConfig, jsonOut, allowErrors bool, stdout io.Writer) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, name := range []string{"stream", "binary-version", "binary-text", "http", "nethttp", "insecure", "h2-conns", "prompt", "late-after"} {
		if set[name] {
			return usagef("bench: --%s does not apply to the shared-prefix workload", name)
		}
	}
	sp.URL, sp.Format, sp.APIKey, sp.Header = cfg.URL, cfg.Format, cfg.APIKey, cfg.Header
	sp.Rate, sp.MaxInFlight, sp.Duration, sp.Requests, sp.Timeout = cfg.Rate, cfg.MaxInFlight, cfg.Duration, cfg.Requests, cfg.Timeout
	sp.Models = strings.Split(cfg.Model, ",")
	if set["conns"] {
		sp.Connections = cfg.Connections
	}
	if set["max-tokens"] {
		sp.MaxTokens = cfg.MaxTokens
	}
	rep, err := bench.RunSharedPrefix(ctx, sp)
	if err != nil {
		return err
	}
	return benchResult(rep, rep.Outcome, jsonOut, allowErrors, stdout)
}

// runBenchUpstream implements `layer0 bench upstream`: it serves until interrupted.
func runBenchUpstream(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench upstream", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg bench.UpstreamConfig
	addr := fs.String("addr", "127.0.0.1:9000", "listen address HOST:PORT")
	fs.IntVar(&cfg.Tokens, "tokens", 100, "tokens in every response")
	fs.DurationVar(&cfg.TTFT, "ttft", 0, "delay before the first token")
	fs.DurationVar(&cfg.ITL, "itl", 0, "delay between tokens")
	fs.StringVar(&cfg.Model, "model", "bench-upstream", "model name in the responses")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("bench upstream: unexpected argument %q", fs.Arg(0))
	}
	up, err := bench.NewUpstream(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("bench upstream: %w", err)
	}
	fmt.Fprintf(stdout, "bench upstream listening on %s (%d tokens, ttft %s, itl %s)\n", ln.Addr(), cfg.Tokens, cfg.TTFT, cfg.ITL)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- up.Serve(ln) }()
	select {
	case err = <-served:
	case <-ctx.Done():
	}
	return errors.Join(err, up.Close())
}

// benchHeaderFlag collects repeated --header NAME:VALUE flags.
type benchHeaderFlag http.Header

// String implements flag.Value.
func (h benchHeaderFlag) String() string {
	var parts []string
	for k, vs := range h {
		for _, v := range vs {
			parts = append(parts, k+": "+v)
		}
	}
	return strings.Join(parts, ", ")
}

// Set implements flag.Value.
func (h *benchHeaderFlag) Set(s string) error {
	name, value, ok := strings.Cut(s, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return fmt.Errorf("header %q: want NAME:VALUE", s)
	}
	if *h == nil {
		*h = benchHeaderFlag{}
	}
	http.Header(*h).Add(name, strings.TrimSpace(value))
	return nil
}

// benchIsTerminal reports whether w is a character device, such as a terminal.
func benchIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
