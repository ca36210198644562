// Package server is layer0's HTTP face: it routes a request to its client format's decoder,
// runs the pipeline, encodes the response events back in that format, writes every error in the
// client's own format, and writes one access-log record per request. It holds the live pipeline
// in an atomic pointer so a reload swaps it without touching requests in flight.
package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/layer0ai/layer0/internal/accesslog"
	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/conversation"
	"github.com/layer0ai/layer0/internal/engine"
	"github.com/layer0ai/layer0/internal/ids"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/metrics"
	"github.com/layer0ai/layer0/internal/pipeline"
	"github.com/layer0ai/layer0/internal/telemetry"
	"github.com/layer0ai/layer0/internal/trace"
	"github.com/layer0ai/layer0/internal/wire/binary"
	otrace "go.opentelemetry.io/otel/trace"
)

// Options configure a Server. The zero value is usable: no access log, no metrics.
type Options struct {
	// AccessLog receives one record per request; nil disables it.
	AccessLog *accesslog.Logger
	// Logger is the process log; nil discards.
	Logger *slog.Logger
	// Metrics, when set, observes every request once and is served at GET /metrics.
	Metrics *metrics.Metrics
	// AdminOnly, when set, serves the operator's endpoints (/metrics, /metrics/engines/NAME)
	// only on the handler Admin returns, not on the Server itself.
	AdminOnly bool
	// EngineLoad, when set, returns the load of an embedded engine by name, served in the vLLM
	// format at GET /metrics/engines/NAME (so another layer0, or a test, can scrape it).
	EngineLoad func(name string) (metrics.Load, bool)
	// Traces, when set, keeps every request's decision trace, served at /debug/requests on the
	// admin handler (and on the Server itself, to keys with debug, when not AdminOnly).
	Traces *trace.Ring
	// Ready, when set, says why the gateway cannot serve now: /readyz answers 503 with the
	// reasons while it returns any. Nil is always ready.
	Ready func() []string
	// Config, when set, returns the running configuration with its secrets redacted, served
	// at GET /config on the admin handler only.
	Config func() ([]byte, error)
	// LogScrapes logs the operator's requests (/healthz, /readyz, /metrics) in the access log
	// too; by default they are not.
	LogScrapes bool
}

// Limits bound a request's body and the time its bytes may take, in both directions. Zero
// fields take the defaults below.
type Limits struct {
	// ReadBodyTimeout bounds reading a whole body (408 beyond); default 30s.
	ReadBodyTimeout time.Duration
	// MinBodyRate is the slowest a body may arrive, in bytes per second, after the first
	// BodyRateGrace (408 when it falls behind); default 1024, negative for no floor.
	MinBodyRate int64
	// WriteTimeout bounds each write to the client: a whole answer, or one flush of a stream;
	// default 30s.
	WriteTimeout time.Duration
	// BodyBytesInFlight is the memory all request bodies may hold at once (503 with
	// retry-after beyond); default 512 MiB.
	BodyBytesInFlight int64
}

// BodyRateGrace is how long a body may arrive at any rate before MinBodyRate applies.
const BodyRateGrace = 5 * time.Second

func (l *Limits) setDefaults() {
	if l.ReadBodyTimeout <= 0 {
		l.ReadBodyTimeout = config.DefaultReadBodyTimeout
	}
	if l.MinBodyRate == 0 {
		l.MinBodyRate = config.DefaultMinBodyRate
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = config.DefaultWriteTimeout
	}
	if l.BodyBytesInFlight <= 0 {
		l.BodyBytesInFlight = config.DefaultMaxBodyBytesInFlight
	}
}

// Snapshot is one configuration as the server serves it: the pipeline and the limits it runs
// with. The owner swaps whole snapshots (with everything else derived from the same
// configuration); the server reads the live one once per request, so a request never sees the
// pipeline of one configuration with the limits of another.
type Snapshot struct {
	Pipeline *pipeline.Pipeline
	Limits   Limits
	// CORS answers browsers' cross-origin checks; nil allows no origin.
	CORS *CORS
	// Playground serves the web playground at /playground (and redirects / there).
	Playground bool
	// Done, when set, is called as each request served from the snapshot ends, once per call
	// of the live function: the owner counts the requests a snapshot still serves.
	Done func()
	// Tracer, when set, traces the generation requests (/v1/messages, /v1/chat/completions)
	// with OpenTelemetry: a span per request, its context sent to the engines.
	Tracer *telemetry.Tracer
	// Hosts are the host names a loopback or admin listener serves beside localhost and IP
	// addresses (see Hosts); nil allows those only.
	Hosts Hosts
	// Responses, when set, keeps the Responses API's stored responses (store,
	// previous_response_id, GET and DELETE /v1/responses/{id}); nil keeps none, and an id is
	// never found.
	Responses conversation.Store
}

