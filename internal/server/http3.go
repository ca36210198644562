package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/layer0ai/layer0/internal/config"
)

// HTTP3 is an HTTP/3 listener (QUIC over UDP) on the same port as a TLS server's TCP listener,
// serving the same handler with the same certificate. Make it with ListenHTTP3 and run it with
// Serve beside the TCP server's Serve.
type HTTP3 struct {
	s      *http3.Server
	pc     net.PacketConn
	tr     *quic.Transport
	ln     *capListener
	altSvc string
	base   context.Context // the requests' base: ended with ErrShutdown when the drain runs out
	stop   context.CancelCauseFunc
}

// QUIC parameters, matching the HTTP/2 server's where the two have a counterpart.
const (
	h3StreamWindow     = 2 << 20  // a stream's initial receive window, as HTTP/2's 2 MiB
	h3MaxStreamWindow  = 8 << 20  // what the window may grow to
	h3ConnWindow       = 16 << 20 // a connection's, as HTTP/2's 16 MiB
	h3MaxStreams       = 1000     // concurrent request streams per connection
	h3HandshakeTimeout = 10 * time.Second
	// altSvcMaxAge is how long (seconds) a client may remember the Alt-Svc advertisement.
	altSvcMaxAge = 86400
)

// ListenHTTP3 opens UDP on the port of ln (a TCP listener from Listen or Gateway.Listen) for srv,
// whose TLS must be enabled (EnableTLS), and makes srv's answers over TCP advertise it with
// Alt-Svc. QUIC connections count against ln's connection cap once their handshake is complete,
// and one over the cap is closed at once. Handshakes in progress have a bound of their own
// (ConnLimit.MaxQUICHandshakes; a client over it is refused with CONNECTION_REFUSED) and never
// take TCP's capacity; past half of it, a new client must first prove it receives packets at its
// address (a Retry), so spoofed sources cannot hold handshakes. 0-RTT is refused: data sent in 0-RTT can be replayed by anyone on the path, and every
// layer0 request is a POST that starts a generation and spends rate limits, so a replay would
// run it (and bill it) twice; clients pay one round trip per new connection instead.
func ListenHTTP3(srv *Front, ln net.Listener) (*HTTP3, error) {
	if srv.TLSConfig == nil {
		return nil, errors.New("server: http3: needs TLS (server.tls)")
	}
	ta, ok := ln.Addr().(*net.TCPAddr)
	if !ok {
		return nil, fmt.Errorf("server: http3: listener address %v is not TCP", ln.Addr())
	}
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: ta.IP, Port: ta.Port, Zone: ta.Zone})
	if err != nil {
		return nil, fmt.Errorf("server: http3: listen: %w", err)
	}
	qconf := &quic.Config{
		Allow0RTT:                      false,
		HandshakeIdleTimeout:           h3HandshakeTimeout,
		MaxIdleTimeout:                 srv.IdleTimeout,
		InitialStreamReceiveWindow:     h3StreamWindow,
		MaxStreamReceiveWindow:         h3MaxStreamWindow,
		InitialConnectionReceiveWindow: h3ConnWindow,
		MaxConnectionReceiveWindow:     4 * h3ConnWindow,
		MaxIncomingStreams:             h3MaxStreams,
		MaxIncomingUniStreams:          16,
	}
	lim, _ := ln.(*limitListener)
	hs := &handshakes{max: int64(config.DefaultMaxQUICHandshakes), lim: lim}
	if lim != nil && lim.lim.MaxQUICHandshakes > 0 {
		hs.max = int64(lim.lim.MaxQUICHandshakes)
	}
	tr := &quic.Transport{Conn: pc, ConnContext: hs.enter, VerifySourceAddress: hs.busy}
	// A listener that hands out connections once their handshake is complete: one still in its
	// handshake is counted by hs alone, never against the TCP listener's cap.
	qln, err := tr.Listen(http3.ConfigureTLSConfig(srv.TLSConfig), qconf)
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("server: http3: %w", err)
	}
	h := &HTTP3{pc: pc, tr: tr, altSvc: `h3=":` + strconv.Itoa(ta.Port) + `"; ma=` + strconv.Itoa(altSvcMaxAge)}
	h.base, h.stop = context.WithCancelCause(context.Background())
	h.ln = &capListener{Listener: qln, lim: lim}
	handler := srv.Handler
	h.s = &http3.Server{
		Handler:        handler,
		TLSConfig:      srv.TLSConfig,
		QUICConfig:     qconf,
		MaxHeaderBytes: srv.MaxHeaderBytes,
		IdleTimeout:    srv.IdleTimeout,
		// Requests still running when the drain time runs out are ended with ErrShutdown, as
		// Serve ends the TCP ones.
		ConnContext: func(ctx context.Context, c *quic.Conn) context.Context {
			cctx, cancel := context.WithCancelCause(ctx)
			stop := context.AfterFunc(h.base, func() { cancel(context.Cause(h.base)) })
			context.AfterFunc(c.Context(), func() { stop(); cancel(nil) })
			return cctx
		},
	}
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Alt-Svc"] = []string{h.altSvc}
		handler.ServeHTTP(w, r)
	})
	return h, nil
}

