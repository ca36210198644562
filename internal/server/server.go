// Package server is layer0's HTTP face: it routes a request to its client format's decoder,
// runs the pipeline, encodes the response events back in that format, writes every error in the
// client's own format, and writes one access-log record per request. It holds the live pipeline
// in an atomic pointer so a reload swaps it without touching requests in flight.
package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/layer0ai/layer0/internal/accesslog"
	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/ids"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/metrics"
	"github.com/layer0ai/layer0/internal/pipeline"
)

// Options configure a Server. The zero value is usable: 32 MiB bodies, no access log.
type Options struct {
	// MaxBodyBytes is the largest request body accepted; default 32 MiB.
	MaxBodyBytes int64
	// AccessLog receives one record per request; nil disables it.
	AccessLog *accesslog.Logger
	// Logger is the process log; nil discards.
	Logger *slog.Logger
	// Metrics, when set, observes every request once and is served at GET /metrics.
	Metrics *metrics.Metrics
	// EngineLoad, when set, returns the load of an embedded engine by name, served in the vLLM
	// format at GET /metrics/engines/NAME (so another layer0, or a test, can scrape it).
	EngineLoad func(name string) (metrics.Load, bool)
}

// Server is an http.Handler serving the layer0 APIs from the current pipeline.
type Server struct {
	pipe    atomic.Pointer[pipeline.Pipeline]
	maxBody atomic.Int64
	access  *accesslog.Logger
	logger  *slog.Logger
	metrics *metrics.Metrics
	load    func(string) (metrics.Load, bool)
	bufs    sync.Pool
	// xs pools exchanges: one is about 2 KB (the call's record, held events and writers),
	// allocated per request before.
	xs sync.Pool
}

// New returns a server running p.
func New(p *pipeline.Pipeline, o Options) *Server {
	s := &Server{access: o.AccessLog, logger: o.Logger, metrics: o.Metrics, load: o.EngineLoad}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	s.Swap(p, o.MaxBodyBytes)
	s.bufs.New = func() any { b := make([]byte, 0, 16<<10); return &b }
	return s
}

// Swap makes p the pipeline for new requests; requests in flight finish on the old one.
// maxBody ≤ 0 keeps the default of 32 MiB.
func (s *Server) Swap(p *pipeline.Pipeline, maxBody int64) {
	if maxBody <= 0 {
		maxBody = 32 << 20
	}
	s.maxBody.Store(maxBody)
	s.pipe.Store(p)
}

// Pipeline returns the live pipeline.
func (s *Server) Pipeline() *pipeline.Pipeline { return s.pipe.Load() }

// exchange is one request/response in flight.
type exchange struct {
	s      *Server
	w      http.ResponseWriter
	r      *http.Request
	p      *pipeline.Pipeline
	call   pipeline.Call
	buf    *[]byte // the request body
	out    *[]byte // the response body
	format llm.Format
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
}

