package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	// Extended CONNECT on, before net/http and x/net/http2 read GODEBUG.
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/h1server"
	_ "github.com/layer0ai/layer0/internal/h2xconnect"
)

// ListenOptions configure the HTTP listener.
type ListenOptions struct {
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	// MaxHeaderBytes bounds the request headers; default 64 KiB. HTTP/2 connections announce
	// it as SETTINGS_MAX_HEADER_LIST_SIZE exactly (and enforce it in HTTP/2's unit, which counts
	// 32 bytes per field); HTTP/1.1 reads up to a few KiB more, the slack net/http adds.
	MaxHeaderBytes int
	// Logger receives net/http's own error lines (accept errors, TLS handshake failures) as
	// JSON records at WARN; nil discards them.
	Logger *slog.Logger
	// HTTP1 chooses the server of cleartext HTTP/1.1 connections: HTTP1NetHTTP or HTTP1Lean
	// (package h1server). Default HTTP1NetHTTP. TLS, HTTP/2 and h2c are net/http's either way.
	HTTP1 string
}

// The servers of cleartext HTTP/1.1 (ListenOptions.HTTP1, config server.http1).
const (
	HTTP1Lean    = config.HTTP1Lean
	HTTP1NetHTTP = config.HTTP1NetHTTP
)

// Front is the server of one listener: net/http's http.Server for TLS (HTTP/1.1 and HTTP/2 by
// ALPN), h2c and, by default, cleartext HTTP/1.1; or, when chosen, the lean HTTP/1.1 server in
// front of it on cleartext connections, which hands it the connections that open with HTTP/2's
// preface.
// Its Serve, Shutdown and Close cover both.
type Front struct {
	*http.Server
	lean           bool
	maxHeaderBytes int

	mu sync.Mutex
	h1 *h1server.Server // while serving cleartext connections with the lean server
	h2 *handoff
	// stopped is set by Shutdown and Close: a later Serve returns at once, as net/http's does.
	stopped bool
}

// HTTPServer returns the server of a listener for h speaking HTTP/1.1 and HTTP/2 cleartext
// (prior knowledge), with the timeouts of o.
func HTTPServer(h http.Handler, o ListenOptions) *Front {
	if o.MaxHeaderBytes == 0 {
		o.MaxHeaderBytes = config.DefaultMaxHeaderBytes
	}
	f := &Front{Server: netHTTPServer(activating(h), o), lean: o.HTTP1 == HTTP1Lean, maxHeaderBytes: o.MaxHeaderBytes}
	return f
}

// activating marks each request's connection as one that sent a request (Activate) before h
// serves it.
func activating(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		Activate(r.Context())
		h.ServeHTTP(w, r)
	})
}

// netHTTPServer is net/http's server of a listener.
func netHTTPServer(h http.Handler, o ListenOptions) *http.Server {
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetHTTP2(true)
	protos.SetUnencryptedHTTP2(true)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &http.Server{
		Handler: h,
		// Every line of the process log is JSON, net/http's own too.
		ErrorLog: slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
		// A keep-alive connection goes back to waiting for a request without the write
		// deadline its last answer armed (the handler bounds each of its writes; the next
		// request's interim and error answers must not inherit a deadline long past).
		ConnState: func(c net.Conn, st http.ConnState) {
			if st == http.StateIdle {
				_ = c.SetWriteDeadline(time.Time{})
			}
		},
		ConnContext:       ConnContext,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    serverMaxHeaderBytes(o.MaxHeaderBytes),
		Protocols:         &protos,
		HTTP2: &http.HTTP2Config{
			MaxReceiveBufferPerStream:     1 << 21, // above 1 MiB, as the protocol promises
			MaxReceiveBufferPerConnection: 1 << 24,
			MaxConcurrentStreams:          1000,
			// The protocol's default frame size, announced explicitly: Go would announce 1 MiB,
			// which buys nothing for request bodies this size and lets one frame hold a
			// connection's reader for that long.
			MaxReadFrameSize: 16 << 10,
		},
	}
}

// Serve serves the connections of ln until Shutdown or Close, and returns
// http.ErrServerClosed then.
func (f *Front) Serve(ln net.Listener) error {
	if !f.lean || f.TLSConfig != nil {
		return f.Server.Serve(ln)
	}
	srv := f.Server
	h2 := &handoff{addr: ln.Addr(), conns: make(chan net.Conn), done: make(chan struct{})}
	h1 := &h1server.Server{
		Handler:           srv.Handler, // read now: ListenHTTP3 wraps it
		ReadHeaderTimeout: srv.ReadHeaderTimeout,
		IdleTimeout:       srv.IdleTimeout,
		MaxHeaderBytes:    f.maxHeaderBytes,
		ErrorAnswer:       errorAnswer,
		HTTP2:             h2.give,
		ErrorLog:          srv.ErrorLog,
		ConnContext:       ConnContext,
	}
	if srv.BaseContext != nil {
		h1.BaseContext = func() context.Context { return srv.BaseContext(ln) }
	}
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		_ = ln.Close()
		return http.ErrServerClosed
	}
	f.h1, f.h2 = h1, h2
	f.mu.Unlock()
	go srv.Serve(h2) //nolint:errcheck // ends with Shutdown or Close, as h1 does
	return h1.Serve(ln)
}