// Addr is the UDP address HTTP/3 is served on.
func (h *HTTP3) Addr() net.Addr { return h.pc.LocalAddr() }

// AltSvc is the Alt-Svc header value the TCP answers carry.
func (h *HTTP3) AltSvc() string { return h.altSvc }

// Serve serves HTTP/3 until ctx is done, then drains as Serve does: it stops taking connections
// and tells clients so (GOAWAY), gives the requests in flight up to drain to finish, ends those
// still running with ErrShutdown (their handlers report it in the stream), and closes what is
// left after a short grace; it then returns an error wrapping ErrDrainTimeout. Run it beside
// Serve with the same ctx and drain.
func (h *HTTP3) Serve(ctx context.Context, drain time.Duration) error {
	defer h.pc.Close()
	defer h.tr.Close() //nolint:errcheck // the listener's connections are closed by now
	defer h.stop(nil)
	errc := make(chan error, 1)
	go func() { errc <- h.s.ServeListener(h.ln) }()
	select {
	case err := <-errc:
		h.s.Close() //nolint:errcheck // already failed
		return fmt.Errorf("server: http3: %w", err)
	case <-ctx.Done():
	}
	end := time.AfterFunc(drain, func() { h.stop(ErrShutdown) })
	sctx, cancel := context.WithTimeout(context.Background(), drain+finishGrace)
	err := h.s.Shutdown(sctx) // closes every connection when sctx ends
	cancel()
	ended := !end.Stop()
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return fmt.Errorf("server: http3: %w", serr)
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("server: http3: shutdown: %w", err)
	}
	if ended {
		return fmt.Errorf("%w: HTTP/3 requests still running after %s were ended", ErrDrainTimeout, drain)
	}
	return nil
}

// handshakes bounds the QUIC handshakes in progress.
type handshakes struct {
	max int64
	n   atomic.Int64
	lim *limitListener // counts and logs refusals; nil when the TCP listener is not capped
}

// handshakeKey is the connection context key of a handshake's release function.
type handshakeKey struct{}

// enter is the transport's ConnContext: it counts a new connection's handshake in, or refuses
// it over the bound. The count is released when the handshake completes (the listener hands the
// connection out) or the connection ends, whichever comes first.
func (h *handshakes) enter(ctx context.Context, _ *quic.ClientInfo) (context.Context, error) {
	if h.n.Add(1) > h.max {
		h.n.Add(-1)
		if h.lim != nil {
			h.lim.count("QUIC connection refused: server.max_quic_handshakes handshakes are in progress")
		}
		return nil, errTooManyHandshakes
	}
	var once sync.Once
	release := func() { once.Do(func() { h.n.Add(-1) }) }
	ctx = context.WithValue(ctx, handshakeKey{}, release)
	context.AfterFunc(ctx, release)
	return ctx, nil
}

// busy is the transport's VerifySourceAddress: past half the bound, a client must answer a
// Retry from its address before it gets a handshake.
func (h *handshakes) busy(net.Addr) bool { return h.n.Load() >= h.max/2 }

// handshakeDone releases the handshake count of c, whose handshake is complete.
func handshakeDone(c *quic.Conn) {
	if release, ok := c.Context().Value(handshakeKey{}).(func()); ok {
		release()
	}
}

var errTooManyHandshakes = errors.New("server: http3: too many QUIC handshakes in progress")

// capListener counts QUIC connections whose handshake is complete against the TCP listener's
// connection cap.
type capListener struct {
	*quic.Listener
	lim *limitListener
}

// h3ExcessiveLoad is HTTP/3's H3_EXCESSIVE_LOAD error code, sent to a connection over the cap.
const h3ExcessiveLoad = 0x0107

func (l *capListener) Accept(ctx context.Context) (*quic.Conn, error) {
	for {
		c, err := l.Listener.Accept(ctx)
		if err != nil {
			return c, err
		}
		handshakeDone(c)
		if l.lim == nil {
			return c, nil
		}
		if max := l.lim.lim.Max; max > 0 && l.lim.open.Load() >= int64(max) {
			l.lim.count("connection refused: the listener is at max_connections")
			_ = c.CloseWithError(h3ExcessiveLoad, "too many open connections; retry shortly")
			continue
		}
		l.lim.open.Add(1)
		context.AfterFunc(c.Context(), func() { l.lim.open.Add(-1) })
		return c, nil
	}
}
