// Package h3 is layer0's HTTP/3 client policy: a RoundTripper that sends https requests over
// HTTP/3 (QUIC) and, in Auto mode, falls back to another transport (HTTP/2 over TLS) when the
// QUIC handshake does not complete within a short timeout — UDP blocked, the port closed, or a
// server without HTTP/3. The Go client and the layer0 engine kind both use it.
//
// 0-RTT is never used: connections are dialed with a full handshake (quic.DialAddr, not its early
// variant), so no request travels as replayable early data — layer0's requests are POSTs that
// start billed generations.
package h3

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// EnvVar is the environment variable that sets the Mode: off, auto or on.
const EnvVar = "LAYER0_HTTP3"

// Mode is the HTTP/3 policy for https URLs.
type Mode uint8

// Modes.
const (
	// Off never uses HTTP/3.
	Off Mode = iota
	// Auto tries HTTP/3 first and falls back to HTTP/2 when the QUIC handshake fails or takes
	// longer than the handshake timeout; a host that failed stays on HTTP/2 for RetryAfter.
	Auto
	// On uses HTTP/3 only: a failed handshake is the request's error.
	On
)

// String names the mode as ParseMode reads it.
func (m Mode) String() string {
	switch m {
	case Auto:
		return "auto"
	case On:
		return "on"
	}
	return "off"
}

// ParseMode reads "off", "auto" or "on" (any case); the empty string is Off.
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "off":
		return Off, nil
	case "auto":
		return Auto, nil
	case "on":
		return On, nil
	}
	return Off, fmt.Errorf("h3: %s=%q: want off, auto or on", EnvVar, s)
}

// ModeFromEnv reads EnvVar through getenv (os.Getenv when nil).
func ModeFromEnv(getenv func(string) string) (Mode, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	return ParseMode(getenv(EnvVar))
}

// DefaultHandshakeTimeout bounds the QUIC handshake before Auto falls back.
const DefaultHandshakeTimeout = time.Second

// DefaultRetryAfter is how long a host whose handshake failed stays on the fallback.
const DefaultRetryAfter = 5 * time.Minute

// Options configure a Transport.
type Options struct {
	// Mode is the policy; Off makes the Transport the fallback alone.
	Mode Mode
	// TLSConfig configures TLS (roots, client certificates); its NextProtos are replaced by h3.
	TLSConfig *tls.Config
	// Fallback carries http URLs, Off mode, and Auto's fallback. Required.
	Fallback http.RoundTripper
	// HandshakeTimeout bounds the QUIC handshake; default DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// RetryAfter is how long Auto keeps a failed host on the fallback; default
	// DefaultRetryAfter.
	RetryAfter time.Duration
	// QUICTransport, when set, is the UDP socket connections are dialed through (the caller
	// owns and closes it), e.g. one over a PacketConn that counts the bytes on the wire. By
	// default each connection dials from a socket of its own.
	QUICTransport *quic.Transport
}

// Transport is an http.RoundTripper following a Mode. It is safe for concurrent use.
type Transport struct {
	o  Options
	h3 *http3.Transport

	mu     sync.Mutex
	broken map[string]time.Time // host → until when it stays on the fallback
	now    func() time.Time
}

// dialError marks a failed QUIC handshake: nothing of the request was sent, so it can go to the
// fallback unchanged.
type dialError struct{ err error }

func (e *dialError) Error() string { return "quic handshake: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// NewTransport returns a Transport for o.
func NewTransport(o Options) (*Transport, error) {
	if o.Fallback == nil {
		return nil, errors.New("h3: Options.Fallback is required")
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = DefaultRetryAfter
	}
	t := &Transport{o: o, broken: map[string]time.Time{}, now: time.Now}
	if o.Mode == Off {
		return t, nil
	}
	var tc *tls.Config
	if o.TLSConfig != nil {
		tc = o.TLSConfig.Clone()
	}
	timeout := o.HandshakeTimeout
	qt := o.QUICTransport
	t.h3 = &http3.Transport{
		TLSClientConfig:    tc,
		DisableCompression: true, // streams must not wait on a decompressor's buffer
		QUICConfig: &quic.Config{
			HandshakeIdleTimeout:           timeout,
			InitialStreamReceiveWindow:     2 << 20,
			MaxStreamReceiveWindow:         8 << 20,
			InitialConnectionReceiveWindow: 16 << 20,
			MaxConnectionReceiveWindow:     64 << 20,
			KeepAlivePeriod:                15 * time.Second,
		},
		// The handshake completes (bounded by timeout) before a request is written: a failure
		// here means nothing was sent.
		Dial: func(ctx context.Context, addr string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
			hctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			var c *quic.Conn
			var err error
			if qt == nil {
				c, err = quic.DialAddr(hctx, addr, tlsCfg, cfg)
			} else {
				c, err = dialThrough(hctx, qt, addr, tlsCfg, cfg)
			}
			if err != nil {
				return nil, &dialError{err}
			}
			return c, nil
		},
	}
	return t, nil
}

// dialThrough dials addr (HOST:PORT) over qt, as quic.DialAddr does over a socket of its own.
func dialThrough(ctx context.Context, qt *quic.Transport, addr string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	return qt.Dial(ctx, ua, tlsCfg, cfg)
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.h3 == nil || req.URL.Scheme != "https" {
		return t.o.Fallback.RoundTrip(req)
	}
	host := req.URL.Host
	if t.o.Mode == Auto && t.isBroken(host) {
		return t.o.Fallback.RoundTrip(req)
	}
	resp, err := t.h3.RoundTrip(req)
	if err == nil {
		return resp, nil
	}
	var de *dialError
	if t.o.Mode != Auto || !errors.As(err, &de) || req.Context().Err() != nil {
		return nil, fmt.Errorf("h3: %w", err)
	}
	t.markBroken(host)
	if req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			// The handshake failed before the body was read, so it is intact.
			return t.o.Fallback.RoundTrip(req)
		}
		body, gerr := req.GetBody()
		if gerr != nil {
			return nil, fmt.Errorf("h3: fallback: %w", gerr)
		}
		req = req.Clone(req.Context())
		req.Body = body
	}
	return t.o.Fallback.RoundTrip(req)
}

// UsesHTTP3 reports whether the next request to host (HOST:PORT) would try HTTP/3.
func (t *Transport) UsesHTTP3(host string) bool {
	return t.h3 != nil && !(t.o.Mode == Auto && t.isBroken(host))
}

func (t *Transport) isBroken(host string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	until, ok := t.broken[host]
	if ok && !t.now().Before(until) {
		delete(t.broken, host)
		return false
	}
	return ok
}

func (t *Transport) markBroken(host string) {
	t.mu.Lock()
	t.broken[host] = t.now().Add(t.o.RetryAfter)
	t.mu.Unlock()
}

// CloseIdleConnections closes the idle connections of both transports.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.o.Fallback.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
	if t.h3 != nil {
		t.h3.CloseIdleConnections()
	}
}

// Close closes every connection of the HTTP/3 transport and the idle ones of the fallback.
func (t *Transport) Close() error {
	t.CloseIdleConnections()
	if t.h3 != nil {
		if err := t.h3.Close(); err != nil {
			return fmt.Errorf("h3: close: %w", err)
		}
	}
	return nil
}

var _ io.Closer = (*Transport)(nil)
