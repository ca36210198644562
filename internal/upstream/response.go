package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/h1"
)

// Response is an engine's 2xx answer. Body resets the idle watchdog on every read. Responses
// are pooled: one must not be used after Close.
type Response struct {
	// Status is the HTTP status.
	Status int
	// ContentType is the Content-Type header's value.
	ContentType string
	// Body is the response body.
	Body io.Reader

	c      *Client
	parent context.Context
	body   watchedBody
	br     *bufio.Reader // Reader's buffer, made once per pooled Response
	timer  *time.Timer   // the watchdog, created once per pooled Response
	onDone func()        // parentDone, as a func value made once per pooled Response

	// mu guards the rest, which the watchdog and the parent context's cancellation use from
	// their own goroutines.
	mu       sync.Mutex
	due      time.Time // when the watchdog's current bound ends; zero when none runs
	watchAt  time.Time // when the watchdog hands the client's context to a watch; zero when not pending
	total    time.Time // when the total bound ends; zero when there is none
	gotFirst bool      // a streamed body returned its first byte, or a non-streamed answer its headers
	cause    error
	closed   bool
	conn     *h1.Conn                // the http:// path's connection
	dial     context.CancelFunc      // cancels a dial in progress
	stop     func() bool             // detaches the parent context's watch
	hr       *http.Response          // the https:// path's response
	cancel   context.CancelCauseFunc // the https:// path's request context
}

// ReaderSize is the size of Response.Reader's buffer.
const ReaderSize = 16 << 10

// Reader returns the body behind a buffer of ReaderSize bytes that is pooled with the Response,
// for the decoders that take a *bufio.Reader as it is (wire's ReadStream, sse.Reader): they
// allocate no buffer of their own, and a fast engine's whole answer arrives in one read. Read
// the body through Body or through Reader, not both.
func (r *Response) Reader() *bufio.Reader { return r.br }

// newResponse returns a pooled Response for a call starting now, its watchdog armed.
func (c *Client) newResponse(ctx context.Context, start time.Time) *Response {
	r, _ := c.resps.Get().(*Response)
	if r == nil {
		r = &Response{}
		r.timer = time.AfterFunc(time.Hour, r.expire)
		r.timer.Stop()
		r.onDone = r.parentDone
	}
	r.mu.Lock()
	r.Status, r.ContentType, r.Body = 0, "", nil
	r.c, r.parent = c, ctx
	r.body = watchedBody{r}
	r.due, r.watchAt, r.total, r.gotFirst = time.Time{}, time.Time{}, time.Time{}, false
	r.cause, r.closed, r.conn, r.dial, r.stop, r.hr, r.cancel = nil, false, nil, nil, nil, nil, nil
	t := c.t
	if t.Total > 0 {
		r.total = start.Add(t.Total)
	}
	if t.FirstByte > 0 {
		r.due = start.Add(t.FirstByte)
	}
	if r.due.IsZero() || !r.total.IsZero() && r.total.Before(r.due) {
		r.due = r.total
	}
	if !r.due.IsZero() {
		r.timer.Reset(r.due.Sub(start))
	}
	r.mu.Unlock()
	return r
}

// read re-arms the watchdog after a body read that returned data, and after a non-streamed
// answer's headers: the idle bound (within the total bound) from now.
func (r *Response) read() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gotFirst = true
	due := r.total
	if idle := r.c.t.Idle; idle > 0 {
		if d := time.Now().Add(idle); due.IsZero() || d.Before(due) {
			due = d
		}
	}
	r.rearmLocked(due)
}

// rearmLocked sets the watchdog's bound to due (none when zero).
func (r *Response) rearmLocked(due time.Time) {
	if due.Equal(r.due) {
		return
	}
	r.due = due
	if t := r.nextFire(); t.IsZero() {
		r.timer.Stop()
	} else {
		r.timer.Reset(time.Until(t))
	}
}

// nextFire is when the watchdog must fire next: the bound, or the watch's hand-over if sooner.
func (r *Response) nextFire() time.Time {
	t := r.due
	if !r.watchAt.IsZero() && (t.IsZero() || r.watchAt.Before(t)) {
		t = r.watchAt
	}
	return t
}

// expire runs when the watchdog fires. At the watch's hand-over it checks the client's context
// and watches it from then on; a bound that is not due (a read re-armed it while the timer
// fired, or the fire is from an earlier use of a pooled Response) is left running.
func (r *Response) expire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	now := time.Now()
	if !r.watchAt.IsZero() && !now.Before(r.watchAt) {
		r.watchAt = time.Time{}
		if r.parent.Err() != nil {
			r.abortLocked(errCanceled)
			return
		}
		r.stop = context.AfterFunc(r.parent, r.onDone) // runs onDone in its own goroutine
	}
	if r.due.IsZero() || now.Before(r.due) {
		if t := r.nextFire(); !t.IsZero() {
			r.timer.Reset(t.Sub(now))
		}
		return
	}
	switch {
	case !r.total.IsZero() && !now.Before(r.total):
		r.abortLocked(errTotal)
	case r.gotFirst:
		r.abortLocked(errIdle)
	default:
		r.abortLocked(errFirstByte)
	}
}

