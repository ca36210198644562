package upstream

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/h1"
)

// Timeout causes, so that errors say which bound was hit.
var (
	errFirstByte = errors.New("upstream: first-byte timeout")
	errIdle      = errors.New("upstream: idle timeout between tokens")
	errTotal     = errors.New("upstream: total timeout")
	errCanceled  = errors.New("upstream: canceled by the client")
)

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// Do sends r and returns the response once its status is 2xx; any other status becomes
// r.DecodeError's *apierr.Error (with retry-after parsed). The caller must Close the response.
func (c *Client) Do(ctx context.Context, r *Request) (*Response, error) {
	start := time.Now()
	if c.closed.Load() {
		return nil, &apierr.Error{Kind: apierr.Unavailable, Message: "engine is no longer configured",
			Cause: fmt.Errorf("upstream: engine %s: %w", c.name, errClosed)}
	}
	if err := c.acquire(ctx); err != nil {
		return nil, err
	}
	c.inflight.Add(1)
	resp := c.newResponse(ctx, start)
	var (
		a   answer
		err error
	)
	if c.pool != nil {
		a, err = c.doH1(ctx, resp, r)
	} else {
		a, err = c.doStd(ctx, resp, r)
	}
	if err != nil {
		err = resp.Err(err)
		resp.Close()
		return nil, err
	}
	if status := resp.Status; status < 200 || status > 299 {
		resp.Close()
		e := c.engineError(r, status, a.body)
		if a.retryAfter > 0 {
			e.RetryAfter = a.retryAfter
		}
		if e.Cause == nil {
			e.Cause = fmt.Errorf("upstream: engine %s answered status %d", c.name, status)
		}
		return nil, e
	}
	if !r.Stream {
		resp.read() // the first-byte bound ends with the headers: the body must not stall
	}
	resp.Body = &resp.body
	if resp.br == nil {
		resp.br = bufio.NewReaderSize(resp.Body, ReaderSize)
	} else {
		resp.br.Reset(resp.Body)
	}
	return resp, nil
}

// answer is what Do needs of a response besides its Status: for a status outside 2xx, the
// body and the retry-after headers.
type answer struct {
	body       []byte
	retryAfter time.Duration
}

// doH1 is Do on an http:// engine: the request is written in one write on a pooled connection;
// a reused connection the engine closed while idle gets the request again on a new one.
func (c *Client) doH1(ctx context.Context, resp *Response, r *Request) (answer, error) {
	var hdr []byte
	if r.Header != nil {
		hdr = r.Header.wire
	}
	buf := c.Buffer()
	defer c.PutBuffer(buf)
	var tb [256]byte
	req := h1.AppendRequest(*buf, http.MethodPost, c.targetOf(r.Path), c.host, len(r.Body), hdr, c.authLine,
		appendTraceContext(tb[:0], ctx))
	req = append(req, r.Body...)
	*buf = req
	for attempt := 0; ; attempt++ {
		var conn *h1.Conn
		if attempt == 0 {
			conn = c.pool.TakeIdle()
		}
		if conn == nil {
			var err error
			if conn, err = resp.dialH1(ctx); err != nil {
				return answer{}, err
			}
		}
		if err := resp.attach(conn); err != nil {
			return answer{}, err
		}
		err := conn.WriteRequest(req)
		var head *h1.Head
		if err == nil {
			head, err = conn.ReadHead()
		}
		if err == nil {
			resp.Status = head.Status
			resp.ContentType = contentType(head.Get("Content-Type"))
			if head.Status >= 200 && head.Status <= 299 {
				c.noteSimulated(string(head.Get("X-Layer0-Simulated")))
				return answer{}, nil
			}
			a := answer{retryAfter: RetryAfter(head.Header())}
			a.body, err = readError(conn)
			if err != nil && len(a.body) == 0 {
				return answer{}, err
			}
			return a, nil
		}
		resp.detach()
		if attempt == 0 && errors.Is(err, h1.ErrNoResponse) && ctx.Err() == nil && resp.aborted() == nil {
			continue // the engine closed the idle connection: nothing was processed
		}
		return answer{}, err
	}
}

