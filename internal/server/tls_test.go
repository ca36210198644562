package server

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// writeCert writes a self-signed certificate for 127.0.0.1 with the given serial.
func writeCert(t *testing.T, dir string, serial int64) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "layer0 test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func startTLS(t *testing.T, certFile, keyFile string) string {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Proto) //nolint:errcheck
	})
	srv := HTTPServer(h, ListenOptions{ReadHeaderTimeout: 5 * time.Second})
	if err := EnableTLS(srv, certFile, keyFile, nil); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(tls.NewListener(ln, srv.TLSConfig)) //nolint:errcheck
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func TestTLSALPN(t *testing.T) {
	certFile, keyFile := writeCert(t, t.TempDir(), 1)
	addr := startTLS(t, certFile, keyFile)
	tests := []struct {
		offer     []string
		wantALPN  string
		wantProto string
	}{
		{[]string{"anthropic-v3", "h2", "http/1.1"}, "anthropic-v3", "HTTP/2.0"},
		{[]string{"h2", "http/1.1"}, "h2", "HTTP/2.0"},
		{[]string{"http/1.1"}, "http/1.1", "HTTP/1.1"},
	}
	for _, tt := range tests {
		t.Run(tt.wantALPN, func(t *testing.T) {
			conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: tt.offer}) //nolint:gosec // self-signed test certificate
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if got := conn.ConnectionState().NegotiatedProtocol; got != tt.wantALPN {
				t.Fatalf("ALPN: got %q, want %q", got, tt.wantALPN)
			}
			req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/", nil)
			var resp *http.Response
			if tt.wantProto == "HTTP/2.0" {
				cc, err := (&http2.Transport{}).NewClientConn(conn)
				if err != nil {
					t.Fatal(err)
				}
				resp, err = cc.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
			} else {
				if err := req.Write(conn); err != nil {
					t.Fatal(err)
				}
				resp, err = http.ReadResponse(newBufReader(conn), req)
				if err != nil {
					t.Fatal(err)
				}
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != tt.wantProto {
				t.Errorf("protocol seen by the handler: got %q, want %q", body, tt.wantProto)
			}
		})
	}
}

func TestTLSCertificateReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := writeCert(t, dir, 1)
	cr := &certReloader{certFile: certFile, keyFile: keyFile, logger: slog.New(slog.DiscardHandler)}
	if err := cr.load(); err != nil {
		t.Fatal(err)
	}
	serial := func() int64 {
		c, err := cr.get(nil)
		if err != nil {
			t.Fatal(err)
		}
		x, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return x.SerialNumber.Int64()
	}
	if got := serial(); got != 1 {
		t.Fatalf("serial: got %d, want 1", got)
	}
	writeCert(t, dir, 2)
	future := time.Now().Add(time.Minute)
	os.Chtimes(certFile, future, future) //nolint:errcheck
	os.Chtimes(keyFile, future, future)  //nolint:errcheck
	if got := serial(); got != 2 {
		t.Errorf("after renewal: got serial %d, want 2", got)
	}
	// A broken renewal keeps the previous certificate.
	if err := os.WriteFile(certFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	later := future.Add(time.Minute)
	os.Chtimes(certFile, later, later) //nolint:errcheck
	if got := serial(); got != 2 {
		t.Errorf("after a broken renewal: got serial %d, want 2", got)
	}
}

func TestEnableTLSBadFiles(t *testing.T) {
	srv := HTTPServer(http.NotFoundHandler(), ListenOptions{})
	if err := EnableTLS(srv, "/nonexistent/cert.pem", "/nonexistent/key.pem", nil); err == nil {
		t.Error("got nil error for missing files")
	}
}

func newBufReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }
