package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/engine"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/pipeline"
)

// controller returns the response controller of the exchange, made once.
func (x *exchange) controller() *http.ResponseController {
	if !x.hasRC {
		x.rc, x.hasRC = *http.NewResponseController(x.w), true // a copy: no allocation
	}
	return &x.rc
}

// armWrite bounds the next writes to the client by Limits.WriteTimeout. A deadline this request
// armed less than armSlack (at most a twentieth of the timeout) ago is kept: a write then gets
// at least the timeout less that, and a stream flushed many times a millisecond changes the
// runtime's timer once, not per flush.
func (x *exchange) armWrite() {
	now := time.Now()
	if !x.armedAt.IsZero() && now.Sub(x.armedAt) < min(armSlack, x.lim.WriteTimeout/20) {
		return
	}
	x.armedAt = now
	_ = x.controller().SetWriteDeadline(now.Add(x.lim.WriteTimeout)) // unsupported only off a real connection
}

// armSlack is how stale a write deadline armWrite keeps may be.
const armSlack = 10 * time.Millisecond

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
// are slices of one array, and the text of those it formats (the request id, the timings) and of
// the answer's id, so that these strings need no allocation of their own: one allocation per
// request for all of them.
//
// It is made for each request and never reused, unlike the pooled exchange: net/http may read
// the handler's header map after the handler returns, and the strings kept in text outlive the
// request (the record's request id, in the access log and the traces).
type headerValues struct {
	v [8]string
	// text backs the strings keep returned, append-only: bytes once kept are never written
	// again. 160 bytes hold a request id, an answer's id and the timings.
	text [160]byte
	used int
}

// Indexes into headerValues.v.
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
func (hv *headerValues) slice(i int) []string { return hv.v[i : i+1 : i+1] }

// room returns the unused end of text, empty, to append a string to for keep.
func (hv *headerValues) room() []byte { return hv.text[hv.used:hv.used:len(hv.text)] }

// keep returns b as a string. When b is room() appended to without outgrowing it, the string
// is text's bytes and they are marked used; otherwise it is a copy.
func (hv *headerValues) keep(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if hv.used < len(hv.text) && len(b) <= len(hv.text)-hv.used && &b[0] == &hv.text[hv.used] {
		hv.used += len(b)
		return unsafe.String(&b[0], len(b))
	}
	return string(b)
}

// writeTimingHeaders sets X-Processing-Time (layer0's own time, engine time excluded) and
// X-Response-Time (total time in layer0 so far), both in milliseconds with µs precision.
// A length ≥ 0 is sent as Content-Length. The numbers share one string in the request's
// headerValues (no allocation, where each header cost two).
func (x *exchange) writeTimingHeaders(engine time.Duration, length int) {
	rec := &x.call.Record
	total := time.Since(rec.Start)
	h := x.w.Header()
	hv := x.hv
	v := appendMillis(hv.room(), total)
	n1 := len(v)
	v = appendMillis(v, total-engine)
	n2 := len(v)
	if length >= 0 {
		v = strconv.AppendInt(v, int64(length), 10)
	}
	nums := hv.keep(v)
	hv.v[hvResponseTime], hv.v[hvProcessingTime], hv.v[hvContentLength] = nums[:n1], nums[n1:n2], nums[n2:]
	h["X-Response-Time"] = hv.slice(hvResponseTime)
	h["X-Processing-Time"] = hv.slice(hvProcessingTime)
	if length >= 0 {
		h["Content-Length"] = hv.slice(hvContentLength)
	}
	if rec.Simulated {
		hv.v[hvSimulated] = "true"
		h["X-Layer0-Simulated"] = hv.slice(hvSimulated)
	}
	if rec.Engine != "" {
		hv.v[hvEngine] = rec.Engine
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
	x.hv.v[hvContentType] = contentType
	x.w.Header()["Content-Type"] = x.hv.slice(hvContentType)
	x.writeTimingHeaders(x.call.Record.EngineTime, len(body))
	x.setCostHeader(x.w.Header())
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
		hv.v[hvContentType], hv.v[hvCacheControl] = sw.contentType, "no-cache"
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
		sw.x.armedAt = time.Time{}
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
