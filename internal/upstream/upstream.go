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
// It also holds the pass-through path's output (Out, which holds a stream's opening events
// until the attempt commits, and Renamer, which renames the model in the bytes that pass);
// events and JSON are read with wire/sse and wire/jsontext.
package upstream

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

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

// Redact replaces every occurrence of the credential in msg, also where msg spells it with JSON
// escapes (an engine that echoes the key inside a JSON string may write sk\/up or \u0073k, or
// escape it twice, in JSON inside JSON): the escaped spelling is replaced whole.
func (s Secret) Redact(msg string) string {
	if len(s.v) < 4 {
		return msg
	}
	if strings.Contains(msg, s.v) {
		msg = strings.ReplaceAll(msg, s.v, redacted)
	}
	if strings.IndexByte(msg, '\\') < 0 {
		return msg
	}
	return redactEscaped(msg, s.v)
}

// redacted replaces a credential in text.
const redacted = "[redacted]"

// maxUnescape bounds how many levels of JSON escaping Redact looks through.
const maxUnescape = 3

// redactEscaped replaces in msg every span that, once its JSON escapes are undone (up to
// maxUnescape times), spells secret.
func redactEscaped(msg, secret string) string {
	// text is msg unescaped so far; from[i], to[i] the span of msg that text[i] came from.
	text := []byte(msg)
	from, to := make([]int, len(text)), make([]int, len(text))
	for i := range text {
		from[i], to[i] = i, i+1
	}
	type span struct{ s, e int }
	var spans []span
	for range maxUnescape {
		if bytes.IndexByte(text, '\\') < 0 {
			break
		}
		text, from, to = unescapeOnce(text, from, to)
		for off := 0; ; {
			j := bytes.Index(text[off:], []byte(secret))
			if j < 0 {
				break
			}
			j += off
			spans = append(spans, span{from[j], to[j+len(secret)-1]})
			off = j + len(secret)
		}
	}
	if len(spans) == 0 {
		return msg
	}
	slices.SortFunc(spans, func(a, b span) int { return a.s - b.s })
	var b strings.Builder
	last := 0
	for _, sp := range spans {
		if sp.s < last { // overlaps one already replaced
			if sp.e > last {
				last = sp.e
			}
			continue
		}
		b.WriteString(msg[last:sp.s])
		b.WriteString(redacted)
		last = sp.e
	}
	b.WriteString(msg[last:])
	return b.String()
}

// unescapeOnce undoes one level of JSON string escapes in text (\/, \\, \", \n…, \uXXXX; what
// is not a valid escape stays as it is), carrying each byte's span of the original along.
func unescapeOnce(text []byte, from, to []int) ([]byte, []int, []int) {
	out := make([]byte, 0, len(text))
	nf, nt := make([]int, 0, len(text)), make([]int, 0, len(text))
	for i := 0; i < len(text); {
		c, n := text[i], 1
		if c == '\\' && i+1 < len(text) {
			switch e := text[i+1]; e {
			case '"', '\\', '/':
				c, n = e, 2
			case 'b':
				c, n = '\b', 2
			case 'f':
				c, n = '\f', 2
			case 'n':
				c, n = '\n', 2
			case 'r':
				c, n = '\r', 2
			case 't':
				c, n = '\t', 2
			case 'u':
				if i+6 <= len(text) {
					if v, err := strconv.ParseUint(string(text[i+2:i+6]), 16, 16); err == nil {
						var rb [utf8.UTFMax]byte
						k := utf8.EncodeRune(rb[:], rune(v))
						for _, r := range rb[:k] {
							out = append(out, r)
							nf, nt = append(nf, from[i]), append(nt, to[i+5])
						}
						i += 6
						continue
					}
				}
			}
		}
		out = append(out, c)
		nf, nt = append(nf, from[i]), append(nt, to[i+n-1])
		i += n
	}
	return out, nf, nt
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
	// Logger receives the engine's error answers in full (credential redacted), which clients
	// get only a sanitised reason of. Nil logs nothing.
	Logger *slog.Logger
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

	closed atomic.Bool // set by Close: Do refuses new requests
	// simulated is set while the engine's answers say X-Layer0-Simulated: true (another layer0
	// serving a simulator).
	simulated atomic.Bool

	log *slog.Logger // nil logs nothing
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
	c := &Client{name: name, base: strings.TrimRight(cfg.URL, "/"), t: cfg.Timeouts, key: &Secret{}, auth: opts.AuthHeader,
		log: opts.Logger}
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
			return nil, fmt.Errorf("upstream: engine %s: url %q: want http://host[:port][/path]", name, redactedURL(cfg.URL))
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

// Close retires the client: it closes the idle connections, a connection freed by a response
// still open is closed instead of pooled, and a later Do fails with a 503 (no engine can
// serve). Call it once no request uses the client any more.
func (c *Client) Close() {
	c.closed.Store(true)
	if c.pool != nil {
		c.pool.Close()
	}
	c.tr.CloseIdleConnections()
}

// Simulated reports whether the engine's last answer said it came from a simulator
// (X-Layer0-Simulated: true, as layer0 sends for its sim engine), so that a chain of layer0s
// still tells the client.
func (c *Client) Simulated() bool { return c.simulated.Load() }

// noteSimulated records the engine's X-Layer0-Simulated header value of a 2xx answer.
func (c *Client) noteSimulated(v string) {
	if sim := v == "true"; sim != c.simulated.Load() {
		c.simulated.Store(sim)
	}
}

// errClosed is the cause of a request sent through a closed client.
var errClosed = errors.New("upstream: client closed")

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
	// runs until the response headers, and the idle timeout bounds every gap in the body after
	// them (an engine that stalls after its headers fails, without waiting for the total bound).
	Stream bool
	// DecodeError turns an error status and body into an *apierr.Error.
	DecodeError func(status int, body []byte) *apierr.Error
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

// redactedURL is s for a message: its password masked, or nothing of it when it does not parse
// (a password could be anywhere in it).
func redactedURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(not a URL)"
	}
	return u.Redacted()
}
