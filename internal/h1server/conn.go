package h1server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// conn is one client connection: its buffers, and the request, body and answer it serves now
// (one at a time: HTTP/1.1 pipelining is served in order).
type conn struct {
	srv *Server
	nc  net.Conn
	br  *bufio.Reader
	// wbuf collects what goes out in the next write (head, body, chunk framing); body collects
	// an answer's body until its head is written.
	wbuf []byte
	body []byte

	state atomic.Int32 // stateNew, stateActive, stateIdle, stateClosed
	born  time.Time
	req   http.Request
	rb    body
	rw    response
	// reqClose is set when the request asked for the connection to end after its answer.
	reqClose bool

	// The watch for a client that goes away while its request is served (see watch).
	watchMu   sync.Mutex
	timer     *time.Timer
	serving   bool // a handler runs
	bgReading bool // a background read is in progress
	bgDone    chan struct{}
	bgCancel  context.CancelCauseFunc
	gone      bool // the background read saw the client's end
	aborting  bool
	// bodyDone is set once the handler cannot read from the connection any more (its body
	// was read to its end): the watch may read from it then.
	bodyDone atomic.Bool
	remote   string // the client's address, formatted once
	// Deadlines are cleared lazily, a runtime timer change each saved per request: wdl is set
	// when the handler set a write deadline, which becomes stale when its request ends and is
	// cleared before the connection is written again unless a handler set its own (wdlStale);
	// rdlStale says the read deadline is a leftover (the idle or header timeout, or one the
	// handler cleared), cleared before the connection is read for a handler or watched.
	wdl, wdlStale bool
	rdlStale      bool
}

const (
	stateNew = iota // accepted, no request read yet
	stateActive
	stateIdle // waiting for the next request
	stateClosed
)

// newGrace is how long a connection that has sent no request yet is left open by Shutdown, as
// net/http leaves it: its first request may be on the way.
const newGrace = 5 * time.Second

// readBufSize is each connection's read buffer: a request head up to this size is parsed in
// place; a larger one (up to the limit) moves the connection to a larger buffer.
const readBufSize = 8 << 10

// watchAfter is how long a handler runs before the connection starts watching for the client's
// end (a read that ends with EOF cancels the request's context): a quick answer never pays for
// the watch.
const watchAfter = 20 * time.Millisecond

// maxDrain is how much of a body the handler left unread is read and discarded to keep the
// connection for the next request (net/http's figure); a longer rest closes the connection.
const maxDrain = 256 << 10

var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufSize) }}

// ErrClientGone is the cause of a request context canceled because the client closed its
// connection while its request was served.
var ErrClientGone = errors.New("h1server: the client closed the connection")

var aLongTimeAgo = time.Unix(1, 0)

func (c *conn) serve(ctx context.Context) {
	defer c.close()
	defer func() {
		// A defect of this server ends the connection, never the process.
		if v := recover(); v != nil {
			buf := make([]byte, 64<<10)
			buf = buf[:runtime.Stack(buf, false)]
			c.srv.logf("h1server: panic serving a connection: %v\n%s", v, buf)
		}
	}()
	br := readers.Get().(*bufio.Reader)
	br.Reset(c.nc)
	c.br = br
	c.rb.c = c
	c.rw.c = c
	defer func() {
		if c.br != nil && c.br.Size() == readBufSize {
			c.br.Reset(nil)
			readers.Put(c.br)
		}
		c.br = nil
	}()
	s := c.srv
	for first := true; ; first = false {
		// Wait for the next request: the idle timeout between requests, the header timeout
		// from the first byte (from the connection's start for its first request).
		if !first {
			// A read deadline the handler set (for its body) ends with its request, as in
			// net/http.
			if s.IdleTimeout > 0 {
				_ = c.nc.SetReadDeadline(time.Now().Add(s.IdleTimeout))
				c.rdlStale = false
			} else { // whatever the last handler set
				_ = c.nc.SetReadDeadline(time.Time{})
				c.rdlStale = false
			}
			if c.br.Buffered() == 0 {
				if _, err := c.br.Peek(1); err != nil {
					return
				}
			}
			if s.shuttingDown() {
				return
			}
			// (The first request's connection stays new until its head is in, as net/http's
			// does: Shutdown closes a new connection after newGrace.)
			c.state.Store(stateActive)
		}
		// A head already whole in the buffer needs no header timeout (one runtime timer change
		// less per request): the idle deadline left on the connection is stale from here.
		if s.ReadHeaderTimeout > 0 && (first || !c.headBuffered()) {
			_ = c.nc.SetReadDeadline(time.Now().Add(s.ReadHeaderTimeout))
			c.rdlStale = false
		} else if !first && s.IdleTimeout > 0 {
			c.rdlStale = true
		}
		head, err := c.readHead(first)
		if err != nil {
			if errors.Is(err, errPreface) {
				if c.handOff(head) {
					c.nc = nil // the HTTP/2 server owns it now
				}
				return
			}
			c.refuse(err)
			return
		}
		if first {
			c.state.Store(stateActive)
		}
		f, err := parseHead(head, c.newRequest())
		if err != nil {
			c.br.Discard(len(head)) //nolint:errcheck // buffered
			c.refuse(err)
			return
		}
		if _, err := c.br.Discard(len(head)); err != nil {
			return
		}
		if s.ReadHeaderTimeout > 0 {
			c.rdlStale = true // cleared before the handler's reads reach the connection
		}
		if !c.serveRequest(ctx, f) {
			return
		}
		c.state.Store(stateIdle)
		if s.shuttingDown() {
			return
		}
	}
}

