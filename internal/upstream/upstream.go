// Package upstream is the HTTP side of the engines that live behind a URL (openai, anthropic,
// layer0): one pooled keep-alive client per engine — for http:// URLs internal/h1's lean
// HTTP/1.1 connections (the request written from the caller's goroutine in one write, no header
// maps, no goroutine per connection), for https:// net/http's transport, which speaks HTTP/2
// wherever the engine offers it (ALPN); a credential read once from the environment and never
// formatted; a concurrency cap; and the four timeouts of config.Timeouts — connect by the
// dialer, and first byte, idle gap and total by one watchdog timer per request re-armed on every
// body read — each of which aborts the upstream request at once (closing its connection), as
// does the client's own context. Every failure comes back as an *apierr.Error naming the
// timeout or status, with the engine's text never carrying the credential.
//
// It also holds the byte-level helpers of the pass-through path: a top-level JSON field finder
// that rewrites "model" in place without decoding the body, and an SSE event reader.
package upstream

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/h1"
	"github.com/layer0ai/layer0/internal/h3"
)

// Secret is a credential. It formats as [redacted] with every verb, so printing a struct that
// holds one cannot leak it; Value is the only way to read it.
type Secret struct{ v string }

// String implements fmt.Stringer.
func (Secret) String() string { return "[redacted]" }

// GoString implements fmt.GoStringer.
func (Secret) GoString() string { return "[redacted]" }

// Value returns the credential, for the one header that carries it.
func (s Secret) Value() string { return s.v }

// Redact replaces every occurrence of the credential in msg.
func (s Secret) Redact(msg string) string {
	if len(s.v) < 4 || !strings.Contains(msg, s.v) {
		return msg
	}
	return strings.ReplaceAll(msg, s.v, "[redacted]")
}

// Options are the parts of a Client that do not come from the config file.
type Options struct {
	// TLSConfig is the TLS client configuration (a private CA, for tests). Nil: system roots.
	TLSConfig *tls.Config
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
	// HTTP3 is the HTTP/3 policy for an https:// engine (h3.Auto falls back to HTTP/2 when the
	// QUIC handshake fails within h3.DefaultHandshakeTimeout). The zero value is h3.Off; the
	// layer0 engine kind sets HTTP3FromEnv instead.
	HTTP3 h3.Mode
	// HTTP3FromEnv, when HTTP3 is h3.Off, reads the policy from LAYER0_HTTP3 through Getenv
	// (off, auto or on; any other value is an error).
	HTTP3FromEnv bool
	// AuthHeader is the header that carries the credential: "Authorization" (the default,
	// sent as "Bearer KEY") or another name such as "X-Api-Key" (sent as the bare key).
	AuthHeader string
}

// Client sends requests to one engine. It is safe for concurrent use; its zero value is not.
type Client struct {
	name     string
	base     string
	key      *Secret // a pointer, so that printing a Client shows an address, not the key
	auth     string  // header carrying the key
	hc       *http.Client
	tr       *http.Transport
	h3       *h3.Transport // nil unless HTTP/3 is on or auto for an https:// engine
	t        config.Timeouts
	sem      chan struct{}
	inflight atomic.Int64
	bufs     sync.Pool

	// The http:// path: connections from pool; every request starts with target (the URL's
	// path), then host and authLine (the credential's header line) go into its head.
	pool     *h1.Pool
	target   string
	host     string
	authLine []byte
	targets  sync.Map // a Request's Path → target + Path

	resps sync.Pool // *Response
}

// maxIdleConns bounds the idle connections kept per engine.
const maxIdleConns = 256

// readBufferSize is each engine connection's read buffer: large enough that a fast engine's
// head and whole answer of 100 SSE events (13 KiB) arrive in one read, so that they reach the
// client in one flush (with 8 KiB the answer came in two reads, and two flushes: 5.1 writes
// to the client's connection per stream instead of 4); small enough for 10,000 open streams
// (160 MiB). A response head's lines must each fit in it.
const readBufferSize = 16 << 10

