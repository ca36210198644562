package server

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/layer0ai/layer0/internal/testcert"
)

// startH3 serves a handler that answers with the request's protocol over TLS and HTTP/3 with the
// connection cap max, and returns the address and the client TLS config.
func startH3(t *testing.T, max int) (string, *tls.Config) {
	t.Helper()
	return startH3Limit(t, ConnLimit{Max: max})
}

// startH3Limit is startH3 with the listener limits lim.
func startH3Limit(t *testing.T, lim ConnLimit) (string, *tls.Config) {
	t.Helper()
	certFile, keyFile, roots := testcert.Write(t, t.TempDir())
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Proto) //nolint:errcheck
	})
	srv := HTTPServer(h, ListenOptions{ReadHeaderTimeout: 5 * time.Second})
	if err := EnableTLS(srv, certFile, keyFile, nil); err != nil {
		t.Fatal(err)
	}
	ln, err := Listen("127.0.0.1:0", lim)
	if err != nil {
		t.Fatal(err)
	}
	h3, err := ListenHTTP3(srv, ln)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := h3.Addr().String(), ln.Addr().String(); got != want {
		t.Fatalf("HTTP/3 on %s, want the TCP port's address %s", got, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- Serve(ctx, srv, ln, time.Second, nil) }()
	go func() { done <- h3.Serve(ctx, time.Second) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		}
	})
	return ln.Addr().String(), &tls.Config{RootCAs: roots}
}

func TestHTTP3AltSvcAndServe(t *testing.T) {
	addr, tc := startH3(t, 100)
	_, port, _ := net.SplitHostPort(addr)
	h2 := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}
	defer h2.CloseIdleConnections()
	resp, err := h2.Get("https://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Errorf("TLS answer over HTTP/%d, want 2", resp.ProtoMajor)
	}
	if got, want := resp.Header.Get("Alt-Svc"), `h3=":`+port+`"; ma=86400`; got != want {
		t.Errorf("Alt-Svc: got %q, want %q", got, want)
	}
	tr := &http3.Transport{TLSClientConfig: tc}
	defer tr.Close()
	resp, err = (&http.Client{Transport: tr}).Get("https://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "HTTP/3.0" {
		t.Errorf("over QUIC the handler saw %q, want HTTP/3.0", body)
	}
	if resp.Header.Get("Alt-Svc") != "" {
		t.Errorf("an HTTP/3 answer advertises Alt-Svc %q", resp.Header.Get("Alt-Svc"))
	}
}

// QUIC connections count against the listener's connection cap, with the TCP ones.
func TestHTTP3ConnectionCap(t *testing.T) {
	addr, tc := startH3(t, 1)
	dial := func() (*quic.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c := tc.Clone()
		c.NextProtos = []string{http3.NextProtoH3}
		return quic.DialAddr(ctx, addr, c, nil)
	}
	first, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	defer first.CloseWithError(0, "") //nolint:errcheck
	second, err := dial()
	if err == nil {
		defer second.CloseWithError(0, "") //nolint:errcheck
		// The handshake may finish before the server's close arrives; the close then follows.
		// On a loaded machine the server may finish the second handshake before the first:
		// the one it counts second is the one refused, and the other stays open.
		select {
		case <-second.Context().Done():
			err = context.Cause(second.Context())
		case <-first.Context().Done():
			err = context.Cause(first.Context())
			first, second = second, first
		case <-time.After(10 * time.Second):
			t.Fatal("a second QUIC connection over a cap of 1 stayed open")
		}
		select {
		case <-first.Context().Done():
			t.Fatalf("both connections were closed; the one within the cap: %v", context.Cause(first.Context()))
		case <-time.After(100 * time.Millisecond):
		}
	}
	// Closed by the server with H3_EXCESSIVE_LOAD; before the handshake is confirmed QUIC hides
	// the application's code behind the transport code APPLICATION_ERROR (RFC 9000 §10.2.3).
	var ae *quic.ApplicationError
	var te *quic.TransportError
	switch {
	case errors.As(err, &ae) && ae.Remote && ae.ErrorCode == h3ExcessiveLoad:
	case errors.As(err, &te) && te.Remote && te.ErrorCode == quic.ApplicationErrorErrorCode:
	default:
		t.Errorf("second connection: got %v, want a close by the server with H3_EXCESSIVE_LOAD", err)
	}
	// Closing the first frees its place.
	first.CloseWithError(0, "") //nolint:errcheck
	// Generous: a handshake on a loaded machine.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := dial()
		if err == nil {
			select {
			case <-c.Context().Done():
			case <-time.After(200 * time.Millisecond):
				c.CloseWithError(0, "") //nolint:errcheck
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no QUIC connection accepted after the first closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestListenHTTP3NeedsTLS(t *testing.T) {
	ln, err := Listen("127.0.0.1:0", ConnLimit{})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := ListenHTTP3(HTTPServer(http.NotFoundHandler(), ListenOptions{}), ln); err == nil {
		t.Error("ListenHTTP3 without TLS: got nil error")
	}
}

// blackholeConn is the UDP socket of a QUIC client whose handshake never finishes (a spoofed
// source address, or a peer gone): it sends its first flight, then nothing, and never receives.
type blackholeConn struct {
	net.PacketConn
	start  time.Time
	closed chan struct{}
	once   sync.Once
}

func (b *blackholeConn) WriteTo(p []byte, a net.Addr) (int, error) {
	if time.Since(b.start) < 50*time.Millisecond {
		return b.PacketConn.WriteTo(p, a)
	}
	return len(p), nil
}

func (b *blackholeConn) ReadFrom([]byte) (int, net.Addr, error) {
	<-b.closed
	return 0, nil, net.ErrClosed
}

func (b *blackholeConn) Close() error {
	b.once.Do(func() { close(b.closed) })
	return b.PacketConn.Close()
}

// Half-open QUIC handshakes never lock TCP clients out, nor HTTP/3 ones: they have their own
// bound, past half of which new clients must answer a Retry from their address (which a
// half-open or spoofed peer never does), and they never count against max_connections.
func TestHalfOpenQUICHandshakesBounded(t *testing.T) {
	addr, tc := startH3Limit(t, ConnLimit{Max: 10, MaxQUICHandshakes: 8})
	udp, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for range 30 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		bh := &blackholeConn{PacketConn: pc, start: time.Now(), closed: make(chan struct{})}
		tr := &quic.Transport{Conn: bh}
		c := tc.Clone()
		c.NextProtos = []string{http3.NextProtoH3}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer tr.Close()
			defer bh.Close() // first: the transport's read loop ends with it
			conn, err := tr.Dial(ctx, udp, c, &quic.Config{HandshakeIdleTimeout: 20 * time.Second})
			if err == nil {
				conn.CloseWithError(0, "") //nolint:errcheck
			}
		}()
	}
	time.Sleep(300 * time.Millisecond) // the server has seen every first flight
	h2 := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}}
	defer h2.CloseIdleConnections()
	h3 := &http3.Transport{TLSClientConfig: tc}
	defer h3.Close()
	for _, c := range []struct {
		name   string
		client *http.Client
	}{{"TLS over TCP", h2}, {"HTTP/3", &http.Client{Timeout: 3 * time.Second, Transport: h3}}} {
		resp, err := c.client.Get("https://" + addr + "/")
		if err != nil {
			t.Fatalf("%s beside 30 half-open QUIC handshakes: %v", c.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s beside 30 half-open QUIC handshakes: %d", c.name, resp.StatusCode)
		}
	}
}