// dialH1 dials a new connection for the call; an abort (the first-byte or total bound) cancels
// the dial too.
func (r *Response) dialH1(ctx context.Context) (*h1.Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.mu.Lock()
	if r.cause != nil {
		r.mu.Unlock()
		return nil, r.cause
	}
	r.dial = cancel
	r.mu.Unlock()
	conn, err := r.c.pool.Dial(ctx)
	r.mu.Lock()
	r.dial = nil
	r.mu.Unlock()
	return conn, err
}

// targetOf returns the request target of path: the URL's own path, then path.
func (c *Client) targetOf(path string) string {
	if c.target == "" {
		return path
	}
	if t, ok := c.targets.Load(path); ok {
		return t.(string)
	}
	t := c.target + path
	c.targets.Store(path, t)
	return t
}

// readError reads an error response's body, up to maxErrorBody.
func readError(r io.Reader) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r, maxErrorBody))
}

// contentType returns v as a string, without allocating for the engines' usual values.
func contentType(v []byte) string {
	for _, known := range knownTypes {
		if string(v) == known {
			return known
		}
	}
	return string(v)
}

var knownTypes = []string{
	"application/json", "application/json; charset=utf-8", "text/event-stream",
	"text/event-stream; charset=utf-8", "text/event-stream;charset=utf-8",
}

// doStd is Do on an https:// engine, through net/http (HTTP/2 where the engine offers it).
func (c *Client) doStd(ctx context.Context, resp *Response, r *Request) (answer, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	resp.mu.Lock()
	resp.cancel = cancel
	if resp.cause != nil { // the watchdog fired already
		cancel(resp.cause)
	}
	resp.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+r.Path, bytes.NewReader(r.Body))
	if err != nil {
		return answer{}, apierr.Wrap(apierr.API, err, "engine %s: bad request URL", c.name)
	}
	if r.Header != nil {
		for k, v := range r.Header.h {
			req.Header[k] = v
		}
	}
	setTraceContext(req.Header, ctx)
	if k := c.key.v; k != "" {
		if c.auth == "Authorization" {
			req.Header.Set("Authorization", "Bearer "+k)
		} else {
			req.Header.Set(c.auth, k)
		}
	}
	hr, err := c.hc.Do(req)
	if err != nil {
		return answer{}, err
	}
	resp.hr = hr
	resp.Status, resp.ContentType = hr.StatusCode, hr.Header.Get("Content-Type")
	if hr.StatusCode >= 200 && hr.StatusCode <= 299 {
		c.noteSimulated(hr.Header.Get("X-Layer0-Simulated"))
	}
	if hr.StatusCode < 200 || hr.StatusCode > 299 {
		a := answer{retryAfter: RetryAfter(hr.Header)}
		a.body, err = readError(hr.Body)
		if err != nil && len(a.body) == 0 {
			return answer{}, err
		}
		return a, nil
	}
	return answer{}, nil
}

// acquire takes a concurrency slot, waiting at most the first-byte timeout for one.
func (c *Client) acquire(ctx context.Context) error {
	if c.sem == nil {
		return nil
	}
	select {
	case c.sem <- struct{}{}:
		return nil
	default:
	}
	var wait <-chan time.Time
	if c.t.FirstByte > 0 {
		t := time.NewTimer(c.t.FirstByte)
		defer t.Stop()
		wait = t.C
	}
	select {
	case c.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-wait:
		return &apierr.Error{Kind: apierr.Overloaded, Message: "engine is at its maximum concurrency",
			Cause: fmt.Errorf("upstream: engine %s: no slot within %s", c.name, c.t.FirstByte)}
	}
}
