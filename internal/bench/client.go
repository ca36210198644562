package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/layer0ai/layer0/internal/h1"
	"github.com/layer0ai/layer0/internal/h3"
	"github.com/quic-go/quic-go"
)

// client sends the run's one request and streams the response to a worker: head once, then body
// (200) or errorBody (any other status) with each piece as it arrives. A client belongs to one
// worker and is never used concurrently.
type client interface {
	do(ctx context.Context, w *worker) error
	close()
}

// clientFactory returns how to make each worker's client, and how to release what they share.
// Every socket the clients open is counted by wc.
func clientFactory(cfg Config, body []byte, hdr http.Header, wc *wireCounter) (func(int) client, func(), error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	dial := wc.dialer((&net.Dialer{Timeout: cfg.Timeout}).DialContext)
	if u.Scheme == "http" && !cfg.HTTP2 && !cfg.NetHTTP {
		req, err := rawRequest(u, body, hdr)
		if err != nil {
			return nil, nil, err
		}
		addr := hostPort(u)
		return func(int) client {
			return &rawClient{addr: addr, req: req, timeout: cfg.Timeout, dialFn: dial}
		}, func() {}, nil
	}
	if cfg.HTTP3 {
		return h3ClientFactory(cfg, u, body, hdr, wc)
	}

	n := 1
	if cfg.HTTP2 {
		n = cfg.H2Conns
	}
	transports := make([]*http.Transport, n)
	for i := range transports {
		t := &http.Transport{
			Proxy:               nil, // a benchmark never goes through an environment proxy
			DialContext:         dial,
			MaxIdleConnsPerHost: max(cfg.MaxInFlight, cfg.Connections),
			DisableCompression:  true,
			TLSClientConfig:     &tls.Config{InsecureSkipVerify: cfg.Insecure}, //nolint:gosec // --insecure asks for it
			Protocols:           new(http.Protocols),
			ForceAttemptHTTP2:   cfg.HTTP2,
		}
		switch {
		case cfg.HTTP2 && u.Scheme == "http":
			t.Protocols.SetUnencryptedHTTP2(true) // h2c with prior knowledge
		case cfg.HTTP2:
			t.Protocols.SetHTTP2(true)
		default:
			t.Protocols.SetHTTP1(true)
		}
		transports[i] = t
	}
	return stdClients(cfg, u, body, hdr, func(i int) http.RoundTripper { return transports[i%len(transports)] }), func() {
		for _, t := range transports {
			t.CloseIdleConnections()
		}
	}, nil
}

// h3ClientFactory makes HTTP/3 clients: internal/h3's transport in On mode (the Go client's
// own), H2Conns of them, each holding one QUIC connection, all dialed from one UDP socket whose
// datagrams wc counts.
func h3ClientFactory(cfg Config, u *url.URL, body []byte, hdr http.Header, wc *wireCounter) (func(int) client, func(), error) {
	// The socket's family is the server's: a socket bound to IPv4 cannot reach ::1.
	ra, err := net.ResolveUDPAddr("udp", hostPort(u))
	if err != nil {
		return nil, nil, fmt.Errorf("bench: http3: %w", err)
	}
	network := "udp4"
	if ra.IP.To4() == nil {
		network = "udp6"
	}
	uc, err := net.ListenUDP(network, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: http3: %w", err)
	}
	qt := &quic.Transport{Conn: newCountingUDPConn(uc, wc)}
	closeAll := func(ts []*h3.Transport) {
		for _, t := range ts {
			_ = t.Close()
		}
		_ = qt.Close()
		_ = uc.Close()
	}
	tc := &tls.Config{InsecureSkipVerify: cfg.Insecure} //nolint:gosec // --insecure asks for it
	transports := make([]*h3.Transport, cfg.H2Conns)
	for i := range transports {
		// The fallback is never used in On mode; it is required, and refuses.
		t, err := h3.NewTransport(h3.Options{Mode: h3.On, TLSConfig: tc, Fallback: noFallback{},
			HandshakeTimeout: cfg.Timeout, QUICTransport: qt})
		if err != nil {
			closeAll(transports[:i])
			return nil, nil, fmt.Errorf("bench: %w", err)
		}
		transports[i] = t
	}
	return stdClients(cfg, u, body, hdr, func(i int) http.RoundTripper { return transports[i%len(transports)] }),
		func() { closeAll(transports) }, nil
}

