// Package bench is layer0's load generator: open-loop at a fixed request rate, each request's
// latency measured from the time it was scheduled to be sent (so a stalled server cannot hide its
// queue, the "coordinated omission" of closed-loop tools), or closed-loop with N connections. It
// speaks Anthropic and OpenAI JSON/SSE and the binary protocol over HTTP/1.1 (its own zero-alloc
// client) and HTTP/2, counts tokens with zero-alloc readers (SSE of its own, binary frames through
// internal/wire/binary's decoder), and records latency, time to first token and inter-token time
// into fixed-size log-linear histograms. It also holds the fast upstream that benchmarks put
// behind layer0 (see Upstream), and the shared-prefix workload, which measures how a pool of
// engines with prefix caches is placed on (see RunSharedPrefix).
package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/binary"
)

// Config describes one run. The zero value is not usable: URL is required; everything else has a
// default filled in by Run.
type Config struct {
	// URL is the server's base URL (http://host:port) or a full URL with a path. Without a path
	// the format's path is used: /v1/messages, or /v1/chat/completions for OpenAI.
	URL string
	// Format is the client format of the requests. Default Anthropic.
	Format llm.Format
	// Stream asks for a streamed response (SSE). Binary responses are always streamed.
	Stream bool
	// BinaryVersion is the binary protocol version, 1 or 2. Default 1.
	BinaryVersion int
	// BinaryText asks a version-2 server for text frames instead of token IDs.
	BinaryText bool
	// HTTP2 uses HTTP/2: over TLS (ALPN h2) for https URLs, cleartext with prior knowledge (h2c)
	// for http URLs. Default HTTP/1.1.
	HTTP2 bool
	// HTTP3 uses HTTP/3 over QUIC (internal/h3's transport, HTTP/3 only, no fallback); the URL
	// must be https.
	HTTP3 bool
	// NetHTTP uses net/http's client for HTTP/1.1 over cleartext too, instead of the generator's
	// own client (which is several times cheaper per request). https always uses net/http.
	NetHTTP bool
	// Insecure skips TLS certificate verification.
	Insecure bool

	// Rate is the open-loop request rate in requests per second; 0 selects closed loop.
	Rate float64
	// MaxInFlight bounds the open-loop requests in flight (the worker pool). A request due while
	// all workers are busy waits for one, its latency still counted from its scheduled time.
	// Default 10000.
	MaxInFlight int
	// Connections is the number of closed-loop workers, each with its own HTTP/1.1 connection,
	// each sending its next request when the previous one ends. Default 1.
	Connections int
	// H2Conns is the number of HTTP/2 or HTTP/3 connections the workers share. Default 1.
	H2Conns int

	// Duration bounds the run: no request is scheduled (open loop) or started (closed loop) after
	// it; requests in flight then are waited for, up to Timeout. Default 10s when Requests is 0.
	Duration time.Duration
	// Requests bounds the number of requests; 0 means only Duration bounds the run.
	Requests int
	// Timeout bounds each request from its send. Default 30s.
	Timeout time.Duration
	// LateAfter is how far behind its schedule a request may be sent before it counts as late.
	// Default 1ms.
	LateAfter time.Duration

	// Model is the model requested. Default "sim".
	Model string
	// MaxTokens is the requested max_tokens. Default 100.
	MaxTokens int
	// Prompt is the user message. Default a short sentence.
	Prompt string
	// APIKey, when set, is sent as x-api-key (Anthropic, binary) or a Bearer token (OpenAI).
	APIKey string
	// Header holds extra request headers.
	Header http.Header

	// Progress, when set, receives a one-line progress bar rewritten in place every 250ms; it is
	// meant for a terminal.
	Progress io.Writer
}

// targetURL checks the workload's URL raw, an http or https one with a host, and completes it
// with the API path of format f where it has none. It returns the URL, completed, and its parse.
func targetURL(raw string, f llm.Format) (string, *url.URL, error) {
	if raw == "" {
		return "", nil, errors.New("bench: URL is required")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", nil, fmt.Errorf("bench: URL %q: want http://host:port or https://host:port", raw)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = pathFor(f)
		raw = u.String()
	}
	return raw, u, nil
}