// errorWriter ends a stream that failed after it began with the format's error event.
type errorWriter interface {
	WriteError(*apierr.Error) error
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x, _ := s.xs.Get().(*exchange)
	if x == nil {
		x = new(exchange)
	}
	*x = exchange{s: s, w: w, r: r, p: s.pipe.Load(), format: clientFormat(r)}
	rec := &x.call.Record
	rec.Start = time.Now()
	rec.Format = x.format
	rec.RequestID = ids.Request()
	h := w.Header()
	x.hv = new(headerValues)
	x.hv[hvRequestID] = rec.RequestID
	h["Request-Id"] = x.hv.slice(hvRequestID)
	h["X-Request-Id"] = h["Request-Id"]

	// L4 auth and the header size limit, once for every API endpoint, before any body is read.
	if isAPI(r.URL.Path) {
		key, err := x.p.Admit(r.Header)
		if err != nil {
			x.fail(err)
			x.finish()
			return
		}
		x.call.Key = key
		rec.Key = key.Name
	}

	switch path := r.URL.Path; {
	case path == "/v1/messages" && isBinary(r):
		x.onlyMethod(http.MethodPost, x.binaryMessages)
	case path == "/v1/messages":
		x.onlyMethod(http.MethodPost, x.messages)
	case isVocabPath(path):
		x.vocabulary()
	case path == "/v1/messages/count_tokens":
		x.onlyMethod(http.MethodPost, x.countTokens)
	case path == "/v1/chat/completions":
		x.onlyMethod(http.MethodPost, x.chatCompletions)
	case path == "/v1/models" && wantsOpenAI(r):
		x.onlyMethod(http.MethodGet, x.openAIModels)
	case path == "/v1/models":
		x.onlyMethod(http.MethodGet, x.listModels)
	case strings.HasPrefix(path, "/v1/models/") && wantsOpenAI(r):
		x.onlyMethod(http.MethodGet, func() { x.openAIModel(strings.TrimPrefix(path, "/v1/models/")) })
	case strings.HasPrefix(path, "/v1/models/"):
		x.onlyMethod(http.MethodGet, func() { x.getModel(strings.TrimPrefix(path, "/v1/models/")) })
	case path == "/healthz" || path == "/readyz":
		x.onlyMethod(http.MethodGet, x.health)
	case path == "/v1/layer/negotiate":
		x.negotiate()
	case path == "/metrics" && s.metrics != nil:
		x.onlyMethod(http.MethodGet, x.serveMetrics)
	case strings.HasPrefix(path, enginePrefix) && s.load != nil:
		x.onlyMethod(http.MethodGet, func() { x.engineMetrics(strings.TrimPrefix(path, enginePrefix)) })
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

// readBody reads the request body into a pooled buffer, refusing bodies over the limit with 413.
func (x *exchange) readBody() ([]byte, bool) {
	limit := x.s.maxBody.Load()
	if x.r.ContentLength > limit {
		x.fail(tooLarge(x.r.ContentLength, limit))
		return nil, false
	}
	x.buf = x.s.bufs.Get().(*[]byte)
	b := (*x.buf)[:0]
	if n := x.r.ContentLength; n > 0 && int64(cap(b)) < n {
		b = make([]byte, 0, n)
	}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := x.r.Body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if int64(len(b)) > limit {
			x.fail(tooLarge(int64(len(b)), limit))
			return nil, false
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			x.fail(apierr.Wrap(apierr.InvalidRequest, err, "could not read the request body"))
			return nil, false
		}
	}
	*x.buf = b
	return b, true
}

func tooLarge(n, limit int64) *apierr.Error {
	return &apierr.Error{Kind: apierr.RequestTooLarge, Code: "request_too_large",
		Message: "request body of " + strconv.FormatInt(n, 10) + "+ bytes exceeds the limit of " +
			strconv.FormatInt(limit, 10) + " bytes"}
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
	} else if errors.Is(err, context.Canceled) && x.r.Context().Err() != nil {
		// The client went away: nothing more reaches it. The record keeps the status it was
		// sent (or 499, nginx's "client closed request", when it was sent none).
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
	code := e.Code
	if code == "" {
		code = e.Kind.AnthropicType()
	}
	// One spelling for every code in the header (INVALID_BINARY is SYSTEM.md's); the body keeps
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
	// The caller's rate-limit state on every answer, as the Anthropic and OpenAI APIs send it
	// (a 429 carries its own, filled when it was refused).
	if !rec.RateLimited && rec.Status < 400 {
		if l := x.p.Limits(); l != nil {
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
	x.w.WriteHeader(status)
	if x.r.Method != http.MethodHead {
		x.w.Write(body) //nolint:errcheck // the client went away; nothing to do
	}
}

// streamWriter is the io.Writer stream encoders write to: the first write sends the status line
// and headers (so an error before it can still be a proper HTTP error), and flush pushes to the
// network at once. Between flushes it collects the bytes in a pooled buffer and hands them to
// net/http in one Write: the pass-through path writes each SSE event as it reads it, and
// net/http's response writer costs a buffer copy, a chunk header and past 4 KiB a system call
// per Write (a 100-event stream from a fast engine: 6.1 writes per request before, 5.1 after).
type streamWriter struct {
	x           *exchange
	contentType string
	rc          *http.ResponseController
	buf         *[]byte // written since the last flush; from the server's pool
}

func (sw *streamWriter) Write(b []byte) (int, error) {
	x := sw.x
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
	_, err := sw.x.w.Write(*sw.buf)
	*sw.buf = (*sw.buf)[:0]
	return err
}

func (sw *streamWriter) flush() error {
	if err := sw.drain(); err != nil {
		return err
	}
	if sw.x.ended {
		return nil
	}
	if sw.rc == nil {
		sw.rc = http.NewResponseController(sw.x.w)
	}
	err := sw.rc.Flush()
	if errors.Is(err, http.ErrNotSupported) {
		return nil
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

// bodyBuffer is the pass-through writer of a response that is not streamed: it collects the
// engine's answer in the exchange's output buffer, and writePassed sends it whole, with a
// Content-Length, in one write when Serve returns. Flushing it as a stream would send it
// chunked, with the chunked body's end in a second write: a system call more per request
// (4 writes per request became 3, and the gateway's CPU per request fell by about 10%).
type bodyBuffer struct{ x *exchange }

func (b bodyBuffer) Write(p []byte) (int, error) {
	x := b.x
	if x.out == nil {
		x.out = x.s.bufs.Get().(*[]byte)
		*x.out = (*x.out)[:0]
	}
	*x.out = append(*x.out, p...)
	return len(p), nil
}

// Flush does nothing: the answer goes out whole at the end.
func (bodyBuffer) Flush() error { return nil }

// writePassed writes what a bodyBuffer collected as a complete response.
func (x *exchange) writePassed(contentType string) {
	var body []byte
	if x.out != nil {
		body = *x.out
	}
	x.writeFull(http.StatusOK, contentType, body)
}

func (x *exchange) health() {
	x.writeFull(http.StatusOK, "application/json", []byte(`{"status":"ok"}`))
}

// finish completes the record, hands it to the access log and returns the exchange to the
// pool: x must not be used after it.
func (x *exchange) finish() {
	if x.sw != nil {
		_ = x.sw.drain() // the client went away when it fails; the record says what was sent
	}
	rec := &x.call.Record
	if rec.Status == 0 {
		rec.Status = http.StatusOK
	}
	total := time.Since(rec.Start)
	if x.s.metrics != nil && isAPI(x.r.URL.Path) {
		x.s.metrics.Observe(rec, total)
	}
	if x.s.access != nil {
		e := accesslog.Entry{Record: *rec, Method: x.r.Method, Path: x.r.URL.Path, Key: rec.Key, Duration: total}
		x.s.access.Write(&e)
	}
	x.s.putBuf(x.buf)
	x.s.putBuf(x.out)
	x.buf, x.out = nil, nil
	if sw := x.sw; sw != nil {
		x.s.putBuf(sw.buf)
		sw.buf, x.sw = nil, nil
	}
	s := x.s
	*x = exchange{} // nothing of this request outlives it
	s.xs.Put(x)
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
