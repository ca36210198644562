package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// ListenOptions configure the HTTP listener.
type ListenOptions struct {
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	// MaxHeaderBytes bounds the request headers; default 64 KiB (the HTTP/2
	// SETTINGS_MAX_HEADER_LIST_SIZE of SYSTEM.md §4).
	MaxHeaderBytes int
}

// HTTPServer returns an http.Server for h speaking HTTP/1.1 and HTTP/2 cleartext (prior
// knowledge), with the timeouts of o.
func HTTPServer(h http.Handler, o ListenOptions) *http.Server {
	if o.MaxHeaderBytes == 0 {
		o.MaxHeaderBytes = 64 << 10
	}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetHTTP2(true)
	protos.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    o.MaxHeaderBytes,
		Protocols:         &protos,
		HTTP2: &http.HTTP2Config{
			MaxReceiveBufferPerStream:     1 << 21, // above 1 MiB, as SYSTEM.md §4 asks
			MaxReceiveBufferPerConnection: 1 << 24,
			MaxConcurrentStreams:          1000,
		},
	}
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

// Serve listens on addr and serves until ctx is done, then drains: new connections are refused
// and requests in flight get up to drain to finish. Those still running then are ended with an
// error in their own format (ErrShutdown), so no stream is cut silently and every request is still
// logged; Serve then returns an error wrapping ErrDrainTimeout. ready, when non-nil, is called
// with the bound address once listening.
func Serve(ctx context.Context, srv *http.Server, addr string, drain time.Duration, ready func(net.Addr)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("server: listen: %w", err)
	}
	if srv.TLSConfig != nil {
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
	err = srv.Shutdown(sctx)
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
