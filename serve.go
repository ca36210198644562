package layer0

import (
	"context"
	"net"

	"github.com/layer0ai/layer0/internal/server"
)

// Serving says where Serve serves: the API listener's address and scheme, HTTP/3's UDP address
// and Alt-Svc header (nil and "" without HTTP/3), and the admin listener's address (or nil).
type Serving = server.Serving

// ListenAndServe serves the gateway as `layer0 serve` does: it listens on server.addr and, when
// set, server.admin_addr (with Listen), and serves as Serve does until ctx is done.
func (g *Gateway) ListenAndServe(ctx context.Context, ready func(Serving)) error {
	s := g.Config().Server
	ln, err := g.Listen(s.Addr)
	if err != nil {
		return err
	}
	var admin net.Listener
	if s.AdminAddr != "" {
		if admin, err = g.Listen(s.AdminAddr); err != nil {
			ln.Close()
			return err
		}
	}
	return g.Serve(ctx, ln, admin, ready)
}

// Serve serves the APIs on ln until ctx is done: over TLS when server.tls names a certificate
// (HTTP/2 or HTTP/1.1 by ALPN; renewed files are re-read), with HTTP/3 on ln's UDP port when
// server.http3 is set (advertised by Alt-Svc, so clients fall back to TCP without it); else
// cleartext HTTP/1.1 (served as server.http1 says) and h2c. AdminHandler is served on admin
// when it is not nil. ready, when not nil, is called once everything listens. When ctx is done
// each listener drains: requests in flight get server.shutdown_timeout to finish, and those
// still running then end with an error in their own format (logged as a warning; Serve still
// returns nil). ln and admin, best made with Listen, are closed when Serve returns. Close the
// gateway after Serve returns.
func (g *Gateway) Serve(ctx context.Context, ln, admin net.Listener, ready func(Serving)) error {
	return g.g.Serve(ctx, ln, admin, ready)
}
