package h1server

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// response is the http.ResponseWriter of one request. It collects the answer in the
// connection's write buffer and writes it with its head in one write: when the handler
// returns (with Content-Length, for an answer that was never flushed), at a Flush (chunked
// from then on), or when the buffer fills.
type response struct {
	c      *conn
	req    *http.Request
	header http.Header
	status int

	wroteHeader bool  // WriteHeader was called (or implied by a Write)
	headOut     bool  // the head is in the write buffer or out
	chunked     bool  // the body goes out in chunked coding
	noBody      bool  // HEAD, 1xx, 204, 304: a body is not sent
	declared    int64 // the handler's Content-Length, -1 when none
	written     int64 // body bytes the handler wrote
	closeAfter  bool  // the connection ends after this answer
	err         error // the first write error: every later write returns it
}

// flushAt is the size at which buffered body bytes go out without waiting for a flush.
const flushAt = 64 << 10

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic("h1server: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code < 200 {
		// An interim answer (103 Early Hints, say) goes out at once with the headers set so far;
		// 100 Continue is the server's own.
		if code != http.StatusContinue && code != http.StatusSwitchingProtocols {
			w.c.wbuf = appendStatusLine(w.c.wbuf, code)
			w.c.wbuf = appendFields(w.c.wbuf, w.header)
			w.c.wbuf = append(w.c.wbuf, "\r\n"...)
			_ = w.c.writeOut()
		}
		return
	}
	w.wroteHeader = true
	w.status = code
	if cl := w.header["Content-Length"]; len(cl) == 1 {
		if n, ok := parseLength(cl[0]); ok {
			w.declared = n
		}
	}
}

func (w *response) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.declared >= 0 && w.written+int64(len(p)) > w.declared {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if w.req.Method == http.MethodHead {
		return len(p), nil
	}
	if !w.headOut {
		w.c.body = append(w.c.body, p...)
		if len(w.c.body) >= flushAt {
			if err := w.flush(); err != nil {
				return 0, err
			}
		}
		return len(p), nil
	}
	w.appendBody(p)
	if len(w.c.wbuf) >= flushAt {
		if err := w.c.writeOut(); err != nil {
			w.err = err
			return 0, err
		}
	}
	return len(p), nil
}

// WriteString writes s without a conversion to []byte at the caller.
func (w *response) WriteString(s string) (int, error) {
	if !w.headOut && w.wroteHeader && w.err == nil && bodyAllowed(w.status) && w.req.Method != http.MethodHead &&
		(w.declared < 0 || w.written+int64(len(s)) <= w.declared) && len(w.c.body)+len(s) < flushAt {
		w.written += int64(len(s))
		w.c.body = append(w.c.body, s...)
		return len(s), nil
	}
	return w.Write([]byte(s))
}

// appendBody appends body bytes after the head, in the answer's coding.
func (w *response) appendBody(p []byte) {
	if w.chunked {
		w.c.wbuf = strconv.AppendInt(w.c.wbuf, int64(len(p)), 16)
		w.c.wbuf = append(w.c.wbuf, "\r\n"...)
		w.c.wbuf = append(w.c.wbuf, p...)
		w.c.wbuf = append(w.c.wbuf, "\r\n"...)
		return
	}
	w.c.wbuf = append(w.c.wbuf, p...)
}

// Flush sends what was written so far.
func (w *response) Flush() { _ = w.FlushError() }

// FlushError sends what was written so far and returns the write's error (for
// http.ResponseController).
func (w *response) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.flush()
}

func (w *response) flush() error {
	if w.err != nil {
		return w.err
	}
	if !w.headOut {
		w.writeHead(false)
	}
	if err := w.c.writeOut(); err != nil {
		w.err = err
		return err
	}
	return nil
}

// SetReadDeadline sets the connection's read deadline (for http.ResponseController).
// Clearing it is deferred until the connection is read again (conn.freshRead).
func (w *response) SetReadDeadline(t time.Time) error {
	if t.IsZero() {
		w.c.rdlStale = true
		return nil
	}
	if b := &w.c.rb; !b.chunked && !b.expect100 && int64(w.c.br.Buffered()) >= b.remaining {
		// The body is in hand: no read of it reaches the connection, which a deadline bounds.
		// What the connection had is stale (cleared before the next read there).
		w.c.rdlStale = true
		return nil
	}
	w.c.rdlStale = false
	return w.c.nc.SetReadDeadline(t)
}

// SetWriteDeadline sets the connection's write deadline (for http.ResponseController).
func (w *response) SetWriteDeadline(t time.Time) error {
	w.c.wdl, w.c.wdlStale = !t.IsZero(), false
	return w.c.nc.SetWriteDeadline(t)
}