// withDefaults returns c with defaults filled in, or an error naming the bad field.
func (c Config) withDefaults() (Config, error) {
	target, u, err := targetURL(c.URL, c.Format)
	if err != nil {
		return c, err
	}
	c.URL = target
	switch {
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return c, fmt.Errorf("bench: rate %v: want a positive number of requests per second", c.Rate)
	case c.Duration < 0, c.Requests < 0, c.Timeout < 0, c.MaxInFlight < 0, c.Connections < 0, c.H2Conns < 0:
		return c, errors.New("bench: durations and counts must not be negative")
	case c.MaxTokens < 0:
		return c, fmt.Errorf("bench: max tokens %d is negative", c.MaxTokens)
	case c.HTTP3 && c.HTTP2:
		return c, errors.New("bench: HTTP/2 and HTTP/3 are exclusive")
	case c.HTTP3 && u.Scheme != "https":
		return c, fmt.Errorf("bench: URL %q: HTTP/3 needs an https URL", c.URL)
	}
	if c.Duration == 0 && c.Requests == 0 {
		c.Duration = 10 * time.Second
	}
	c.Timeout = cmp.Or(c.Timeout, 30*time.Second)
	c.LateAfter = cmp.Or(c.LateAfter, time.Millisecond)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, 10000)
	c.Connections = cmp.Or(c.Connections, 1)
	c.H2Conns = cmp.Or(c.H2Conns, 1)
	c.Model = cmp.Or(c.Model, "sim")
	c.MaxTokens = cmp.Or(c.MaxTokens, 100)
	c.Prompt = cmp.Or(c.Prompt, "Write a short story about a load generator that never coordinated its omissions.")
	if c.Format == llm.FormatBinary {
		c.Stream = true
	}
	c.BinaryVersion = cmp.Or(c.BinaryVersion, int(binary.V1))
	if c.BinaryVersion != int(binary.V1) && c.BinaryVersion != int(binary.V2) {
		return c, fmt.Errorf("bench: binary version %d: want 1 or 2", c.BinaryVersion)
	}
	if c.BinaryText && c.BinaryVersion == int(binary.V1) {
		return c, errors.New("bench: binary text frames need version 2")
	}
	return c, nil
}

// binaryMode is the binary protocol mode the configuration asks for.
func (c Config) binaryMode() binary.Mode {
	return binary.Mode{Version: binary.Version(c.BinaryVersion), Text: c.BinaryText}
}

// Run performs one bounded run and returns its report. It stops early, reporting what was done,
// when ctx is canceled.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	body, ctype, err := requestBody(cfg.Format, cfg.Model, cfg.Prompt, cfg.MaxTokens, cfg.Stream, cfg.binaryMode())
	if err != nil {
		return nil, err
	}
	hdr := requestHeader(cfg.Format, ctype, cfg.APIKey, cfg.Header)
	r := &runner{
		cfg:    cfg,
		kind:   parserKindFor(cfg.Format, cfg.Stream),
		shards: make([]shard, max(8, 2*runtime.GOMAXPROCS(0))),
	}
	newClient, closeClients, err := clientFactory(cfg, body, hdr, &r.wire)
	if err != nil {
		return nil, err
	}
	defer closeClients()
	r.newClient = newClient
	r.base = time.Now()
	stopProgress := r.startProgress()
	if cfg.Rate > 0 {
		r.openLoop(ctx)
	} else {
		r.closedLoop(ctx)
	}
	stopProgress()
	return r.report(), nil
}

// runner is one run in progress.
type runner struct {
	cfg       Config
	kind      parserKind
	newClient func(worker int) client
	base      time.Time // offsets (scheduled, sent, received) are measured from here
	shards    []shard

	started  atomic.Uint64 // requests handed to a worker
	finished atomic.Uint64 // requests completed, successfully or not
	errors   atomic.Uint64 // failed requests
	blocked  atomic.Uint64 // open loop: requests that found every worker busy
	inflight atomic.Int64  // requests being sent or received now
	peak     atomic.Int64  // the most requests in flight at once
	wire     wireCounter   // bytes on the generator's sockets
}

// spinMargin is how long before a request's time the scheduler stops sleeping and spins: on the
// 2-core VM this was measured on, nanosleep overshoots by 26µs at the median and 38µs at p90.
// Spinning costs at most this much CPU per request (6% of a core at 2,000 req/s).
const spinMargin = 40 * time.Microsecond