// NewSnapshot returns the snapshot of p with lim, its zero fields set to their defaults.
func NewSnapshot(p *pipeline.Pipeline, lim Limits) Snapshot {
	lim.setDefaults()
	return Snapshot{Pipeline: p, Limits: lim}
}

// Server is an http.Handler serving the layer0 APIs from the current pipeline.
type Server struct {
	live func() *Snapshot
	// inFlight is the bytes held by request bodies now, against Limits.BodyBytesInFlight.
	inFlight atomic.Int64
	access   *accesslog.Logger
	logger   *slog.Logger
	metrics  *metrics.Metrics
	load     func(string) (metrics.Load, bool)
	traces   *trace.Ring // nil keeps no traces
	ready    func() []string
	config   func() ([]byte, error)
	// logScrapes logs health checks and metrics scrapes in the access log.
	logScrapes bool
	// adminOnly keeps the operator's endpoints off the public handler.
	adminOnly bool
	bufs      sync.Pool
	// xs pools exchanges: one is about 2 KB (the call's record, held events and writers),
	// allocated per request before.
	xs sync.Pool
}

// New returns a server serving, for each request, the snapshot live returns then.
func New(live func() *Snapshot, o Options) *Server {
	s := &Server{live: live, access: o.AccessLog, logger: o.Logger, metrics: o.Metrics, load: o.EngineLoad, adminOnly: o.AdminOnly,
		traces: o.Traces, ready: o.Ready, config: o.Config, logScrapes: o.LogScrapes}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	s.bufs.New = func() any { b := make([]byte, 0, bodyChunk); return &b }
	return s
}

// bodyChunk is the size of a pooled buffer: a body starts in one and grows as its bytes arrive.
const bodyChunk = 16 << 10

// BodyBytesInFlight returns the bytes request bodies hold now.
func (s *Server) BodyBytesInFlight() int64 { return s.inFlight.Load() }

// exchange is one request/response in flight.
type exchange struct {
	s     *Server
	w     http.ResponseWriter
	r     *http.Request
	p     *pipeline.Pipeline
	lim   *Limits
	done  func()                  // the snapshot's Done
	rc    http.ResponseController // valid when hasRC
	hasRC bool
	call  pipeline.Call
	buf   *[]byte // the request body
	// held is the bytes of the body buffer counted against Limits.BodyBytesInFlight.
	held int64
	// bodyRead is set once the body was read to its end.
	bodyRead bool
	out      *[]byte // the response body
	front    *front  // the client's format
	// wrote is set once the status line went out: after it, errors go inside the stream.
	wrote bool
	// streamErr writes an error inside a stream that has begun.
	streamErr errorWriter
	// sw is the stream's writer once it began: finish hands its last bytes to net/http.
	sw *streamWriter
	// ended is set once the stream's stop event reached the client's encoder (end), or a
	// pass-through answer is complete: later flushes only hand bytes to net/http, which sends
	// them with the chunked body's end when the handler returns, microseconds later, in one
	// write instead of two.
	ended bool
	end   ending
	// hv holds the values of the headers the server sets (request id, timings): one
	// allocation per request for all of them. It is not part of the pooled exchange because
	// net/http may read the handler's header map after the handler returns.
	hv *headerValues
	// Parts of the call kept here so that they come with the pooled exchange instead of being
	// allocated per request: the pass-through offer, the stream's writer, the collector of a
	// complete answer.
	fwd pipeline.Forward
	stw streamWriter
	col llm.Collector
	enc lazyEncoder
	ast anthropicStart
	// Per-request options of the front: OpenAI's stream_options.include_usage, the binary
	// protocol's mode.
	includeUsage bool
	mode         binary.Mode
	// rsp is a Responses API request's own state (nil for the other formats).
	rsp *responseCall
	// stored is the snapshot's store of Responses API responses; nil keeps none.
	stored conversation.Store
	// debug is set when a key with debug asked for the request's trace (X-Layer0-Debug: 1).
	debug bool
	// ctx is the request's context, carrying its span when it is traced (span non-nil, ended
	// by finish with tel).
	ctx  context.Context
	span otrace.Span
	tel  *telemetry.Tracer
}

