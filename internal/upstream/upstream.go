// Package upstream is the HTTP side of the engines that live behind a URL (openai, anthropic,
// layer0): one pooled keep-alive transport per engine that speaks HTTP/2 wherever the engine
// offers it over TLS (ALPN) and HTTP/1.1 otherwise; a credential read once from the environment
// and never formatted; a concurrency cap; and the four timeouts of config.Timeouts enforced by one
// timer per request — connect by the dialer, first byte and idle gap by a watchdog re-armed on
// every body read, total by a deadline — each of which cancels the upstream request at once, as
// does the client's own context. Every failure comes back as an *apierr.Error naming the
// timeout or status, with the engine's text never carrying the credential.
//
// It also holds the byte-level helpers of the pass-through path: a top-level JSON field finder
// that rewrites "model" in place without decoding the body, and an SSE event reader.
package upstream

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
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
	t        config.Timeouts
	sem      chan struct{}
	inflight atomic.Int64
	bufs     sync.Pool
}

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
		c.key = &Secret{v}
	}
	if cfg.MaxConcurrency > 0 {
		c.sem = make(chan struct{}, cfg.MaxConcurrency)
	}
	c.tr = NewTransport(cfg.Timeouts.Connect, opts.TLSConfig)
	c.hc = &http.Client{
		Transport: c.tr,
		// An engine's redirect is a misconfiguration; following it could resend the credential.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
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
func (c *Client) CloseIdle() { c.tr.CloseIdleConnections() }

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

// Request is one call to the engine.
type Request struct {
	// Path is appended to the engine's URL, for example "/v1/chat/completions".
	Path string
	// Header holds the request headers (auth, content type).
	Header http.Header
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
	resp := &Response{c: c, parent: ctx, stream: r.Stream}
	c.inflight.Add(1)
	ctx, resp.cancel = context.WithCancelCause(ctx)
	if c.t.Total > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithDeadlineCause(ctx, start.Add(c.t.Total), errTotal)
		resp.stopTotal = stop
	}
	resp.ctx = ctx
	if fb := c.t.FirstByte; fb > 0 {
		resp.timer = time.AfterFunc(fb-time.Since(start), resp.expire)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+r.Path, bytes.NewReader(r.Body))
	if err != nil {
		resp.Close()
		return nil, apierr.Wrap(apierr.API, err, "engine %s: bad request URL", c.name)
	}
	for k, v := range r.Header {
		req.Header[k] = v
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
		err = resp.Err(err)
		resp.Close()
		return nil, err
	}
	resp.raw = hr.Body
	resp.Status, resp.Header = hr.StatusCode, hr.Header
	if hr.StatusCode < 200 || hr.StatusCode > 299 {
		body, rerr := io.ReadAll(io.LimitReader(hr.Body, maxErrorBody))
		if rerr != nil && len(body) == 0 {
			err := resp.Err(rerr)
			resp.Close()
			return nil, err
		}
		resp.Close()
		e := r.DecodeError(hr.StatusCode, body)
		e.Message = c.key.Redact(e.Message)
		if ra := RetryAfter(hr.Header); ra > 0 {
			e.RetryAfter = ra
		}
		if e.Cause == nil {
			e.Cause = fmt.Errorf("upstream: engine %s answered status %d", c.name, hr.StatusCode)
		}
		return nil, e
	}
	if !r.Stream && resp.timer != nil {
		resp.timer.Stop()
	}
	resp.Body = &watchedBody{r: resp}
	return resp, nil
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

// Response is an engine's 2xx answer. Body resets the idle watchdog on every read.
type Response struct {
	Status int
	Header http.Header
	Body   io.Reader

	c         *Client
	parent    context.Context
	ctx       context.Context
	cancel    context.CancelCauseFunc
	stopTotal context.CancelFunc
	timer     *time.Timer
	raw       io.ReadCloser
	stream    bool
	gotFirst  atomic.Bool
	closed    bool
}

// expire runs when the watchdog fires.
func (r *Response) expire() {
	if r.gotFirst.Load() {
		r.cancel(errIdle)
	} else {
		r.cancel(errFirstByte)
	}
}

// Close releases the connection (or cancels the request when the body was not read to the
// end), the timers and the concurrency slot. It is safe to call more than once.
func (r *Response) Close() {
	if r.closed {
		return
	}
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
	}
	if r.raw != nil {
		r.raw.Close()
	}
	r.cancel(context.Canceled)
	if r.stopTotal != nil {
		r.stopTotal()
	}
	r.c.inflight.Add(-1)
	if r.c.sem != nil {
		<-r.c.sem
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
	switch context.Cause(r.ctx) {
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
	n, err := w.r.raw.Read(p)
	if n > 0 && w.r.timer != nil && w.r.stream {
		w.r.gotFirst.Store(true)
		if idle := w.r.c.t.Idle; idle > 0 {
			w.r.timer.Reset(idle)
		} else {
			w.r.timer.Stop()
		}
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
