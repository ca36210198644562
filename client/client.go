// Package client is layer0's Go client. A Client holds one HTTP transport, so its requests share
// warm connections: HTTP/3 over QUIC (Options.HTTP3, with HTTP/2 fallback), HTTP/2 over TLS
// (negotiated by ALPN), HTTP/2 cleartext with prior knowledge (H2C), or HTTP/1.1 keep-alive. It speaks the binary protocol (docs/protocol.md; version 1, or 2
// with token IDs or text frames) or the Anthropic Messages API (SSE or JSON), and every answer is
// a Stream of canonical events read with a range-over-func iterator. Every failure the server
// reports, before or inside the stream, is an *Error. Cancelling the request's context ends the
// stream at once and closes it on the wire, so the server stops the engine.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/layer0ai/layer0/internal/h3"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/vocab"
	"github.com/layer0ai/layer0/internal/wire/anthropic"
	"github.com/layer0ai/layer0/internal/wire/binary"
)

// Protocol is the wire format a Client speaks. The zero value is Binary2.
type Protocol uint8

// Protocols.
const (
	// Binary2 is the binary protocol, version 2, with token IDs (the vocabulary is fetched once).
	Binary2 Protocol = iota
	// Binary2Text is version 2 with text frames: no vocabulary needed.
	Binary2Text
	// Binary1 is the binary protocol, version 1: text messages and max_tokens only.
	Binary1
	// SSE is the Anthropic Messages API, streamed.
	SSE
	// JSON is the Anthropic Messages API, not streamed: the events arrive all at once.
	JSON
)

// String names the protocol.
func (p Protocol) String() string {
	switch p {
	case Binary2Text:
		return "binary2-text"
	case Binary1:
		return "binary1"
	case SSE:
		return "sse"
	case JSON:
		return "json"
	}
	return "binary2"
}

// Transport is how a Client reaches the server. The zero value is Auto.
type Transport uint8

// Transports.
const (
	// Auto negotiates HTTP/2 over TLS for https URLs (HTTP/1.1 if the server refuses) and uses
	// HTTP/1.1 for http URLs.
	Auto Transport = iota
	// H2C speaks HTTP/2 without TLS, with prior knowledge, to an http URL.
	H2C
	// HTTP1 speaks HTTP/1.1 only.
	HTTP1
)

// HTTP3 is the HTTP/3 policy of a Client for https URLs.
type HTTP3 uint8

// HTTP/3 policies.
const (
	// HTTP3FromEnv follows the LAYER0_HTTP3 environment variable: off, auto or on (off when
	// unset; New fails on any other value).
	HTTP3FromEnv HTTP3 = iota
	// HTTP3Off never uses HTTP/3.
	HTTP3Off
	// HTTP3Auto tries HTTP/3 first and falls back to HTTP/2 (or HTTP/1.1) when the QUIC
	// handshake fails or takes longer than Options.HTTP3Timeout — UDP blocked, the port closed,
	// a server without HTTP/3; the host then stays on HTTP/2 for five minutes. 0-RTT is never
	// used: requests are POSTs, and data sent in 0-RTT can be replayed.
	HTTP3Auto
	// HTTP3On uses HTTP/3 only.
	HTTP3On
)

// Options configure a Client.
type Options struct {
	// BaseURL is the server, e.g. "http://127.0.0.1:8080". Required.
	BaseURL string
	// APIKey is sent as x-api-key when set.
	APIKey string
	// Protocol is the wire format; default Binary2.
	Protocol Protocol
	// Transport is the HTTP version policy; default Auto. Ignored with HTTPClient.
	Transport Transport
	// TLSConfig configures TLS for https URLs (roots, client certificates). Ignored with
	// HTTPClient.
	TLSConfig *tls.Config
	// HTTP3 is the HTTP/3 policy for https URLs; the zero value, HTTP3FromEnv, reads the
	// LAYER0_HTTP3 environment variable (off, auto or on; off when unset). Ignored with
	// HTTPClient and for http URLs.
	HTTP3 HTTP3
	// HTTP3Timeout bounds the QUIC handshake before HTTP3Auto falls back to HTTP/2; default 1s.
	HTTP3Timeout time.Duration
	// HTTPClient replaces the client New builds.
	HTTPClient *http.Client
	// Header is sent with every request.
	Header http.Header
}

