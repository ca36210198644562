package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// RunOptions say what Run serves, and how.
type RunOptions struct {
	// Handler serves the APIs on the API listener; Admin, when set, the operator's endpoints
	// on the admin listener.
	Handler, Admin http.Handler
	// Listen configures both listeners' servers (the admin one ignores MaxHeaderBytes).
	Listen ListenOptions
	// CertFile and KeyFile, when set, make the API listener serve TLS (EnableTLS).
	CertFile, KeyFile string
	// HTTP3 adds HTTP/3 on the API listener's port (ListenHTTP3); it needs TLS.
	HTTP3 bool
	// Drain is how long requests in flight get to finish once the context is done.
	Drain time.Duration
	// Ready, when set, is called once every listener serves, with their addresses.
	Ready func(Serving)
}

// Serving says where Run serves.
type Serving struct {
	// Addr is the API listener's address; Scheme is "https" with TLS, else "http".
	Addr   net.Addr
	Scheme string
	// HTTP3 is the UDP address of HTTP/3 and AltSvc the header that advertises it; nil and ""
	// without HTTP/3.
	HTTP3  net.Addr
	AltSvc string
	// Admin is the admin listener's address; nil without one.
	Admin net.Addr
}

// Run serves o.Handler on ln — over TLS with HTTP/3 beside it, or cleartext, as o says — and
// o.Admin on admin when both are set, until ctx is done or the API listener fails; then each
// drains as Serve does within o.Drain. A drain that had to end requests is an orderly stop: it
// is logged as a warning and Run returns nil. ln and admin are closed when Run returns, even
// when it fails before serving.
func Run(ctx context.Context, ln, admin net.Listener, o RunOptions) error {
	logger := o.Listen.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	closeAll := func() {
		ln.Close() //nolint:errcheck // not served: nothing else to report
		if admin != nil {
			admin.Close() //nolint:errcheck // as ln
		}
	}
	srv := HTTPServer(o.Handler, o.Listen)
	sv := Serving{Addr: ln.Addr(), Scheme: "http"}
	if o.CertFile != "" {
		if err := EnableTLS(srv, o.CertFile, o.KeyFile, logger); err != nil {
			closeAll()
			return err
		}
		sv.Scheme = "https"
	}
	var h3 *HTTP3
	if o.HTTP3 {
		var err error
		if h3, err = ListenHTTP3(srv, ln); err != nil {
			closeAll()
			return err
		}
		sv.HTTP3, sv.AltSvc = h3.Addr(), h3.AltSvc()
	}
	// The others stop with the API listener, whether ctx ended or it failed.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	side := func(name string, serve func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			logStop(logger, name+" stopped", serve())
		}()
	}
	if admin != nil && o.Admin != nil {
		sv.Admin = admin.Addr()
		lo := o.Listen
		lo.MaxHeaderBytes = 0
		asrv := HTTPServer(o.Admin, lo)
		side("admin listener", func() error { return Serve(ctx, asrv, admin, o.Drain, nil) })
	} else if admin != nil {
		admin.Close() //nolint:errcheck // nothing to serve on it
	}
	if h3 != nil {
		side("HTTP/3", func() error { return h3.Serve(ctx, o.Drain) })
	}
	err := Serve(ctx, srv, ln, o.Drain, func(net.Addr) {
		if o.Ready != nil {
			o.Ready(sv)
		}
	})
	stop()
	wg.Wait()
	if errors.Is(err, ErrDrainTimeout) {
		logStop(logger, "stopped", err)
		return nil
	}
	return err
}

// logStop logs how a listener stopped: a drain that ended requests as a warning, a failure as
// an error, an orderly stop not at all.
func logStop(logger *slog.Logger, msg string, err error) {
	if errors.Is(err, ErrDrainTimeout) {
		logger.Warn(msg, "err", err)
	} else if err != nil {
		logger.Error(msg, "err", err)
	}
}