// stdClients makes worker i's client over the transport rt(i): net/http's client API, for the
// HTTP/2 and HTTP/3 transports alike.
func stdClients(cfg Config, u *url.URL, body []byte, hdr http.Header, rt func(i int) http.RoundTripper) func(int) client {
	u2 := u.String()
	return func(i int) client {
		return &stdClient{hc: &http.Client{Transport: rt(i)}, url: u2, body: body, hdr: hdr, timeout: cfg.Timeout}
	}
}

// noFallback is the fallback of an HTTP/3-only transport, which only http URLs would reach.
type noFallback struct{}

func (noFallback) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("bench: HTTP/3 needs an https URL")
}

func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return net.JoinHostPort(u.Hostname(), "443")
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// stdClient is net/http's client: HTTP/2 (TLS or h2c), HTTPS, or HTTP/1.1 on request.
type stdClient struct {
	hc      *http.Client
	url     string
	body    []byte
	hdr     http.Header // shared by all workers, read only
	timeout time.Duration
	buf     []byte
}

func (c *stdClient) do(ctx context.Context, w *worker) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(c.body))
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	req.Header = c.hdr
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	w.head(resp.StatusCode)
	if c.buf == nil {
		c.buf = make([]byte, 16<<10)
	}
	for {
		n, err := resp.Body.Read(c.buf)
		if n > 0 {
			if resp.StatusCode == http.StatusOK {
				w.body(c.buf[:n])
			} else {
				w.errorBody(c.buf[:n])
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (c *stdClient) close() {}

// rawRequest is the complete HTTP/1.1 request, head and body, that rawClient writes each time.
func rawRequest(u *url.URL, body []byte, hdr http.Header) ([]byte, error) {
	lines, err := h1.AppendHeader([]byte("User-Agent: layer0-bench\r\n"), hdr)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	req := h1.AppendRequest(nil, http.MethodPost, u.RequestURI(), u.Host, len(body), lines)
	return append(req, body...), nil
}

// rawClient is internal/h1's HTTP/1.1 client on one keep-alive connection: it writes a prebuilt
// request in one write and hands body pieces to the worker straight from its read buffer. It
// allocates nothing per request; net/http's client costs several times more CPU per request,
// which on a machine shared with the server under test is CPU taken from the server.
type rawClient struct {
	addr    string
	req     []byte
	timeout time.Duration
	dialFn  func(ctx context.Context, network, addr string) (net.Conn, error)

	conn   *h1.Conn
	reused bool        // conn has served a request before
	stop   func() bool // detaches the cancel hook of conn
}

func (c *rawClient) do(ctx context.Context, w *worker) error {
	for attempt := 0; ; attempt++ {
		if c.conn == nil {
			if err := c.dial(ctx); err != nil {
				return err
			}
		}
		reused := c.reused
		err := c.exchange(w)
		if err == nil {
			c.reused = true
			return nil
		}
		c.close()
		// A kept-alive connection the server closed while idle fails before any response byte;
		// send again once on a new connection, as net/http does.
		if reused && !w.gotHead && attempt == 0 && ctx.Err() == nil &&
			(errors.Is(err, h1.ErrNoResponse) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isConnReset(err)) {
			continue
		}
		return err
	}
}

func isConnReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

func (c *rawClient) dial(ctx context.Context) error {
	conn, err := c.dialFn(ctx, "tcp", c.addr)
	if err != nil {
		return err
	}
	c.conn, c.reused = h1.NewConn(conn, 8<<10), false
	// Interrupting the run must interrupt a blocked read: push the deadline into the past.
	c.stop = context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	return nil
}

func (c *rawClient) close() {
	if c.conn == nil {
		return
	}
	c.stop()
	_ = c.conn.Close()
	c.conn = nil
}

// exchange writes the request and reads one response on the open connection.
func (c *rawClient) exchange(w *worker) error {
	if err := c.conn.NetConn().SetDeadline(time.Now().Add(c.timeout)); err != nil {
		return err
	}
	if err := c.conn.WriteRequest(c.req); err != nil {
		return err
	}
	head, err := c.conn.ReadHead()
	if err != nil {
		return err
	}
	w.head(head.Status)
	emit := w.body
	if head.Status != http.StatusOK {
		emit = w.errorBody
	}
	for {
		b, err := c.conn.Next()
		if len(b) > 0 {
			emit(b)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if !c.conn.Reusable() {
		c.close()
	}
	return nil
}