// Client sends requests to one layer0 (or compatible) server. It is safe for concurrent use;
// make one and reuse it, so that requests share connections.
type Client struct {
	o    Options
	base string
	hc   *http.Client

	mu     sync.Mutex
	vocabs map[string]*vocab.Vocab // fetched vocabularies by hash
}

// New returns a Client.
func New(o Options) (*Client, error) {
	base := strings.TrimRight(o.BaseURL, "/")
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return nil, fmt.Errorf("client: BaseURL %q must start with http:// or https://", o.BaseURL)
	}
	if o.Transport == H2C && strings.HasPrefix(base, "https://") {
		return nil, errors.New("client: H2C needs an http:// BaseURL (HTTP/2 over TLS is negotiated by Auto)")
	}
	hc := o.HTTPClient
	if hc == nil {
		var rt http.RoundTripper = newTransport(o)
		if strings.HasPrefix(base, "https://") && o.Transport != HTTP1 {
			mode, err := h3Mode(o.HTTP3)
			if err != nil {
				return nil, fmt.Errorf("client: %w", err)
			}
			if mode != h3.Off {
				if rt, err = h3.NewTransport(h3.Options{Mode: mode, TLSConfig: o.TLSConfig, Fallback: rt,
					HandshakeTimeout: o.HTTP3Timeout}); err != nil {
					return nil, fmt.Errorf("client: %w", err)
				}
			}
		}
		hc = &http.Client{Transport: rt}
	}
	return &Client{o: o, base: base, hc: hc, vocabs: map[string]*vocab.Vocab{}}, nil
}

// h3Mode is the h3 policy of p.
func h3Mode(p HTTP3) (h3.Mode, error) {
	switch p {
	case HTTP3Off:
		return h3.Off, nil
	case HTTP3Auto:
		return h3.Auto, nil
	case HTTP3On:
		return h3.On, nil
	}
	return h3.ModeFromEnv(nil)
}

func newTransport(o Options) *http.Transport {
	var p http.Protocols
	switch o.Transport {
	case H2C:
		p.SetUnencryptedHTTP2(true)
	case HTTP1:
		p.SetHTTP1(true)
	default:
		p.SetHTTP1(true)
		p.SetHTTP2(true)
	}
	return &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     o.TLSConfig,
		TLSHandshakeTimeout: 10 * time.Second,
		ForceAttemptHTTP2:   o.Transport == Auto,
		Protocols:           &p,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // streams must not wait on a decompressor's buffer
	}
}

// CloseIdleConnections closes the connections the Client keeps for reuse.
func (c *Client) CloseIdleConnections() { c.hc.CloseIdleConnections() }

// Message sends req and returns the whole answer.
func (c *Client) Message(ctx context.Context, req *Request) (*Response, error) {
	s, err := c.Stream(ctx, req)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	var col llm.Collector
	if err := s.read(&col); err != nil {
		return &col.Response, err
	}
	return &col.Response, nil
}

// Stream sends req and returns its response stream once the response headers have arrived; an
// error before that (the server refused the request) is an *Error. The caller must read the
// stream to its end or Close it. Cancelling ctx ends the stream.
func (c *Client) Stream(ctx context.Context, req *Request) (*Stream, error) {
	s := &Stream{c: c, proto: c.o.Protocol}
	var (
		body []byte
		ct   string
		err  error
	)
	switch s.proto {
	case SSE, JSON:
		r := *req
		r.Stream = s.proto == SSE
		body, ct = anthropic.AppendRequest(nil, &r), "application/json"
	default:
		s.mode = binary.Mode{Version: binary.V2, Text: s.proto == Binary2Text}
		if s.proto == Binary1 {
			s.mode = binary.Mode{Version: binary.V1, MaxTokens: req.MaxTokens}
		}
		if body, err = binary.AppendRequest(nil, req, s.mode); err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
		ct = s.mode.ContentType()
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/messages", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	for k, v := range c.o.Header {
		hr.Header[k] = v
	}
	hr.Header.Set("Content-Type", ct)
	hr.Header.Set("Anthropic-Version", "2023-06-01")
	if c.o.APIKey != "" {
		hr.Header.Set("X-Api-Key", c.o.APIKey)
	}
	resp, err := c.hc.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, responseError(resp)
	}
	s.resp = resp
	if s.proto <= Binary1 {
		if !binary.IsMediaType(resp.Header.Get("Content-Type")) {
			resp.Body.Close()
			return nil, fmt.Errorf("client: the server answered with Content-Type %q, not the binary protocol", resp.Header.Get("Content-Type"))
		}
		if !s.mode.Text {
			if s.voc, err = c.vocab(ctx, resp.Header.Get(vocab.HashHeader)); err != nil {
				resp.Body.Close()
				return nil, err
			}
		}
	}
	return s, nil
}