// Shutdown stops both servers gracefully (see http.Server.Shutdown).
func (f *Front) Shutdown(ctx context.Context) error {
	f.mu.Lock()
	f.stopped = true
	h1 := f.h1
	f.mu.Unlock()
	if h1 == nil {
		return f.Server.Shutdown(ctx)
	}
	errc := make(chan error, 1)
	go func() { errc <- h1.Shutdown(ctx) }()
	err := f.Server.Shutdown(ctx)
	return errors.Join(err, <-errc)
}

// Close closes both servers' listeners and connections at once.
func (f *Front) Close() error {
	f.mu.Lock()
	f.stopped = true
	h1 := f.h1
	f.mu.Unlock()
	if h1 != nil {
		_ = h1.Close()
	}
	return f.Server.Close()
}

// errorAnswer is the lean server's answer to a request it could not read: the JSON error of
// the Anthropic format, as net/http's plain-text ones are rewritten (answerConn).
func errorAnswer(status int, reason string) []byte {
	return jsonAnswer([]byte(strconv.Itoa(status)+" "+statusText(status)), []byte(reason))
}

func statusText(code int) string {
	if t := http.StatusText(code); t != "" {
		return t
	}
	return "status code " + strconv.Itoa(code)
}

// handoff is the listener net/http's server accepts h2c connections from: the lean server
// gives it each connection that opened with HTTP/2's preface.
type handoff struct {
	addr  net.Addr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (h *handoff) give(c net.Conn) {
	select {
	case h.conns <- c:
	case <-h.done:
		_ = c.Close()
	}
}

func (h *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.conns:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

func (h *handoff) Close() error {
	h.once.Do(func() { close(h.done) })
	return nil
}

func (h *handoff) Addr() net.Addr { return h.addr }

// h2HeaderPad is what Go's HTTP/2 servers add to http.Server.MaxHeaderBytes before announcing it
// as SETTINGS_MAX_HEADER_LIST_SIZE (32 bytes of per-field overhead for ten fields).
const h2HeaderPad = 10 * 32

// serverMaxHeaderBytes is the http.Server.MaxHeaderBytes that makes the HTTP/2 servers announce
// exactly n as SETTINGS_MAX_HEADER_LIST_SIZE.
func serverMaxHeaderBytes(n int) int {
	if n > 2*h2HeaderPad {
		return n - h2HeaderPad
	}
	return n
}

// ErrShutdown is the cause of the request contexts that were still running when the drain time
// ran out: their handlers end them with an error the client can see (an error event inside a
// stream), never a silent cut.
var ErrShutdown = errors.New("server: shutting down")

// ErrDrainTimeout is returned by Serve when requests were still running after the drain time and
// had to be ended.
var ErrDrainTimeout = errors.New("server: drain time ran out")

// finishGrace is how long requests ended by ErrShutdown get to write their error and finish.
const finishGrace = 5 * time.Second

// Listen listens on addr (TCP) with the connection cap of lim.
func Listen(addr string, lim ConnLimit) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("server: listen: %w", err)
	}
	lim.TLS = false
	if fit := fdBudget(); lim.FitFDs && fit > 0 && lim.Max > fit {
		if lim.Logger != nil {
			lim.Logger.Warn("server.max_connections lowered to fit the file descriptor limit", "configured", lim.Max, "effective", fit)
		}
		lim.Max, lim.MaxNew = fit, min(lim.MaxNew, fit)
	}
	return LimitListener(ln, lim), nil
}

// Serve serves on ln until ctx is done, then drains: new connections are refused
// and requests in flight get up to drain to finish. Those still running then are ended with an
// error in their own format (ErrShutdown), so no stream is cut silently and every request is still
// logged; Serve then returns an error wrapping ErrDrainTimeout. ready, when non-nil, is called
// with the bound address once listening.
func Serve(ctx context.Context, srv *Front, ln net.Listener, drain time.Duration, ready func(net.Addr)) error {
	if srv.TLSConfig != nil {
		if l, ok := ln.(*limitListener); ok {
			l.lim.TLS = true // a refused connection is closed, not answered in cleartext
		}
		ln = tls.NewListener(ln, srv.TLSConfig)
	}
	base, stop := context.WithCancelCause(context.Background())
	defer stop(nil)
	srv.BaseContext = func(net.Listener) context.Context { return base }
	if ready != nil {
		ready(ln.Addr())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), drain)
	err := srv.Shutdown(sctx)
	cancel()
	if err != nil {
		// Requests still running: end them with an error they can report, then let their
		// handlers finish (write the error, log the record) before closing what is left.
		stop(ErrShutdown)
		gctx, gcancel := context.WithTimeout(context.Background(), finishGrace)
		if err := srv.Shutdown(gctx); err != nil {
			srv.Close() //nolint:errcheck // last resort
		}
		gcancel()
		<-errc
		return fmt.Errorf("%w: requests still running after %s were ended", ErrDrainTimeout, drain)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("server: %w", err)
	}
	return nil
}
