package h3_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/layer0ai/layer0/internal/h3"
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/testcert"
)

func TestParseMode(t *testing.T) {
	for in, want := range map[string]h3.Mode{"": h3.Off, "off": h3.Off, "auto": h3.Auto, " AUTO ": h3.Auto, "on": h3.On} {
		got, err := h3.ParseMode(in)
		if err != nil || got != want {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := h3.ParseMode("yes"); err == nil || !strings.Contains(err.Error(), h3.EnvVar) {
		t.Errorf("ParseMode(yes): got %v, want an error naming %s", err, h3.EnvVar)
	}
	got, err := h3.ModeFromEnv(func(k string) string { return map[string]string{h3.EnvVar: "on"}[k] })
	if err != nil || got != h3.On {
		t.Errorf("ModeFromEnv: %v, %v", got, err)
	}
}

// serveTLS serves a handler that echoes the request's protocol and body over TLS (HTTP/2 by
// ALPN), and over HTTP/3 on the same port when withH3; it returns the https URL and the roots.
func serveTLS(t *testing.T, withH3 bool) (string, *x509.CertPool) {
	t.Helper()
	certFile, keyFile, roots := testcert.Write(t, t.TempDir())
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, r.Proto+" "+string(b)) //nolint:errcheck
	})
	srv := server.HTTPServer(h, server.ListenOptions{ReadHeaderTimeout: 5 * time.Second})
	if err := server.EnableTLS(srv, certFile, keyFile, nil); err != nil {
		t.Fatal(err)
	}
	ln, err := server.Listen("127.0.0.1:0", server.ConnLimit{Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var hs *server.HTTP3
	if withH3 {
		if hs, err = server.ListenHTTP3(srv, ln); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 2)
	go func() { done <- server.Serve(ctx, srv, ln, time.Second, nil) }()
	if hs != nil {
		go func() { done <- hs.Serve(ctx, time.Second) }()
	}
	t.Cleanup(func() {
		cancel()
		for range map[bool]int{false: 1, true: 2}[withH3] {
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		}
	})
	return "https://" + ln.Addr().String(), roots
}

func newTransport(t *testing.T, mode h3.Mode, roots *x509.CertPool, timeout time.Duration) *h3.Transport {
	t.Helper()
	tc := &tls.Config{RootCAs: roots}
	fb := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}
	tr, err := h3.NewTransport(h3.Options{Mode: mode, TLSConfig: tc, Fallback: fb, HandshakeTimeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func post(t *testing.T, tr http.RoundTripper, url, body string) (string, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func TestAutoUsesHTTP3(t *testing.T) {
	url, roots := serveTLS(t, true)
	tr := newTransport(t, h3.Auto, roots, time.Second)
	for i := range 3 {
		got, err := post(t, tr, url+"/", "hello")
		if err != nil {
			t.Fatal(err)
		}
		if got != "HTTP/3.0 hello" {
			t.Fatalf("request %d: got %q, want it over HTTP/3 with its body", i, got)
		}
	}
}

// With nothing listening on the UDP port, Auto falls back to HTTP/2 within the handshake
// timeout, with the body intact, and the next request goes straight to HTTP/2.
func TestAutoFallsBackWhenUDPClosed(t *testing.T) {
	url, roots := serveTLS(t, false)
	const timeout = 300 * time.Millisecond
	tr := newTransport(t, h3.Auto, roots, timeout)
	start := time.Now()
	got, err := post(t, tr, url+"/", "hello")
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > timeout+2*time.Second {
		t.Errorf("the fallback took %v, want about the handshake timeout %v", took, timeout)
	}
	if got != "HTTP/2.0 hello" {
		t.Fatalf("got %q, want the request over HTTP/2 with its body", got)
	}
	host := strings.TrimPrefix(url, "https://")
	if tr.UsesHTTP3(host) {
		t.Error("the host whose handshake failed is still tried over HTTP/3")
	}
	start = time.Now()
	if got, err := post(t, tr, url+"/", "again"); err != nil || got != "HTTP/2.0 again" {
		t.Fatalf("second request: %q, %v", got, err)
	}
	if took := time.Since(start); took >= timeout {
		t.Errorf("the second request took %v: it waited for HTTP/3 again", took)
	}
}

func TestOnFailsWithoutFallback(t *testing.T) {
	url, roots := serveTLS(t, false)
	tr := newTransport(t, h3.On, roots, 200*time.Millisecond)
	start := time.Now()
	if got, err := post(t, tr, url+"/", "hello"); err == nil {
		t.Fatalf("got %q over a closed UDP port in on mode, want an error", got)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the failure took %v, want about the handshake timeout", took)
	}
}

func TestOffAndCleartextUseFallback(t *testing.T) {
	url, roots := serveTLS(t, true)
	if got, err := post(t, newTransport(t, h3.Off, roots, 0), url+"/", "x"); err != nil || got != "HTTP/2.0 x" {
		t.Errorf("off: %q, %v", got, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Proto) })} //nolint:errcheck
	go srv.Serve(ln)                                                                                                            //nolint:errcheck
	defer srv.Close()
	if got, err := post(t, newTransport(t, h3.On, roots, 0), "http://"+ln.Addr().String()+"/", ""); err != nil || got != "HTTP/1.1" {
		t.Errorf("http URL in on mode: %q, %v", got, err)
	}
}

// writeCounter is a UDP socket that counts the datagram writes quic-go makes on it.
type writeCounter struct {
	*net.UDPConn
	writes atomic.Int64
}

func (c *writeCounter) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (int, int, error) {
	c.writes.Add(1)
	return c.UDPConn.WriteMsgUDP(b, oob, addr)
}

// With Options.QUICTransport the connections are dialed through the caller's socket, which
// stays open (the caller's) after the Transport closes.
func TestQUICTransportCarriesTheConnections(t *testing.T) {
	url, roots := serveTLS(t, true)
	uc, err := net.ListenUDP("udp4", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	wc := &writeCounter{UDPConn: uc}
	qt := &quic.Transport{Conn: wc}
	defer qt.Close()
	tc := &tls.Config{RootCAs: roots}
	tr, err := h3.NewTransport(h3.Options{Mode: h3.On, TLSConfig: tc, Fallback: &http.Transport{TLSClientConfig: tc},
		QUICTransport: qt})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := post(t, tr, url+"/", "hello"); err != nil || got != "HTTP/3.0 hello" {
		t.Fatalf("got %q, %v; want the request over HTTP/3", got, err)
	}
	if wc.writes.Load() == 0 {
		t.Error("no datagram went through the given transport's socket")
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := uc.WriteTo([]byte{0}, uc.LocalAddr()); err != nil {
		t.Errorf("the caller's socket was closed with the Transport: %v", err)
	}
}