// newRequest readies c.req for the next request and returns it. A request is a fresh
// http.Request: a handler's goroutines may keep it after the handler returned.
func (c *conn) newRequest() *http.Request {
	if c.remote == "" {
		c.remote = c.nc.RemoteAddr().String()
	}
	c.req = http.Request{RemoteAddr: c.remote}
	return &c.req
}

// readHead returns the next request head (through its empty line), buffered in c.br and not
// yet consumed. On a connection's first request the HTTP/2 client preface is errPreface.
func (c *conn) readHead(first bool) ([]byte, error) {
	limit := c.srv.maxHeadBytes()
	from := 0
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		if first && len(buf) >= 3 && string(buf[:3]) == "PRI" {
			if b, err := c.br.Peek(len(http2Preface)); err == nil && string(b) == http2Preface {
				return b, errPreface
			}
		}
		if end := headEnd(buf, from); end > 0 {
			if end > limit {
				return nil, errHeadTooLarge
			}
			return buf[:end], nil
		}
		if len(buf) >= limit {
			return nil, errHeadTooLarge
		}
		from = max(len(buf)-3, 0)
		if len(buf) == c.br.Size() {
			// The head is larger than the buffer: move to one large enough for the limit.
			c.grow(min(2*c.br.Size(), limit+1))
			from = 0
			continue
		}
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			// A client gone, or silent past the header timeout: net/http closes such a
			// connection unanswered too.
			return nil, errSilentClose
		}
	}
}

// http2Preface is HTTP/2's client connection preface (RFC 9113 §3.4).
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// errSilentClose ends a connection without an answer (a client that left, or sent nothing in
// time).
var errSilentClose = errors.New("h1server: connection ended")

// headEnd returns the length of the head at the start of buf — through the first empty line,
// CRLF or bare LF — or 0 when it is not all there. from is where the search may resume.
func headEnd(buf []byte, from int) int {
	if from > len(buf) {
		from = 0
	}
	for i := from; ; {
		j := bytes.IndexByte(buf[i:], '\n')
		if j < 0 {
			return 0
		}
		i += j + 1
		// The line that starts here is empty when it is "\n" or "\r\n".
		if i < len(buf) && buf[i] == '\n' {
			return i + 1
		}
		if i+1 < len(buf) && buf[i] == '\r' && buf[i+1] == '\n' {
			return i + 2
		}
		if i >= len(buf) {
			return 0
		}
	}
}

// grow moves the connection to a read buffer of size n with the bytes buffered so far.
func (c *conn) grow(n int) {
	old := c.br
	buffered, _ := old.Peek(old.Buffered())
	saved := append([]byte(nil), buffered...)
	c.br = bufio.NewReaderSize(io.MultiReader(bytes.NewReader(saved), c.nc), n)
	if old.Size() == readBufSize {
		old.Reset(nil)
		readers.Put(old)
	}
}