// maxSleepStep bounds one sleep of the open-loop scheduler, so that it notices a stop quickly.
const maxSleepStep = 10 * time.Millisecond

// since is the monotonic offset of now from the run's start.
func (r *runner) since() time.Duration { return time.Since(r.base) }

// openLoop schedules request i at i/Rate seconds from the start and hands it to an idle worker,
// starting a new one (up to MaxInFlight) when none is idle.
func (r *runner) openLoop(ctx context.Context) {
	jobs := make(chan time.Duration)
	var wg sync.WaitGroup
	workers := 0
	perReq := float64(time.Second) / r.cfg.Rate
schedule:
	for i := 0; r.cfg.Requests == 0 || i < r.cfg.Requests; i++ {
		sched := time.Duration(float64(i) * perReq)
		if r.cfg.Duration > 0 && sched >= r.cfg.Duration {
			break
		}
		if sched > r.since() {
			// Let the workers just handed requests run on this P now rather than wait for
			// another thread to wake and steal them while this one sleeps in a syscall.
			runtime.Gosched()
		}
		for d := sched - r.since(); d > spinMargin; d = sched - r.since() {
			if ctx.Err() != nil {
				break schedule
			}
			preciseSleep(d - spinMargin)
		}
		for r.since() < sched { // the last microseconds: sleeps overshoot by about this much
		}
		if ctx.Err() != nil {
			break
		}
		r.started.Add(1)
		select {
		case jobs <- sched:
			continue
		default:
		}
		if workers < r.cfg.MaxInFlight {
			w := r.newWorker(workers)
			workers++
			wg.Add(1)
			go w.serveJobs(ctx, &wg, sched, jobs)
			continue
		}
		r.blocked.Add(1)
		select {
		case jobs <- sched:
		case <-ctx.Done():
			r.started.Add(^uint64(0)) // never sent
			break schedule
		}
	}
	close(jobs)
	wg.Wait()
}

// closedLoop runs Connections workers that each send their next request as soon as the previous
// one ends, until the request count or the duration is reached.
func (r *runner) closedLoop(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range r.cfg.Connections {
		w := r.newWorker(i)
		wg.Add(1)
		go w.serveLoop(ctx, &wg)
	}
	wg.Wait()
}

// claim reserves the next closed-loop request, reporting false when the run is over.
func (r *runner) claim(ctx context.Context) bool {
	if ctx.Err() != nil || (r.cfg.Duration > 0 && r.since() >= r.cfg.Duration) {
		return false
	}
	n := r.started.Add(1)
	if r.cfg.Requests > 0 && n > uint64(r.cfg.Requests) {
		r.started.Add(^uint64(0))
		return false
	}
	return true
}

func (r *runner) newWorker(i int) *worker {
	return &worker{r: r, id: i, cl: r.newClient(i), shard: &r.shards[i%len(r.shards)]}
}

// worker sends one request at a time over its own client (its own HTTP/1.1 connection).
type worker struct {
	r     *runner
	id    int
	cl    client
	shard *shard
	p     parser

	// Per request.
	status   int
	gotHead  bool
	sent     time.Duration
	firstTok time.Duration
	lastTok  time.Duration
	bytes    int
	itl      [256]time.Duration // inter-token times not yet recorded into the shard
	nITL     int
}

// serveJobs is an open-loop worker: it serves first, then whatever the scheduler hands it.
func (w *worker) serveJobs(ctx context.Context, wg *sync.WaitGroup, first time.Duration, jobs <-chan time.Duration) {
	defer wg.Done()
	defer w.cl.close()
	w.do(ctx, first)
	for sched := range jobs {
		w.do(ctx, sched)
	}
}

// serveLoop is a closed-loop worker.
func (w *worker) serveLoop(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	defer w.cl.close()
	for w.r.claim(ctx) {
		w.do(ctx, -1)
	}
}

// do sends one request scheduled at offset sched (-1: now, closed loop) and records its outcome.
func (w *worker) do(ctx context.Context, sched time.Duration) {
	w.p.reset(w.r.kind, binary.Version(w.r.cfg.BinaryVersion))
	w.status, w.gotHead, w.bytes, w.nITL = 0, false, 0, 0
	w.firstTok, w.lastTok = -1, -1
	w.sent = w.r.since()
	if sched < 0 {
		sched = w.sent
	}
	if n := w.r.inflight.Add(1); n > w.r.peak.Load() {
		for p := w.r.peak.Load(); n > p && !w.r.peak.CompareAndSwap(p, n); p = w.r.peak.Load() {
		}
	}
	err := w.cl.do(ctx, w)
	w.r.inflight.Add(-1)
	end := w.r.since()
	if err == nil && w.status == http.StatusOK {
		if n := w.p.finish(); n > 0 && w.firstTok < 0 {
			w.firstTok = end
		}
	}
	w.record(ctx, sched, end, err)
}