// errorWriter ends a stream that failed after it began with the format's error event.
type errorWriter interface {
	WriteError(*apierr.Error) error
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.serve(w, r, false) }

// Admin returns the handler of the operator's endpoints — /metrics, /metrics/engines/NAME,
// /healthz and /readyz — for a listener of their own (Options.AdminOnly).
func (s *Server) Admin() http.Handler { return adminHandler{s} }

type adminHandler struct{ s *Server }

func (a adminHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) { a.s.serve(w, r, true) }

// serve answers one request; admin is set on the operator's listener, which serves only the
// operator's endpoints.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, admin bool) {
	lv := s.live()
	if !admin && isPreflight(r) {
		// Answered here, before anything else: a preflight touches no pipeline, no log.
		lv.CORS.preflight(w, r)
		if lv.Done != nil {
			lv.Done()
		}
		return
	}
	x, _ := s.xs.Get().(*exchange)
	if x == nil {
		x = new(exchange)
	}
	*x = exchange{s: s, w: w, r: r, p: lv.Pipeline, lim: &lv.Limits, done: lv.Done, front: frontFor(r), ctx: r.Context(),
		stored: lv.Responses}
	rec := &x.call.Record
	rec.Start = time.Now()
	rec.Format = x.front.format
	rec.RequestID = ids.Request()
	if lv.Tracer != nil && !admin && isGeneration(r.URL.Path) {
		x.tel = lv.Tracer
		x.ctx, x.span = x.tel.Start(x.ctx, r.Header, rec.Start)
		x.call.Traced = x.span.IsRecording()
	}
	h := w.Header()
	x.hv = new(headerValues)
	x.hv[hvRequestID] = rec.RequestID
	h["Request-Id"] = x.hv.slice(hvRequestID)
	h["X-Request-Id"] = h["Request-Id"]
	if !admin {
		lv.CORS.actual(h, r) // before any answer, errors included: the page may read them
	}

	// DNS rebinding: a loopback or admin listener answers only for its own names.
	if !lv.Hosts.allowed(r, admin) {
		x.fail(hostRefused(r.Host))
		x.finish()
		return
	}
	// L4 auth and the header size limit, once for every API endpoint, before any body is read.
	if admin {
		x.admin(true)
		x.finish()
		return
	}
	if isAPI(r.URL.Path) {
		key, err := x.p.Admit(r.Header)
		if err != nil {
			x.fail(err)
			x.finish()
			return
		}
		x.call.Key, x.call.Header = key, r.Header // the stages read headers too (X-Offload-Target)
		rec.Key = key.Name
		// Without keys (served only on loopback) every caller may ask, as it may read the traces.
		if (key.Debug || key == pipeline.Anonymous()) && r.Header.Get("X-Layer0-Debug") == "1" {
			x.debug = true // a stream ends with the trace (finish)
			if s.traces != nil {
				// The trace is kept once the request ends: the client fetches it by this id.
				h["X-Layer0-Trace-Id"] = h["Request-Id"]
			}
		}
	}

	switch path := r.URL.Path; {
	case isGeneration(path):
		x.onlyMethod(http.MethodPost, x.serveMessage)
	case isVocabPath(path):
		x.vocabulary()
	case path == "/v1/cache":
		x.cacheQuery()
	case path == "/v1/embeddings":
		x.onlyMethod(http.MethodPost, x.embeddings)
	case strings.HasPrefix(path, "/v1/responses/"):
		if id, ok := responseID(path); ok {
			x.storedResponse(id)
		} else {
			x.fail(apierr.New(apierr.NotFound, "%s %s: no such endpoint", r.Method, sanitize(path)))
		}
	case path == "/v1/messages/count_tokens":
		x.onlyMethod(http.MethodPost, x.countTokens)
	case path == "/v1/models" && wantsOpenAI(r):
		x.onlyMethod(http.MethodGet, x.openAIModels)
	case path == "/v1/models":
		x.onlyMethod(http.MethodGet, x.listModels)
	case strings.HasPrefix(path, "/v1/models/") && wantsOpenAI(r):
		x.onlyMethod(http.MethodGet, func() { x.openAIModel(strings.TrimPrefix(path, "/v1/models/")) })
	case strings.HasPrefix(path, "/v1/models/"):
		x.onlyMethod(http.MethodGet, func() { x.getModel(strings.TrimPrefix(path, "/v1/models/")) })
	case path == "/healthz":
		x.onlyMethod(http.MethodGet, x.health)
	case path == "/readyz":
		x.onlyMethod(http.MethodGet, x.readiness)
	case path == "/v1/layer/negotiate":
		x.negotiate()
	case !s.adminOnly && isAdminPath(path):
		x.admin(false)
	case !s.adminOnly && isDebugPath(path):
		x.debugOnMain()
	case lv.Playground && (path == "/" || isPlaygroundPath(path)):
		x.onlyMethod(http.MethodGet, x.playground)
	default:
		x.fail(apierr.New(apierr.NotFound, "%s %s: no such endpoint", r.Method, sanitize(path)))
	}
	x.finish()
}