// New returns a client for the engine named name. It reads cfg.APIKeyEnv from the environment
// now, once; a variable that is named but empty is an error (naming the variable, not a value).
func New(name string, cfg config.Engine, opts Options) (*Client, error) {
	if !strings.HasPrefix(cfg.URL, "http://") && !strings.HasPrefix(cfg.URL, "https://") {
		return nil, fmt.Errorf("upstream: engine %s: url must start with http:// or https://", name)
	}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	c := &Client{name: name, base: strings.TrimRight(cfg.URL, "/"), t: cfg.Timeouts, key: &Secret{}, auth: opts.AuthHeader}
	if c.auth == "" {
		c.auth = "Authorization"
	}
	if cfg.APIKeyEnv != "" {
		v := getenv(cfg.APIKeyEnv)
		if v == "" {
			return nil, fmt.Errorf("upstream: engine %s: environment variable %s is empty or unset", name, cfg.APIKeyEnv)
		}
		if strings.ContainsAny(v, "\r\n") {
			return nil, fmt.Errorf("upstream: engine %s: environment variable %s holds a line break", name, cfg.APIKeyEnv)
		}
		c.key = &Secret{v}
	}
	if cfg.MaxConcurrency > 0 {
		c.sem = make(chan struct{}, cfg.MaxConcurrency)
	}
	if opts.HTTP3 == h3.Off && opts.HTTP3FromEnv {
		mode, err := h3.ModeFromEnv(getenv)
		if err != nil {
			return nil, fmt.Errorf("upstream: engine %s: %w", name, err)
		}
		opts.HTTP3 = mode
	}
	c.tr = NewTransport(cfg.Timeouts.Connect, opts.TLSConfig)
	var rt http.RoundTripper = c.tr
	if opts.HTTP3 != h3.Off && strings.HasPrefix(c.base, "https://") {
		t, err := h3.NewTransport(h3.Options{Mode: opts.HTTP3, TLSConfig: opts.TLSConfig, Fallback: c.tr,
			HandshakeTimeout: min(cfg.Timeouts.Connect, h3.DefaultHandshakeTimeout)})
		if err != nil {
			return nil, fmt.Errorf("upstream: engine %s: %w", name, err)
		}
		c.h3, rt = t, t
	}
	c.hc = &http.Client{
		Transport: rt,
		// An engine's redirect is a misconfiguration; following it could resend the credential.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	if strings.HasPrefix(c.base, "http://") {
		u, err := url.Parse(c.base)
		if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("upstream: engine %s: url %q: want http://host[:port][/path]", name, cfg.URL)
		}
		addr := u.Host
		if u.Port() == "" {
			addr = net.JoinHostPort(u.Hostname(), "80")
		}
		c.host, c.target = u.Host, u.EscapedPath()
		c.pool = &h1.Pool{Addr: addr, MaxIdle: maxIdleConns, IdleTimeout: 90 * time.Second, ReadSize: readBufferSize,
			Dialer: &net.Dialer{Timeout: cfg.Timeouts.Connect, KeepAlive: 30 * time.Second}}
		if k := c.key.v; k != "" {
			if c.auth == "Authorization" {
				c.authLine = []byte("Authorization: Bearer " + k + "\r\n")
			} else {
				c.authLine = []byte(http.CanonicalHeaderKey(c.auth) + ": " + k + "\r\n")
			}
		}
	}
	return c, nil
}

// NewTransport returns the tuned transport engines share their connections through: a large
// keep-alive pool per host (an engine is one host), HTTP/2 negotiated by ALPN on TLS, no
// transparent gzip (it would hold back streamed bytes), no proxy from the environment, and
// connect bounding both the TCP dial and the TLS handshake.
func NewTransport(connect time.Duration, tlsConfig *tls.Config) *http.Transport {
	d := &net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   connect,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		ReadBufferSize:        32 << 10,
		WriteBufferSize:       32 << 10,
	}
	if tlsConfig != nil {
		tr.TLSClientConfig = tlsConfig.Clone()
	}
	return tr
}

// Name is the engine's name from the config.
func (c *Client) Name() string { return c.name }

// Key is the engine's credential (empty when none is configured).
func (c *Client) Key() Secret { return *c.key }

// InFlight is the number of requests to the engine now in progress.
func (c *Client) InFlight() int { return int(c.inflight.Load()) }

// CloseIdle closes the idle pooled connections.
func (c *Client) CloseIdle() {
	c.tr.CloseIdleConnections()
	if c.h3 != nil {
		c.h3.CloseIdleConnections()
	}
	if c.pool != nil {
		c.pool.CloseIdle()
	}
}

// Buffer returns a reusable buffer for a request body; give it back with PutBuffer once the
// response is closed.
func (c *Client) Buffer() *[]byte {
	if b, ok := c.bufs.Get().(*[]byte); ok {
		*b = (*b)[:0]
		return b
	}
	b := make([]byte, 0, 4096)
	return &b
}

// PutBuffer returns a buffer from Buffer.
func (c *Client) PutBuffer(b *[]byte) {
	if cap(*b) <= 1<<20 {
		c.bufs.Put(b)
	}
}

// Header is a set of request headers prepared once for every request that carries it: the
// wire lines of the HTTP/1.1 path are formatted at NewHeader, not per request.
type Header struct {
	h    http.Header
	wire []byte
}

// NewHeader prepares h, which must not be modified afterwards. A name or value holding a line
// break is an error.
func NewHeader(h http.Header) (*Header, error) {
	wire, err := h1.AppendHeader(nil, h)
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	return &Header{h: h, wire: wire}, nil
}

// Get returns the first value of the header name.
func (h *Header) Get(name string) string { return h.h.Get(name) }