// head is called by the client when the response head has arrived.
func (w *worker) head(status int) {
	w.status, w.gotHead = status, true
}

// body is called by the client with each piece of a 200 response's body as it arrives.
func (w *worker) body(b []byte) {
	w.bytes += len(b)
	n := w.p.feed(b)
	if n == 0 {
		return
	}
	now := w.r.since()
	if w.firstTok < 0 {
		w.firstTok = now
	} else {
		w.addITL(now - w.lastTok)
	}
	for range n - 1 { // tokens read together arrived together
		w.addITL(0)
	}
	w.lastTok = now
}

// errorBody is called by the client with pieces of a non-200 response's body.
func (w *worker) errorBody(b []byte) { w.p.setErrPart(b) }

func (w *worker) addITL(d time.Duration) {
	if !w.r.kind.streamed() {
		return
	}
	if w.nITL == len(w.itl) {
		w.shard.mu.Lock()
		w.flushITLLocked()
		w.shard.mu.Unlock()
	}
	w.itl[w.nITL] = d
	w.nITL++
}

func (w *worker) flushITLLocked() {
	for _, d := range w.itl[:w.nITL] {
		w.shard.s.itl.Record(d)
	}
	w.nITL = 0
}

// record classifies the request's outcome and adds it to the worker's shard.
func (w *worker) record(ctx context.Context, sched, end time.Duration, err error) {
	kind, status := w.classify(ctx, err)
	ok := kind == numErrorKinds && status == 0
	w.r.finished.Add(1)
	if !ok {
		w.r.errors.Add(1)
	}
	sh := w.shard
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s := &sh.s
	lag := w.sent - sched
	s.lag.Record(lag)
	if lag > w.r.cfg.LateAfter {
		s.late++
	}
	s.lastEnd = max(s.lastEnd, end)
	switch {
	case ok:
		s.ok++
		s.latency.Record(end - sched)
		if w.r.kind.streamed() && w.firstTok >= 0 {
			s.ttft.Record(w.firstTok - sched)
		}
		w.flushITLLocked()
		s.tokens += uint64(w.p.outputTokens())
		s.events += uint64(w.p.tokens)
		s.bytes += uint64(w.bytes)
	case status != 0:
		if s.status == nil {
			s.status = map[int]uint64{}
		}
		s.status[status]++
		s.sample(statusKey(status), w.p.errMsg)
	default:
		s.kinds[kind]++
		switch {
		case err != nil:
			s.sample(kind.String(), []byte(err.Error()))
		case kind == ErrTruncated:
			s.sample(kind.String(), []byte(fmt.Sprintf("body ended after %d bytes and %d tokens without the end-of-stream marker", w.bytes, w.p.tokens)))
		default:
			s.sample(kind.String(), w.p.errMsg)
		}
	}
	w.nITL = 0
}

// classify returns the error kind (numErrorKinds for none) or the failing HTTP status.
func (w *worker) classify(ctx context.Context, err error) (ErrorKind, int) {
	switch {
	case err != nil && ctx.Err() != nil:
		return ErrCanceled, 0
	case err != nil && (errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded)):
		return ErrTimeout, 0
	case err != nil && !w.gotHead:
		return ErrTransport, 0
	case w.status != http.StatusOK:
		return 0, w.status
	case err != nil:
		return ErrTruncated, 0
	case w.p.broken || (w.p.failed && !w.r.kind.streamed()):
		return ErrProtocol, 0
	case w.p.failed:
		return ErrStream, 0
	case !w.p.done:
		return ErrTruncated, 0
	}
	return numErrorKinds, 0
}

func statusKey(status int) string { return fmt.Sprintf("status_%d", status) }

// snapshot merges the shards into one stats.
func (r *runner) snapshot() *stats {
	var all stats
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		all.merge(&sh.s)
		sh.mu.Unlock()
	}
	return &all
}