func (x *exchange) onlyMethod(method string, f func()) {
	if x.r.Method != method && !(method == http.MethodGet && x.r.Method == http.MethodHead) {
		x.w.Header().Set("Allow", method)
		x.fail(&apierr.Error{Kind: apierr.MethodNotAllowed, Code: "method_not_allowed",
			Message: x.r.Method + " " + sanitize(x.r.URL.Path) + ": method not allowed, use " + method})
		return
	}
	f()
}

// readBody reads the request body into a pooled buffer that grows with what arrives (never
// with what the client declares), refusing a body over the size limit with 413, one that would
// take the bodies in flight over their budget with 503, and one that arrives too slowly (whole
// body, or under the minimum rate) with 408.
func (x *exchange) readBody() ([]byte, bool) {
	// Before a byte is read: a cross-site page's form or text/plain body never runs as JSON.
	if ct := x.r.Header.Get("Content-Type"); !bodyTypeOK(ct) {
		x.fail(bodyTypeRefused(ct))
		return nil, false
	}
	lim := x.lim
	sizes := x.p.Sizes()
	if err := sizes.CheckBody(x.r.ContentLength); err != nil {
		x.fail(err)
		return nil, false
	}
	x.buf = x.s.bufs.Get().(*[]byte)
	b := (*x.buf)[:0]
	if !x.hold(int64(cap(b))) {
		return nil, false
	}
	start := time.Now()
	end := start.Add(lim.ReadBodyTimeout)
	var deadline time.Time
	defer func() {
		if !deadline.IsZero() && x.bodyRead {
			_ = x.controller().SetReadDeadline(time.Time{}) // the stream that follows is not bounded by it
		}
	}()
	for {
		if len(b) == cap(b) {
			if b = x.grow(b, sizes.MaxBodyBytes); b == nil {
				return nil, false
			}
		}
		// The deadline is the whole body's, or sooner where the bytes so far fall behind the
		// minimum rate: it moves later by one second per MinBodyRate bytes received.
		d := end
		if lim.MinBodyRate > 0 {
			if r := start.Add(BodyRateGrace + time.Duration(int64(len(b))*int64(time.Second)/lim.MinBodyRate)); r.Before(d) {
				d = r
			}
		}
		if !d.Equal(deadline) {
			deadline = d
			_ = x.controller().SetReadDeadline(d) // unsupported only off a real connection
		}
		n, err := x.r.Body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err := sizes.CheckBodyRead(int64(len(b))); err != nil {
			x.fail(err)
			return nil, false
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			x.failBody(err, len(b), time.Since(start))
			return nil, false
		}
	}
	*x.buf = b
	x.bodyRead = true
	return b, true
}

// grow returns b with twice its capacity (bounded by the size limit, and by the declared
// length when there is one), the growth counted against the bodies' budget; nil after failing
// the request when the budget is spent.
func (x *exchange) grow(b []byte, limit int64) []byte {
	n := 2 * cap(b)
	if cl := x.r.ContentLength; cl >= int64(len(b)) && cl+1 < int64(n) {
		n = int(cl + 1) // room for the declared body and the read that sees its end
	}
	if limit > 0 {
		n = int(min(int64(n), limit+1))
	}
	if n <= cap(b) {
		n = cap(b) + 1
	}
	if !x.hold(int64(n - cap(b))) {
		return nil
	}
	nb := make([]byte, len(b), n)
	copy(nb, b)
	// x.buf keeps pointing at this request's buffer: the pointer goes back to the pool at
	// finish, with the grown array (the smaller one is left to the garbage collector).
	*x.buf = nb
	return nb
}

