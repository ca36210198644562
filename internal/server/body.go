package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
)

// readBody reads the request body into a pooled buffer that grows with what arrives (never
// with what the client declares), refusing a body over the size limit with 413, one that would
// take the bodies in flight over their budget with 503, and one that arrives too slowly (whole
// body, or under the minimum rate) with 408.
func (x *exchange) readBody() ([]byte, bool) {
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
	// A cross-site page's form or text/plain body never runs as JSON. The check follows the
	// read (bounded as any body's) so that a body the protocol itself refuses — an HTTP/2
	// stream whose DATA does not add up to its content-length — is refused as such first.
	if ct := x.r.Header.Get("Content-Type"); !bodyTypeOK(ct) {
		x.fail(bodyTypeRefused(ct))
		return nil, false
	}
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
