package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/layer0ai/layer0/internal/accesslog"
	"github.com/layer0ai/layer0/internal/trace"
)

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
	t := trace.FromRecord(&r, x.r.Method, x.r.URL.Path, time.Since(rec.Start))
	if ownView(x.call.Key) {
		t.Own() // read by the request's key: as GET /debug/requests/{id} shows it that key
	}
	b, err := json.Marshal(t)
	if err != nil {
		return
	}
	buf := *x.sw.buf
	buf = append(buf, ": layer0-trace "...)
	buf = append(buf, b...) // JSON has no raw newline: one comment line
	*x.sw.buf = append(buf, "\n\n"...)
}
