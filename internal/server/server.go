// Package server is layer0's HTTP face: it routes a request to its client format's decoder,
// runs the pipeline, encodes the response events back in that format, writes every error in the
// client's own format, and writes one access-log record per request. It holds the live pipeline
// in an atomic pointer so a reload swaps it without touching requests in flight.
package server

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/layer0ai/layer0/internal/accesslog"
	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/conversation"
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
	// DecodeInPlace lets the strings of a /v1/messages, /v1/chat/completions or /v1/responses
	// request point into the body's pooled buffer instead of a copy of it (see bodyText). Every
	// part of the gateway that keeps a string of a request past its end copies it; code of the
	// application's that sees requests (an engine kind or a picker of its own) may not, so it is
	// set only without such code.
	DecodeInPlace bool
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
	// inPlace is Options.DecodeInPlace.
	inPlace bool
	bufs    sync.Pool
	// xs pools exchanges: one is about 2 KB (the call's record, held events and writers),
	// allocated per request before.
	xs sync.Pool
}

// New returns a server serving, for each request, the snapshot live returns then.
func New(live func() *Snapshot, o Options) *Server {
	s := &Server{live: live, access: o.AccessLog, logger: o.Logger, metrics: o.Metrics, load: o.EngineLoad, adminOnly: o.AdminOnly,
		traces: o.Traces, ready: o.Ready, config: o.Config, logScrapes: o.LogScrapes, inPlace: o.DecodeInPlace}
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
	// armedAt is when armWrite last set the write deadline.
	armedAt time.Time
	out     *[]byte // the response body
	front   *front  // the client's format
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
	// hv holds the values of the headers the server sets (request id, timings) and the
	// answer's id: one allocation per request for all of them. It is not part of the pooled
	// exchange because net/http may read the handler's header map after the handler returns,
	// and the request id outlives the request.
	hv *headerValues
	// Parts of the call kept here so that they come with the pooled exchange instead of being
	// allocated per request: the pass-through offer, the stream's writer, the collector of a
	// complete answer.
	fwd pipeline.Forward
	stw streamWriter
	col llm.Collector
	// blocks is where the collector's Response.Content starts: an answer of one or two blocks
	// costs no allocation for them. Nothing keeps Content past the request (a stored Responses
	// API answer copies its blocks: assistantTurn).
	blocks [2]llm.Block
	enc    lazyEncoder
	ast    anthropicStart
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
		if !lv.CORS.preflight(w, r) {
			lv.CORS.refuse(w, r)
		}
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
	x.hv = new(headerValues)
	rec.RequestID = x.hv.keep(ids.AppendRequest(x.hv.room()))
	if lv.Tracer != nil && !admin && isGeneration(r.URL.Path) {
		x.tel = lv.Tracer
		x.ctx, x.span = x.tel.Start(x.ctx, r.Header, rec.Start)
		x.call.Traced = x.span.IsRecording()
	}
	h := w.Header()
	x.hv.v[hvRequestID] = rec.RequestID
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
	if isAPI(r.URL.Path) && !x.authenticate() {
		x.finish()
		return
	}
	x.route(lv.Playground)
	abandoned := x.call.Record.ErrorType == "canceled" && !x.wrote
	x.finish()
	if abandoned {
		// The client went away (or half-closed mid-body, which reads the same): it gets no
		// answer, and the server must not send its implicit 200 either. The connection ends.
		panic(http.ErrAbortHandler)
	}
}

// authenticate runs L4 auth and the header size limit, once for every API endpoint before any
// body is read, and turns on the debug trace where the caller asks and may have it. It reports
// false, the failure answered, when the caller is refused.
func (x *exchange) authenticate() bool {
	r := x.r
	key, err := x.p.Admit(r.Header)
	if err != nil {
		x.fail(err)
		return false
	}
	x.call.Key, x.call.Header = key, r.Header // the stages read headers too (X-Offload-Target)
	x.call.Record.Key = key.Name
	// Without keys (served only on loopback) every caller may ask, as it may read the traces.
	if (key.Debug || key == pipeline.Anonymous()) && r.Header.Get("X-Layer0-Debug") == "1" {
		x.debug = true // a stream ends with the trace (finish)
		if x.s.traces != nil {
			// The trace is kept once the request ends: the client fetches it by this id.
			h := x.w.Header()
			h["X-Layer0-Trace-Id"] = h["Request-Id"]
		}
	}
	return true
}

// route answers the request by its path (and, for some, its method or the API its client
// speaks); playground says the web playground is served.
func (x *exchange) route(playground bool) {
	r := x.r
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
	case !x.s.adminOnly && isAdminPath(path):
		x.admin(false)
	case !x.s.adminOnly && isDebugPath(path):
		x.debugOnMain()
	case !x.s.adminOnly && path == spendPath:
		x.spendOnMain()
	case playground && (path == "/" || isPlaygroundPath(path)):
		x.onlyMethod(http.MethodGet, x.playground)
	default:
		x.fail(apierr.New(apierr.NotFound, "%s %s: no such endpoint", r.Method, sanitize(path)))
	}
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