// refuse answers a request that could not be read and ends the connection.
func (c *conn) refuse(err error) {
	var re *requestError
	if !errors.As(err, &re) {
		return // a client gone or idle: nothing to answer
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	c.wdl, c.wdlStale = false, false
	c.wbuf = append(c.wbuf[:0], c.srv.errorAnswer(re.status, re.msg)...)
	if c.writeOut() == nil {
		c.linger()
	}
}

// serveRequest runs the handler for the parsed request and completes its answer; it reports
// whether the connection can serve another request.
func (c *conn) serveRequest(base context.Context, f framing) bool {
	r := &c.req
	c.reqClose = f.close
	c.rb.reset(f)
	r.Body = &c.rb
	if f.length == 0 {
		r.Body = http.NoBody
	}
	ctx, cancel := context.WithCancelCause(base)
	// The handler's request is a copy of its own, never c.req: a handler's goroutines may keep
	// it after the handler returned, while c.req is parsed into for the next request.
	r2 := r.WithContext(ctx)
	c.rw = response{c: c, req: r2, header: make(http.Header, 8), declared: -1}
	// A large answer's buffers are not kept for the connection's next requests.
	if cap(c.body) > 2*flushAt {
		c.body = nil
	}
	if cap(c.wbuf) > 2*flushAt {
		c.wbuf = nil
	}
	c.body = c.body[:0]
	c.wbuf = c.wbuf[:0]

	c.startWatch(cancel)
	ok := c.runHandler(r2)
	gone := c.stopWatch()
	cancel(context.Canceled)
	if !ok {
		return false
	}
	if err := c.rw.finish(); err != nil || gone {
		// A client that half-closed its side still gets the answer, as net/http gives it.
		return false
	}
	if c.wdl {
		c.wdl, c.wdlStale = false, true // cleared before a write no handler bounded (freshWrite)
	}
	if !c.rb.done {
		// The body the handler left: read and dropped when short, else the connection ends
		// (after the client had time to read the answer: see linger).
		// A client that waited for 100 Continue may or may not send the rest: net/http closes.
		if c.rw.closeAfter || c.rb.expect100 || c.rb.err != nil || !c.discardBody() {
			c.linger()
			return false
		}
	}
	return !c.rw.closeAfter
}

// linger half-closes the connection and reads what the client still sends for a moment before
// the close: closing a socket with unread input resets the connection, and the reset can
// overtake the answer just written.
func (c *conn) linger() {
	if tc, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	} else if u, ok := c.nc.(interface{ NetConn() net.Conn }); ok {
		if tc, ok := u.NetConn().(interface{ CloseWrite() error }); ok {
			_ = tc.CloseWrite()
		}
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(lingerTime))
	c.rdlStale = false
	_, _ = io.CopyN(io.Discard, c.nc, maxDrain)
}

// lingerTime bounds linger.
const lingerTime = 500 * time.Millisecond

// discardBody reads the rest of an unread body, up to maxDrain bytes.
func (c *conn) discardBody() bool {
	if !c.rb.chunked && c.rb.remaining > maxDrain {
		return false
	}
	c.rb.closed = false
	var scratch [4096]byte
	total := 0
	for total <= maxDrain {
		n, err := c.rb.Read(scratch[:])
		total += n
		if err == io.EOF {
			return true
		}
		if err != nil {
			return false
		}
	}
	return false
}

// runHandler runs the handler, recovering a panic: the connection then ends (its answer is in
// an unknown state) and the panic is logged, as net/http does; http.ErrAbortHandler ends it
// silently.
func (c *conn) runHandler(r *http.Request) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			ok = false
			if v == http.ErrAbortHandler {
				return
			}
			buf := make([]byte, 64<<10)
			buf = buf[:runtime.Stack(buf, false)]
			c.srv.logf("h1server: panic serving a connection: %v\n%s", v, buf)
		}
	}()
	c.srv.Handler.ServeHTTP(&c.rw, r)
	return true
}

// continue100 tells a client that waits for it to send its body.
func (c *conn) continue100() error {
	if c.rw.headOut {
		return nil
	}
	c.freshWrite()
	_, err := c.nc.Write([]byte("HTTP/1.1 100 Continue\r\n\r\n"))
	return err
}

// freshRead clears a stale read deadline before the connection is read for a handler (the
// watch clears it itself).
func (c *conn) freshRead() {
	if c.rdlStale {
		c.rdlStale = false
		_ = c.nc.SetReadDeadline(time.Time{})
	}
}

// freshWrite clears the write deadline a previous request's handler left before a write that
// no handler of this request bounded.
func (c *conn) freshWrite() {
	if c.wdlStale {
		c.wdlStale = false
		_ = c.nc.SetWriteDeadline(time.Time{})
	}
}