// hold counts n more bytes of body against the budget of bodies in flight, or fails the
// request with 503 when that would exceed it.
func (x *exchange) hold(n int64) bool {
	if x.s.inFlight.Add(n) > x.lim.BodyBytesInFlight {
		x.s.inFlight.Add(-n)
		x.fail(&apierr.Error{Kind: apierr.Unavailable, Code: "BODY_BUDGET_EXHAUSTED", RetryAfter: time.Second,
			Message: "the server holds too many request bodies at once; retry shortly"})
		return false
	}
	x.held += n
	return true
}

// failBody fails a request whose body could not be read: 408 when it arrived too slowly, a
// client that went away is recorded as canceled (it gets nothing), anything else is a 400.
func (x *exchange) failBody(err error, n int, took time.Duration) {
	var ne net.Error
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		x.fail(&apierr.Error{Kind: apierr.RequestTimeout, Code: "REQUEST_TIMEOUT", Cause: err,
			Message: "the request body did not arrive in time: " + strconv.Itoa(n) + " bytes in " +
				took.Round(time.Millisecond).String() + " (the whole body must arrive within " + x.lim.ReadBodyTimeout.String() +
				minRate(x.lim.MinBodyRate) + ")"})
	case x.r.Context().Err() != nil || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
		x.fail(fmt.Errorf("%w: the client went away while sending its body: %w", context.Canceled, err))
	default:
		x.fail(apierr.Wrap(apierr.InvalidRequest, err, "could not read the request body"))
	}
}

func minRate(r int64) string {
	if r <= 0 {
		return ""
	}
	return ", and at " + strconv.FormatInt(r, 10) + " bytes per second or more after the first " + BodyRateGrace.String()
}

// controller returns the response controller of the exchange, made once.
func (x *exchange) controller() *http.ResponseController {
	if !x.hasRC {
		x.rc, x.hasRC = *http.NewResponseController(x.w), true // a copy: no allocation
	}
	return &x.rc
}

// armWrite bounds the next writes to the client by Limits.WriteTimeout.
func (x *exchange) armWrite() {
	_ = x.controller().SetWriteDeadline(time.Now().Add(x.lim.WriteTimeout)) // unsupported only off a real connection
}

// statusClientClosed is recorded (never sent) for a request whose client left before any
// response: nginx's 499.
const statusClientClosed = 499

// fail records err and writes it in the client's format: as an HTTP error response when nothing
// was sent yet, else inside the stream.
func (x *exchange) fail(err error) {
	e := apierr.From(err)
	rec := &x.call.Record
	rec.ErrorType = e.Kind.AnthropicType()
	rec.Cause = err
	if context.Cause(x.r.Context()) == ErrShutdown {
		// The drain time ran out: the client is still there and is told why its request ends.
		e = &apierr.Error{Kind: apierr.Unavailable, Code: "shutting_down", Cause: err,
			Message: "the server is shutting down; retry the request"}
		rec.ErrorType = e.Kind.AnthropicType()
	} else if errors.Is(err, context.Canceled) && (x.r.Context().Err() != nil || !x.bodyRead && x.buf != nil) ||
		errors.Is(err, engine.ErrClientWrite) {
		// The client went away, or stopped reading until a write to it timed out: nothing more
		// reaches it. The record keeps the status it was sent (or 499, nginx's "client closed
		// request", when it was sent none).
		rec.ErrorType = "canceled"
		if !x.wrote {
			rec.Status = statusClientClosed
		}
		return
	}
	if x.wrote {
		// The status line went out with the stream; the record keeps it and the error type.
		if x.streamErr != nil {
			if werr := x.streamErr.WriteError(e); werr != nil {
				x.s.logger.Debug("stream error not delivered", "request_id", rec.RequestID, "err", werr)
			}
		}
		return
	}
	rec.Status = e.Status()
	h := x.w.Header()
	if !x.bodyRead && x.r.ContentLength != 0 && x.r.ProtoMajor == 1 {
		// A refusal before the body was read (or while it was): close the connection after the
		// answer instead of waiting for a body that will not be used, which net/http would
		// otherwise drain first, for as long as the client takes to send it.
		h["Connection"] = connectionClose
		// …and net/http's close of the unread body must not wait for it either.
		_ = x.controller().SetReadDeadline(time.Now())
	}
	code := e.Code
	if code == "" {
		code = e.Kind.AnthropicType()
	}
	// One spelling for every code in the header (INVALID_BINARY is the binary protocol's); the body keeps
	// each format's own (OpenAI's codes are lower case).
	h.Set("X-Error-Code", strings.ToUpper(code))
	if e.RetryAfter > 0 {
		secs := int64((e.RetryAfter + time.Second - 1) / time.Second)
		h.Set("Retry-After", strconv.FormatInt(secs, 10))
		h.Set("Retry-After-Ms", strconv.FormatInt(e.RetryAfter.Milliseconds(), 10))
	}
	for k, v := range e.Header {
		h[k] = v
	}
	x.writeErrorBody(e)
}