// Request is one call to the engine.
type Request struct {
	// Path is appended to the engine's URL, for example "/v1/chat/completions".
	Path string
	// Header holds the request headers (content type, accept, version); the credential is
	// added by the Client. Nil sends none.
	Header *Header
	// Body is the request body. It must stay unchanged until the response is closed.
	Body []byte
	// Stream says the answer is streamed: the first-byte timeout then runs until the first body
	// byte, and the idle timeout bounds every gap after it. Otherwise the first-byte timeout
	// runs until the response headers.
	Stream bool
	// DecodeError turns an error status and body into an *apierr.Error.
	DecodeError func(status int, body []byte) *apierr.Error
}

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
	if err := c.acquire(ctx); err != nil {
		return nil, err
	}
	c.inflight.Add(1)
	resp := c.newResponse(ctx, r.Stream, start)
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
		e := r.DecodeError(status, a.body)
		e.Message = c.key.Redact(e.Message)
		if a.retryAfter > 0 {
			e.RetryAfter = a.retryAfter
		}
		if e.Cause == nil {
			e.Cause = fmt.Errorf("upstream: engine %s answered status %d", c.name, status)
		}
		return nil, e
	}
	if !r.Stream {
		resp.headers() // the first-byte bound ends with the headers
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
	req := h1.AppendRequest(*buf, http.MethodPost, c.targetOf(r.Path), c.host, len(r.Body), hdr, c.authLine)
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
	stream bool
	body   watchedBody
	br     *bufio.Reader // Reader's buffer, made once per pooled Response
	timer  *time.Timer   // the watchdog, created once per pooled Response
	onDone func()        // parentDone, as a func value made once per pooled Response

	// mu guards the rest, which the watchdog and the parent context's cancellation use from
	// their own goroutines.
	mu       sync.Mutex
	due      time.Time // when the watchdog's current bound ends; zero when none runs
	total    time.Time // when the total bound ends; zero when there is none
	gotFirst bool      // a streamed body returned its first byte
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
// for the decoders that take a *bufio.Reader as it is (wire's ReadStream, EventReader): they
// allocate no buffer of their own, and a fast engine's whole answer arrives in one read. Read
// the body through Body or through Reader, not both.
func (r *Response) Reader() *bufio.Reader { return r.br }

// newResponse returns a pooled Response for a call starting now, its watchdog armed.
func (c *Client) newResponse(ctx context.Context, stream bool, start time.Time) *Response {
	r, _ := c.resps.Get().(*Response)
	if r == nil {
		r = &Response{}
		r.timer = time.AfterFunc(time.Hour, r.expire)
		r.timer.Stop()
		r.onDone = r.parentDone
	}
	r.mu.Lock()
	r.Status, r.ContentType, r.Body = 0, "", nil
	r.c, r.parent, r.stream = c, ctx, stream
	r.body = watchedBody{r}
	r.due, r.total, r.gotFirst = time.Time{}, time.Time{}, false
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

// headers moves a non-streamed call from the first-byte bound to the total bound alone.
func (r *Response) headers() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rearmLocked(r.total)
}

// read re-arms the watchdog after a streamed body read that returned data: the idle bound
// (within the total bound) from now.
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
	if due.IsZero() {
		r.timer.Stop()
		return
	}
	r.timer.Reset(time.Until(due))
}

// expire runs when the watchdog fires. A bound that is not due (a read re-armed it while the
// timer fired, or the fire is from an earlier use of a pooled Response) is left running.
func (r *Response) expire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.due.IsZero() {
		return
	}
	now := time.Now()
	if now.Before(r.due) {
		r.timer.Reset(r.due.Sub(now))
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
	watch := r.stop == nil && r.parent.Done() != nil
	r.mu.Unlock()
	if watch {
		stop := context.AfterFunc(r.parent, r.onDone)
		r.mu.Lock()
		r.stop = stop
		r.mu.Unlock()
	}
	return nil
}

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
	r.due = time.Time{}
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
		ae.Message = r.c.key.Redact(ae.Message)
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
	if n > 0 && r.stream {
		r.read()
	}
	return n, err
}

// RetryAfter parses retry-after-ms, then retry-after (seconds or an HTTP date). Zero when
// absent or unparsable.
func RetryAfter(h http.Header) time.Duration {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

// NewAPI is what every HTTP engine needs at construction: the client for cfg (the credential
// read once), the request path — apiPath ("/v1/…"), or its tail when cfg.URL already ends in
// /v1 — and the fixed request headers, prepared once.
func NewAPI(name string, cfg config.Engine, o Options, apiPath string, hdr http.Header) (*Client, string, *Header, error) {
	c, err := New(name, cfg, o)
	if err != nil {
		return nil, "", nil, err
	}
	h, err := NewHeader(hdr)
	if err != nil {
		return nil, "", nil, err
	}
	if strings.HasSuffix(strings.TrimRight(cfg.URL, "/"), "/v1") {
		apiPath = strings.TrimPrefix(apiPath, "/v1")
	}
	return c, apiPath, h, nil
}