// headBuffered reports whether the next request's head is whole in the read buffer.
func (c *conn) headBuffered() bool {
	buf, _ := c.br.Peek(c.br.Buffered())
	end := headEnd(buf, 0)
	return end > 0 && end <= c.srv.maxHeadBytes()
}

// writeOut writes the write buffer to the connection.
func (c *conn) writeOut() error {
	if len(c.wbuf) == 0 {
		return nil
	}
	c.freshWrite()
	_, err := c.nc.Write(c.wbuf)
	c.wbuf = c.wbuf[:0]
	return err
}

// startWatch arms the watch for the client's end: after watchAfter, once the request's body
// has been read, a background read waits on the connection; EOF (or an error) there cancels
// the request's context with ErrClientGone, and bytes there (the client's next request,
// pipelined) stay buffered for it.
func (c *conn) startWatch(cancel context.CancelCauseFunc) {
	c.watchMu.Lock()
	c.serving, c.gone, c.bgCancel = true, false, cancel
	if c.timer == nil {
		c.timer = time.AfterFunc(watchAfter, c.watchFire)
	} else {
		c.timer.Reset(watchAfter)
	}
	c.watchMu.Unlock()
}

func (c *conn) watchFire() {
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	if !c.serving || c.bgReading {
		return
	}
	if !c.bodyDone.Load() || c.br.Buffered() > 0 {
		// The handler still reads the body (its reads see the client's end), or the next
		// request is here already: look again later.
		c.timer.Reset(watchAfter)
		return
	}
	// A deadline left for the body (cleared lazily) must not end the watch: cleared here, on
	// the timer's goroutine, without touching rdlStale (the handler's).
	_ = c.nc.SetReadDeadline(time.Time{})
	c.bgReading = true
	c.bgDone = make(chan struct{})
	go c.backgroundRead(c.bgDone, c.bgCancel)
}

func (c *conn) backgroundRead(done chan struct{}, cancel context.CancelCauseFunc) {
	defer close(done)
	_, err := c.br.Peek(1)
	if err == nil {
		return
	}
	c.watchMu.Lock()
	aborting := c.aborting
	if !aborting {
		c.gone = true
	}
	c.watchMu.Unlock()
	if !aborting {
		cancel(ErrClientGone)
	}
}

// stopWatch ends the watch after the handler returned and reports whether the client left.
func (c *conn) stopWatch() bool {
	c.watchMu.Lock()
	c.serving = false
	c.timer.Stop()
	if !c.bgReading {
		gone := c.gone
		c.watchMu.Unlock()
		return gone
	}
	c.aborting = true
	done := c.bgDone
	c.watchMu.Unlock()
	_ = c.nc.SetReadDeadline(aLongTimeAgo) // ends the background read at once
	<-done
	_ = c.nc.SetReadDeadline(time.Time{})
	c.rdlStale = false
	c.watchMu.Lock()
	c.bgReading, c.aborting = false, false
	gone := c.gone
	c.watchMu.Unlock()
	return gone
}

// handOff gives a connection that opened with HTTP/2's preface to the HTTP/2 server, with the
// bytes read so far replayed, and reports whether it did; without one the connection is
// refused and stays this server's to close.
func (c *conn) handOff(head []byte) bool {
	if c.srv.HTTP2 == nil {
		c.refuse(&requestError{http.StatusHTTPVersionNotSupported, "HTTP/2 is not served on this listener"})
		return false
	}
	buffered, _ := c.br.Peek(c.br.Buffered())
	saved := append([]byte(nil), buffered...)
	c.state.Store(stateClosed)
	c.srv.forget(c)
	_ = c.nc.SetReadDeadline(time.Time{})
	c.srv.HTTP2(&replayConn{Conn: c.nc, r: io.MultiReader(bytes.NewReader(saved), c.nc)})
	return true
}

// replayConn is a connection whose first bytes were read already: its reads return them first.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (rc *replayConn) Read(p []byte) (int, error) { return rc.r.Read(p) }

// NetConn returns the connection itself, as tls.Conn's does.
func (rc *replayConn) NetConn() net.Conn { return rc.Conn }

func (c *conn) close() {
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.nc == nil {
		return
	}
	c.state.Store(stateClosed)
	_ = c.nc.Close()
	c.srv.forget(c)
}

func isClosed(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrUnexpectedEOF)
}

func (s *Server) logf(format string, args ...any) {
	if s.ErrorLog != nil {
		s.ErrorLog.Printf(format, args...)
		return
	}
	_ = fmt.Sprintf(format, args...)
}