// responseError turns an HTTP error response into an *Error.
func responseError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	e := anthropic.DecodeError(resp.StatusCode, b)
	e.Cause = nil // the decoder describes an upstream; here the server is the peer
	if e.Code == "" {
		e.Code = resp.Header.Get("X-Error-Code")
	}
	if ra := resp.Header.Get("Retry-After-Ms"); ra != "" {
		if ms, err := time.ParseDuration(ra + "ms"); err == nil {
			e.RetryAfter = ms
		}
	}
	return e
}

// vocab returns the vocabulary named by hash: the embedded default when the hashes match,
// otherwise fetched once from the server and kept.
func (c *Client) vocab(ctx context.Context, hash string) (*vocab.Vocab, error) {
	if hash == "" {
		return nil, errors.New("client: the binary response names no vocabulary (" + vocab.HashHeader + ")")
	}
	if d := vocab.Default(); d.Hash() == hash {
		return d, nil
	}
	c.mu.Lock()
	v := c.vocabs[hash]
	c.mu.Unlock()
	if v != nil {
		return v, nil
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+vocab.PathPrefix+hash, nil)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	resp, err := c.hc.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("client: vocabulary: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, responseError(resp)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("client: vocabulary: %w", err)
	}
	if v, err = vocab.Parse(b); err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if v.Hash() != hash {
		return nil, fmt.Errorf("client: vocabulary %s has hash %s", hash, v.Hash())
	}
	c.mu.Lock()
	c.vocabs[hash] = v
	c.mu.Unlock()
	return v, nil
}

// Stream is one response being read. It is not safe for concurrent use.
type Stream struct {
	c     *Client
	proto Protocol
	mode  binary.Mode
	voc   *vocab.Vocab
	resp  *http.Response
	used  bool
}

// HTTPResponse is the response (status, headers, Proto); its body belongs to the Stream.
func (s *Stream) HTTPResponse() *http.Response { return s.resp }

// Close ends the stream: it closes the body, which on HTTP/2 resets the stream and on HTTP/1.1
// closes the connection, so the server stops generating. Closing a stream read to its end
// keeps the connection for reuse.
func (s *Stream) Close() error { return s.resp.Body.Close() }

// Events returns the stream's events in order, for range: each with a nil error, then, if the
// stream failed, one (nil, err) pair: an *Error the server sent, a context error, or a decoding
// error. An event is valid until the next iteration. Breaking out of the loop closes the
// stream. A Stream can be iterated once.
func (s *Stream) Events() iter.Seq2[*Event, error] {
	return func(yield func(*Event, error) bool) {
		defer s.Close()
		if s.used {
			yield(nil, errors.New("client: the stream was already read"))
			return
		}
		y := &yieldSink{yield: yield}
		err := s.read(y)
		if err != nil && !y.stopped {
			yield(nil, err)
		}
	}
}

// read pushes the stream's events into sink.
func (s *Stream) read(sink llm.Sink) error {
	s.used = true
	var err error
	switch s.proto {
	case SSE:
		err = anthropic.ReadStream(s.resp.Body, sink)
	case JSON:
		var b []byte
		if b, err = io.ReadAll(s.resp.Body); err == nil {
			err = anthropic.ReadResponse(b, sink)
		}
	default:
		err = binary.ReadStream(s.resp.Body, s.mode, s.voc, sink)
	}
	if err == nil || errors.Is(err, errStopped) {
		return err
	}
	if ctxErr := s.resp.Request.Context().Err(); ctxErr != nil {
		return ctxErr
	}
	var e *Error
	if errors.As(err, &e) {
		return e // the server's report
	}
	return fmt.Errorf("client: %w", err)
}

// errStopped ends the read when the range loop breaks.
var errStopped = errors.New("client: iteration stopped")

type yieldSink struct {
	yield   func(*Event, error) bool
	stopped bool
}

func (y *yieldSink) Send(ev *Event) error {
	if !y.yield(ev, nil) {
		y.stopped = true
		return errStopped
	}
	return nil
}

func (y *yieldSink) Flush() error { return nil }