var connectionClose = []string{"close"}

// The values of the cache's headers, shared by every response (one element, no room to append).
var (
	xCacheHit  = []string{"HIT"}
	xCacheMiss = []string{"MISS"}
	xLayer0    = map[string][]string{}
)

func init() {
	for _, v := range []string{pipeline.CacheHit, pipeline.CacheCoalesced, pipeline.CacheMiss, pipeline.CacheRefresh,
		pipeline.CacheBypass} {
		xLayer0[v] = []string{v}
	}
}

// setCacheHeaders tells the client what the response cache did: X-Cache is HIT for an answer
// replayed from the cache (stored, or coalesced with an identical request in flight) and MISS
// for an answer an engine produced for this request; X-Layer0-Cache says which of
// pipeline.Cache* happened.
func setCacheHeaders(h http.Header, what string) {
	if what == pipeline.CacheHit || what == pipeline.CacheCoalesced {
		h["X-Cache"] = xCacheHit
	} else {
		h["X-Cache"] = xCacheMiss
	}
	if v, ok := xLayer0[what]; ok {
		h["X-Layer0-Cache"] = v
	}
}

// headerValues holds the values of the headers the server sets, so that their []string values
// are slices of one array.
type headerValues [8]string

// Indexes into headerValues.
const (
	hvRequestID = iota
	hvResponseTime
	hvProcessingTime
	hvContentType
	hvContentLength
	hvEngine
	hvSimulated
	hvCacheControl
)

// slice returns the header value at i as a one-element []string.
func (hv *headerValues) slice(i int) []string { return hv[i : i+1 : i+1] }

// writeTimingHeaders sets X-Processing-Time (layer0's own time, engine time excluded) and
// X-Response-Time (total time in layer0 so far), both in milliseconds with µs precision.
// A length ≥ 0 is sent as Content-Length. The numbers share one string (one allocation, and
// none for the []string values, where each header cost two).
func (x *exchange) writeTimingHeaders(engine time.Duration, length int) {
	rec := &x.call.Record
	total := time.Since(rec.Start)
	h := x.w.Header()
	hv := x.hv
	var b [64]byte
	v := appendMillis(b[:0], total)
	n1 := len(v)
	v = appendMillis(v, total-engine)
	n2 := len(v)
	if length >= 0 {
		v = strconv.AppendInt(v, int64(length), 10)
	}
	nums := string(v)
	hv[hvResponseTime], hv[hvProcessingTime], hv[hvContentLength] = nums[:n1], nums[n1:n2], nums[n2:]
	h["X-Response-Time"] = hv.slice(hvResponseTime)
	h["X-Processing-Time"] = hv.slice(hvProcessingTime)
	if length >= 0 {
		h["Content-Length"] = hv.slice(hvContentLength)
	}
	if rec.Simulated {
		hv[hvSimulated] = "true"
		h["X-Layer0-Simulated"] = hv.slice(hvSimulated)
	}
	if rec.Engine != "" {
		hv[hvEngine] = rec.Engine
		h["X-Layer0-Engine"] = hv.slice(hvEngine)
	}
	if rec.Cache != "" {
		setCacheHeaders(h, rec.Cache)
	}
	if v := rec.Context.Header(); v != "" {
		h["X-Layer0-Context"] = []string{v}
	}
	// The caller's rate-limit state on every answer, as the Anthropic and OpenAI APIs send it
	// (a 429 carries its own, filled when it was refused).
	if !rec.RateLimited && rec.Status < 400 {
		if l := x.p.Limits(); l != nil && !x.call.RateHeader(h) {
			l.Header(rec.Key, h)
		}
	}
}

// appendMillis appends d in milliseconds with three decimals and "ms".
func appendMillis(dst []byte, d time.Duration) []byte {
	if d < 0 {
		d = 0
	}
	dst = strconv.AppendFloat(dst, float64(d.Microseconds())/1000, 'f', 3, 64)
	return append(dst, "ms"...)
}