// writeHead appends the status line and header block to the write buffer, then the body bytes
// collected so far. final is set when the handler has returned: an answer never flushed then
// gets a Content-Length of exactly what was written.
func (w *response) writeHead(final bool) {
	w.headOut = true
	h := w.header
	if !w.wroteHeader {
		w.wroteHeader, w.status = true, http.StatusOK
	}
	if w.c.srv.shuttingDown() {
		w.closeAfter = true
	}
	handlerClose := httpguts.HeaderValuesContainsToken(h["Connection"], "close")
	if handlerClose {
		w.closeAfter = true
	}
	// The framing is this writer's alone, as net/http makes it: a handler's Transfer-Encoding,
	// or a Content-Length it did not validly declare by WriteHeader, would go out beside it.
	delete(h, "Transfer-Encoding")
	if w.declared < 0 {
		delete(h, "Content-Length")
	}
	w.noBody = !bodyAllowed(w.status)
	isHead := w.req.Method == http.MethodHead
	var extra [3]string // framing headers this writer adds
	nx := 0
	switch {
	case w.noBody:
		// No body, no framing (a 204 or 304 carries none).
	case w.declared >= 0:
		// The handler's own Content-Length.
	case final:
		if !isHead || w.written > 0 {
			extra[nx] = "Content-Length: " + strconv.FormatInt(w.written, 10)
			nx++
		}
	case w.req.ProtoMinor >= 1:
		w.chunked = !isHead
		if w.chunked {
			extra[nx] = "Transfer-Encoding: chunked"
			nx++
		}
	default:
		// An HTTP/1.0 client: the body ends with the connection.
		w.closeAfter = true
	}
	if w.c.reqClose {
		w.closeAfter = true
	}
	if w.closeAfter {
		// The handler's own Connection field stays only when it says close already.
		if !handlerClose {
			delete(h, "Connection")
			extra[nx] = "Connection: close"
			nx++
		}
	} else if w.req.ProtoMinor == 0 {
		extra[nx] = "Connection: keep-alive"
		nx++
	}
	b := appendStatusLine(w.c.wbuf, w.status)
	b = appendFields(b, h)
	if _, ok := h["Date"]; !ok {
		b = append(b, "Date: "...)
		b = append(b, httpDate()...)
		b = append(b, "\r\n"...)
	}
	if _, ok := h["Content-Type"]; !ok && !w.noBody && len(w.c.body) > 0 && w.written > 0 {
		b = append(b, "Content-Type: "...)
		b = append(b, http.DetectContentType(w.c.body)...)
		b = append(b, "\r\n"...)
	}
	for _, x := range extra[:nx] {
		b = append(append(b, x...), "\r\n"...)
	}
	b = append(b, "\r\n"...)
	w.c.wbuf = b
	if len(w.c.body) > 0 && !isHead && !w.noBody {
		w.appendBody(w.c.body)
	}
	w.c.body = w.c.body[:0]
}

// finish completes the answer after the handler returned: the head if it never went out, the
// chunked body's end, in one write.
func (w *response) finish() error {
	if w.err != nil {
		return w.err
	}
	if !w.headOut {
		w.writeHead(true)
	}
	if w.chunked {
		w.c.wbuf = append(w.c.wbuf, "0\r\n\r\n"...)
	}
	if w.declared >= 0 && w.written < w.declared && w.req.Method != http.MethodHead && !w.noBody {
		// Fewer bytes than declared: the client must not read the next answer as this one's rest.
		w.closeAfter = true
	}
	if err := w.c.writeOut(); err != nil {
		w.err = err
		return err
	}
	return nil
}

func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// appendStatusLine appends "HTTP/1.1 code reason\r\n".
func appendStatusLine(b []byte, code int) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	if code == 529 {
		b = append(b, "Overloaded"...) // the Anthropic API's overloaded status, unnamed in net/http
	} else if t := http.StatusText(code); t != "" {
		b = append(b, t...)
	} else {
		b = append(b, "status code "...)
		b = strconv.AppendInt(b, int64(code), 10)
	}
	return append(b, "\r\n"...)
}

// appendFields appends the header fields of h, as net/http writes them: invalid names skipped,
// line breaks in values turned into spaces (no header can split the answer).
func appendFields(b []byte, h http.Header) []byte {
	for k, vv := range h {
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range vv {
			b = append(b, k...)
			b = append(b, ": "...)
			if strings.ContainsAny(v, "\r\n") {
				v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
			}
			b = append(b, trimOWS(v)...)
			b = append(b, "\r\n"...)
		}
	}
	return b
}

// date caches the Date header's value, made at most once a second.
var date atomic.Pointer[dateValue]

type dateValue struct {
	sec int64
	s   string
}

func httpDate() string {
	now := time.Now()
	if d := date.Load(); d != nil && d.sec == now.Unix() {
		return d.s
	}
	d := &dateValue{sec: now.Unix(), s: now.UTC().Format(http.TimeFormat)}
	date.Store(d)
	return d.s
}
