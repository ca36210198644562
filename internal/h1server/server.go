// Package h1server is a lean HTTP/1.1 server for cleartext connections, the server half of
// package h1: a handler gets the *http.Request and http.ResponseWriter it would get from
// net/http, for less work per request. The request head is parsed in place from the
// connection's read buffer into one string; an answer goes out with its head in one write
// (with Content-Length when the handler never flushed, chunked after a flush); a client's
// departure is watched for only once a handler has run for a while, not with a goroutine per
// request; a connection that opens with HTTP/2's preface is handed to an HTTP/2 server.
//
// It accepts less than net/http does, never more: HTTP/1.0 and 1.1 only, CRLF line ends, no
// line folding, no space before a colon, one Host, at most one Content-Length, Transfer-Encoding
// only exactly "chunked" and never beside a Content-Length, no trailers, no CONNECT. What it
// accepts it reads as net/http does (the same method, target, URL, Host, header map and body
// framing); a differential fuzz test holds it to that.
//
// It does not do TLS, HTTP/2 (see Server.HTTP2), Upgrade or Hijack.
package h1server

import (
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Server serves HTTP/1.1 on cleartext connections. Its fields are read when it serves; set
// them before.
type Server struct {
	// Handler answers every request.
	Handler http.Handler
	// ReadHeaderTimeout bounds the reading of a request's head, from its first byte (from the
	// connection's start for its first request); 0 means no bound.
	ReadHeaderTimeout time.Duration
	// IdleTimeout bounds the wait for a keep-alive connection's next request; 0 means no bound.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's line and header fields, as net/http does: it reads up
	// to MaxHeaderBytes plus 4096 bytes of slack. Default http.DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// BaseContext returns the context every request's context derives from; nil means
	// context.Background.
	BaseContext func() context.Context
	// ErrorAnswer returns the whole answer (status line, headers, body) to a request that
	// could not be read, with the status and the reason; nil answers in plain text.
	ErrorAnswer func(status int, reason string) []byte
	// HTTP2 takes a connection that opened with HTTP/2's client preface (h2c with prior
	// knowledge), its reads starting again from the first byte; nil answers it with 505.
	HTTP2 func(net.Conn)
	// ErrorLog receives a handler's panic; nil drops it.
	ErrorLog *log.Logger
	// ConnContext, when set, returns the context of a connection's requests from the base
	// context and the connection, as net/http's Server.ConnContext does.
	ConnContext func(ctx context.Context, c net.Conn) context.Context

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	shutdown  atomic.Bool
	served    sync.WaitGroup // connections being served
}

// ErrServerClosed is what Serve returns after Shutdown or Close: http.ErrServerClosed.
var ErrServerClosed = http.ErrServerClosed

func (s *Server) maxHeadBytes() int {
	n := s.MaxHeaderBytes
	if n <= 0 {
		n = http.DefaultMaxHeaderBytes
	}
	return n + 4096
}

func (s *Server) shuttingDown() bool { return s.shutdown.Load() }

func (s *Server) errorAnswer(status int, reason string) []byte {
	if s.ErrorAnswer != nil {
		return s.ErrorAnswer(status, reason)
	}
	body := reason + "\n"
	return []byte("HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) +
		"\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

// Serve accepts connections on ln and serves each on a goroutine of its own until Shutdown or
// Close, when it returns ErrServerClosed; it closes ln. A temporary accept error (too many open
// files) is retried after a pause that grows to a second.
func (s *Server) Serve(ln net.Listener) error {
	if !s.track(ln) {
		ln.Close()
		return ErrServerClosed
	}
	defer s.untrack(ln)
	base := context.Background()
	if s.BaseContext != nil {
		base = s.BaseContext()
	}
	var pause time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.shuttingDown() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, errTemporary(err)) {
				pause = min(max(2*pause, 5*time.Millisecond), time.Second)
				time.Sleep(pause)
				continue
			}
			return err
		}
		pause = 0
		c := &conn{srv: s, nc: nc}
		if !s.add(c) {
			nc.Close()
			return ErrServerClosed
		}
		go func() {
			defer s.served.Done()
			c.serve(s.connContext(base, nc))
		}()
	}
}

// errTemporary returns err when it is one of the accept errors worth retrying, else nil.
func errTemporary(err error) error {
	type temporary interface{ Temporary() bool }
	var t temporary
	if errors.As(err, &t) && t.Temporary() {
		return err
	}
	return nil
}

// ServeConn serves one connection until it ends and closes it.
func (s *Server) ServeConn(nc net.Conn) {
	base := context.Background()
	if s.BaseContext != nil {
		base = s.BaseContext()
	}
	c := &conn{srv: s, nc: nc}
	if !s.add(c) {
		nc.Close()
		return
	}
	defer s.served.Done()
	c.serve(s.connContext(base, nc))
}

// connContext is the context of nc's requests: it carries the connection's local address
// (http.LocalAddrContextKey), as net/http's do, and what ConnContext adds.
func (s *Server) connContext(base context.Context, nc net.Conn) context.Context {
	ctx := context.WithValue(base, http.LocalAddrContextKey, nc.LocalAddr())
	if s.ConnContext == nil {
		return ctx
	}
	return s.ConnContext(ctx, nc)
}

func (s *Server) track(ln net.Listener) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shuttingDown() {
		return false
	}
	if s.listeners == nil {
		s.listeners = make(map[net.Listener]struct{})
	}
	s.listeners[ln] = struct{}{}
	return true
}

func (s *Server) untrack(ln net.Listener) {
	s.mu.Lock()
	delete(s.listeners, ln)
	s.mu.Unlock()
}

func (s *Server) add(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shuttingDown() {
		return false
	}
	if s.conns == nil {
		s.conns = make(map[*conn]struct{})
	}
	c.born = time.Now()
	s.conns[c] = struct{}{}
	s.served.Add(1)
	return true
}

func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Shutdown stops the server gracefully: it closes the listeners and the idle connections, lets
// the requests being served finish (their connections close after their answers, which say
// Connection: close), and returns when no connection is left, or with ctx's error when ctx
// ends first (the connections still open are left as they are; Close ends them).
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdown.Store(true)
	s.closeListeners()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if s.closeIdle() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// Close closes the listeners and every connection at once.
func (s *Server) Close() error {
	s.shutdown.Store(true)
	s.closeListeners()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.nc.Close()
	}
	s.mu.Unlock()
	return nil
}

func (s *Server) closeListeners() {
	s.mu.Lock()
	for ln := range s.listeners {
		_ = ln.Close()
	}
	s.mu.Unlock()
}

// closeIdle closes the connections waiting for a request and reports whether none is left.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if st := c.state.Load(); st == stateIdle || st == stateNew && time.Since(c.born) > newGrace {
			_ = c.nc.Close()
		}
	}
	return len(s.conns) == 0
}