// writeFull writes a complete response: timing headers, status, body.
func (x *exchange) writeFull(status int, contentType string, body []byte) {
	x.hv[hvContentType] = contentType
	x.w.Header()["Content-Type"] = x.hv.slice(hvContentType)
	x.writeTimingHeaders(x.call.Record.EngineTime, len(body))
	x.call.Record.Status = status
	x.wrote = true
	x.armWrite()
	x.w.WriteHeader(status)
	if x.r.Method != http.MethodHead {
		x.w.Write(body) //nolint:errcheck // the client went away; nothing to do
	}
}

// streamWriter is the server's one response writer, which stream encoders and the pass-through
// path write to. For a stream, the first write sends the status line and headers (so an error
// before it can still be a proper HTTP error), and Flush pushes to the network at once. Between
// flushes it collects the bytes in a pooled buffer and hands them to net/http in one Write: the
// pass-through path writes each SSE event as it reads it, and net/http's response writer costs a
// buffer copy, a chunk header and past 4 KiB a system call per Write (a 100-event stream from a
// fast engine: 6.1 writes per request before, 5.1 after).
//
// An answer that is not streamed (whole) is collected in the exchange's output buffer instead,
// and writePassed sends it with a Content-Length in one write when Serve returns; Flush does
// nothing. Flushing it as a stream would send it chunked, with the chunked body's end in a
// second write: a system call more per request (4 writes per request became 3, and the
// gateway's CPU per request fell by about 10%).
type streamWriter struct {
	x           *exchange
	contentType string
	whole       bool
	buf         *[]byte // written since the last flush; from the server's pool
}

// Write implements io.Writer.
func (sw *streamWriter) Write(b []byte) (int, error) {
	x := sw.x
	if sw.whole {
		if x.out == nil {
			x.out = x.s.bufs.Get().(*[]byte)
			*x.out = (*x.out)[:0]
		}
		*x.out = append(*x.out, b...)
		return len(b), nil
	}
	if !x.wrote {
		h := x.w.Header()
		hv := x.hv
		hv[hvContentType], hv[hvCacheControl] = sw.contentType, "no-cache"
		h["Content-Type"] = hv.slice(hvContentType)
		h["Cache-Control"] = hv.slice(hvCacheControl)
		x.writeTimingHeaders(x.call.Record.FirstEventEngine, -1)
		x.call.Record.Status = http.StatusOK
		x.wrote = true
		x.w.WriteHeader(http.StatusOK)
	}
	if sw.buf == nil {
		sw.buf = x.s.bufs.Get().(*[]byte)
		*sw.buf = (*sw.buf)[:0]
		x.sw = sw // finish hands over what was not flushed
	}
	*sw.buf = append(*sw.buf, b...)
	return len(b), nil
}

// drain hands the collected bytes to net/http, which sends them when the handler returns if
// nothing flushes before.
func (sw *streamWriter) drain() error {
	if sw.buf == nil || len(*sw.buf) == 0 {
		return nil
	}
	sw.x.armWrite()
	_, err := sw.x.w.Write(*sw.buf)
	*sw.buf = (*sw.buf)[:0]
	return err
}

// Flush pushes what was written to the client now. A whole answer, and a stream whose end was
// written (net/http sends it with the chunked body's end, in one write), are not flushed.
func (sw *streamWriter) Flush() error {
	if sw.whole {
		return nil
	}
	if err := sw.drain(); err != nil {
		return err
	}
	if sw.x.ended {
		return nil
	}
	rc := sw.x.controller()
	sw.x.armWrite()
	err := rc.Flush()
	if errors.Is(err, http.ErrNotSupported) {
		return nil
	}
	if err == nil && sw.x.r.ProtoMajor >= 2 {
		// The wait for the stream's next event is not a write: under HTTP/2 (and 3) a deadline
		// left armed would reset the stream when it passed, written to or not. Under HTTP/1.1
		// a deadline only bounds writes, and the next one arms its own.
		_ = rc.SetWriteDeadline(time.Time{})
	}
	return err
}

// ending is the client's sink behind the pipeline: it notes the stop event (exchange.ended).
type ending struct {
	llm.Sink
	x *exchange
}

// endAt returns sink behind an ending, for the call's Sink.
func (x *exchange) endAt(sink llm.Sink) llm.Sink {
	x.end = ending{sink, x}
	return &x.end
}

func (s *ending) Send(ev *llm.Event) error {
	if ev.Kind == llm.EventStop {
		s.x.ended = true
	}
	return s.Sink.Send(ev)
}

// writePassed writes a whole answer the pass-through path collected as a complete response.
func (x *exchange) writePassed() {
	var body []byte
	if x.out != nil {
		body = *x.out
	}
	x.writeFull(http.StatusOK, x.stw.contentType, body)
}