// abortLocked ends the call at once for cause: the connection is closed (the engine sees the
// client go away), a dial is canceled, or net/http's request is. The first cause wins.
func (r *Response) abortLocked(cause error) {
	if r.closed || r.cause != nil {
		return
	}
	r.cause = cause
	if r.conn != nil {
		_ = r.conn.Close()
	}
	if r.dial != nil {
		r.dial()
	}
	if r.cancel != nil {
		r.cancel(cause)
	}
}

// aborted returns the cause of an abort, or nil.
func (r *Response) aborted() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cause
}

// attach makes conn the call's connection, watched by the parent context from now on; on a call
// aborted meanwhile it closes conn and returns the cause.
func (r *Response) attach(conn *h1.Conn) error {
	r.mu.Lock()
	if r.cause != nil {
		r.mu.Unlock()
		_ = conn.Close()
		return r.cause
	}
	r.conn = conn
	if r.stop == nil && r.watchAt.IsZero() && r.parent.Done() != nil {
		// The client's context is watched (context.AfterFunc: 4 allocations) only by calls
		// still running after watchDelay; until then the watchdog fires by that time and checks
		// it. A client's cancel reaches the engine within watchDelay either way, and most calls
		// end before it without allocating.
		r.watchAt = time.Now().Add(watchDelay)
		if r.due.IsZero() || r.watchAt.Before(r.due) {
			r.timer.Reset(watchDelay)
		}
	}
	r.mu.Unlock()
	return nil
}

// watchDelay is how long a call runs before the client's context is watched rather than checked
// by the watchdog: the longest a client's cancel takes to reach the engine, half the 100 ms the
// gateway promises end to end (the server must notice the client leave first).
const watchDelay = 50 * time.Millisecond

// parentDone runs when the client's context ends: the call is aborted at once.
func (r *Response) parentDone() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.abortLocked(errCanceled)
}

// detach closes and forgets the call's connection after a failure.
func (r *Response) detach() {
	r.mu.Lock()
	conn := r.conn
	r.conn = nil
	r.mu.Unlock()
	if conn != nil {
		_ = conn.Close()
	}
}

// Close releases the connection (back to the pool when its body was read to the end, else
// closed, which tells the engine to stop), the watchdog and the concurrency slot. It is safe to
// call more than once, but not after the Response was handed out again: callers close it once,
// with defer.
func (r *Response) Close() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	r.closed = true
	r.due, r.watchAt = time.Time{}, time.Time{}
	r.timer.Stop()
	conn, cause, stop, hr, cancel := r.conn, r.cause, r.stop, r.hr, r.cancel
	r.conn, r.hr, r.cancel, r.stop = nil, nil, nil, nil
	r.mu.Unlock()
	reuse := true
	if stop != nil && !stop() {
		// The parent's watch ran, or is running: it must not meet this Response again.
		reuse = false
	}
	if conn != nil {
		if cause == nil && r.parent.Err() == nil {
			r.c.pool.Put(conn)
		} else {
			_ = conn.Close()
		}
	}
	if hr != nil {
		hr.Body.Close()
		if r.c.closed.Load() {
			r.c.tr.CloseIdleConnections() // the connection the body just freed
		}
	}
	if cancel != nil {
		cancel(context.Canceled)
	}
	c := r.c
	c.inflight.Add(-1)
	if c.sem != nil {
		<-c.sem
	}
	if reuse {
		r.parent, r.Body, r.body = nil, nil, watchedBody{}
		c.resps.Put(r)
	}
}

// Err classifies an error met while talking to the engine: the client's own cancellation comes
// back as its context error, a timeout as a 504 naming which one, a network failure as a 502;
// any other error (an *apierr.Error from a codec, a sink's error) is returned unchanged. nil
// stays nil.
func (r *Response) Err(err error) error {
	if err == nil {
		return nil
	}
	if perr := r.parent.Err(); perr != nil {
		return perr
	}
	t := r.c.t
	switch r.aborted() {
	case errFirstByte:
		return apierr.Wrap(apierr.Timeout, errFirstByte, "engine sent no response within %s", t.FirstByte)
	case errIdle:
		return apierr.Wrap(apierr.Timeout, errIdle, "engine stalled: nothing received for %s", t.Idle)
	case errTotal:
		return apierr.Wrap(apierr.Timeout, errTotal, "engine did not finish within %s", t.Total)
	}
	var ae *apierr.Error
	if errors.As(err, &ae) {
		if errors.Is(ae, apierr.ErrEngineSaid) {
			// The engine's own words (an error object with a 200, an error event or frame):
			// the client gets layer0's stable message instead.
			r.c.hide(ae, 0)
		} else if m := Sanitize(r.c.key.Redact(ae.Message), MaxReason); m != ae.Message {
			ae.Message = m
		}
		return ae
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return apierr.Wrap(apierr.BadGateway, fmt.Errorf("upstream: engine %s: %w", r.c.name, err), "engine connection failed")
}

// watchedBody re-arms the watchdog on every read that returns data: the first byte switches it
// from the first-byte bound to the idle bound.
type watchedBody struct{ r *Response }

func (w *watchedBody) Read(p []byte) (int, error) {
	r := w.r
	var n int
	var err error
	if r.hr == nil {
		n, err = r.conn.Read(p)
	} else {
		n, err = r.hr.Body.Read(p)
	}
	if n > 0 {
		r.read()
	}
	return n, err
}