func (x *exchange) health() {
	x.writeFull(http.StatusOK, "application/json", []byte(`{"status":"ok"}`))
}

// readiness serves GET /readyz: 200 {"status":"ok"} while the gateway can serve every required
// model, else 503 {"status":"unavailable","reasons":[…]} naming each model that cannot and why.
func (x *exchange) readiness() {
	var reasons []string
	if x.s.ready != nil {
		reasons = x.s.ready()
	}
	if len(reasons) == 0 {
		x.health()
		return
	}
	b, err := json.Marshal(struct {
		Status  string   `json:"status"`
		Reasons []string `json:"reasons"`
	}{"unavailable", reasons})
	if err != nil {
		x.fail(err)
		return
	}
	x.writeFull(http.StatusServiceUnavailable, "application/json", b)
}

// finish completes the record, hands it to the access log and returns the exchange to the
// pool: x must not be used after it.
func (x *exchange) finish() {
	if x.debug && x.sw != nil {
		x.inlineTrace()
	}
	if x.sw != nil {
		_ = x.sw.drain() // the client went away when it fails; the record says what was sent
		if x.r.ProtoMajor == 1 {
			x.armWrite() // for the stream's last bytes, which net/http writes after the handler
		}
	}
	rec := &x.call.Record
	if rec.Status == 0 {
		rec.Status = http.StatusOK
	}
	total := time.Since(rec.Start)
	if x.s.metrics != nil && isAPI(x.r.URL.Path) {
		x.s.metrics.Observe(rec, routeOf(x.r.URL.Path), total)
	}
	if x.s.access != nil && (x.s.logScrapes || !isScrape(x.r.URL.Path)) {
		e := accesslog.Entry{Record: *rec, Method: x.r.Method, Path: x.r.URL.Path, Key: rec.Key, Duration: total}
		x.s.access.Write(&e)
	}
	if x.s.traces != nil && isAPI(x.r.URL.Path) {
		x.s.traces.Add(rec, x.r.Method, x.r.URL.Path, total)
	}
	if x.span != nil {
		x.tel.End(x.span, rec, x.call.Request, rec.Start.Add(total))
	}
	if x.held != 0 {
		x.s.inFlight.Add(-x.held)
	}
	x.s.putBuf(x.buf)
	x.s.putBuf(x.out)
	x.buf, x.out = nil, nil
	if sw := x.sw; sw != nil {
		x.s.putBuf(sw.buf)
		sw.buf, x.sw = nil, nil
	}
	s, done := x.s, x.done
	*x = exchange{} // nothing of this request outlives it
	s.xs.Put(x)
	if done != nil {
		done()
	}
}

// inlineTrace ends an SSE stream with the request's trace as a comment line,
// ": layer0-trace {JSON}", which SSE clients skip (the official SDKs among them): after the
// stream's last event, so a client reading the raw stream finds it last. Other streams (the
// binary protocol's frames) and a client that left get nothing.
func (x *exchange) inlineTrace() {
	rec := &x.call.Record
	if rec.ErrorType == "canceled" || !strings.HasPrefix(x.sw.contentType, "text/event-stream") {
		return
	}
	status := rec.Status
	if status == 0 {
		status = http.StatusOK
	}
	r := *rec
	r.Status = status
	b, err := json.Marshal(trace.FromRecord(&r, x.r.Method, x.r.URL.Path, time.Since(rec.Start)))
	if err != nil {
		return
	}
	buf := *x.sw.buf
	buf = append(buf, ": layer0-trace "...)
	buf = append(buf, b...) // JSON has no raw newline: one comment line
	*x.sw.buf = append(buf, "\n\n"...)
}

// output appends a response body into a pooled buffer returned at finish.
func (x *exchange) output(appendBody func([]byte) []byte) []byte {
	if x.out == nil {
		x.out = x.s.bufs.Get().(*[]byte)
	}
	*x.out = appendBody((*x.out)[:0])
	return *x.out
}

func (s *Server) putBuf(b *[]byte) {
	if b != nil && cap(*b) <= 1<<20 {
		*b = (*b)[:0]
		s.bufs.Put(b)
	}
}

// sanitize makes a client-supplied string safe to echo in an error message.
func sanitize(s string) string {
	if len(s) > 200 {
		s = s[:200]
	}
	return string(bytes.ToValidUTF8([]byte(s), []byte("?")))
}
