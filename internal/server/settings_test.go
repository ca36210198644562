package server

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// startServe serves a handler through Listen and Serve (the connection cap and, with TLS, the
// TLS listener), as `layer0 serve` does, and returns the bound address.
func startServe(t *testing.T, useTLS bool, maxHeaderBytes int) string {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Proto) //nolint:errcheck
	})
	srv := HTTPServer(h, ListenOptions{ReadHeaderTimeout: 5 * time.Second, MaxHeaderBytes: maxHeaderBytes})
	if useTLS {
		certFile, keyFile := writeCert(t, t.TempDir(), 1)
		if err := EnableTLS(srv, certFile, keyFile, nil); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := Listen("127.0.0.1:0", ConnLimit{Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, srv, ln, time.Second, nil) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// readServerSettings opens a connection (TLS with the ALPN protocol alpn, or cleartext with
// prior knowledge when alpn is empty), sends the client preface and returns the settings of the
// server's first SETTINGS frame.
func readServerSettings(t *testing.T, addr, alpn string) map[http2.SettingID]uint32 {
	t.Helper()
	var c net.Conn
	var err error
	if alpn != "" {
		tc, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{alpn}}) //nolint:gosec // self-signed test certificate
		if err != nil {
			t.Fatal(err)
		}
		if got := tc.ConnectionState().NegotiatedProtocol; got != alpn {
			t.Fatalf("ALPN: got %q, want %q", got, alpn)
		}
		c = tc
	} else if c, err = net.Dial("tcp", addr); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's frames: %v", err)
		}
		sf, ok := f.(*http2.SettingsFrame)
		if !ok || sf.IsAck() {
			continue
		}
		got := map[http2.SettingID]uint32{}
		if err := sf.ForeachSetting(func(s http2.Setting) error {
			got[s.ID] = s.Val
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	t.Fatal("no SETTINGS frame among the server's first frames")
	return nil
}

func TestHTTP2Settings(t *testing.T) {
	cases := []struct {
		name string
		tls  bool
		alpn string
	}{
		{"h2c", false, ""},
		{"tls-h2", true, "h2"},
		{"tls-anthropic-v3", true, ALPNAnthropic},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr := startServe(t, tc.tls, 0) // the default limits.max_header_bytes
			got := readServerSettings(t, addr, tc.alpn)
			if v, ok := got[http2.SettingEnableConnectProtocol]; !ok || v != 1 {
				t.Errorf("SETTINGS_ENABLE_CONNECT_PROTOCOL: got %d (present %v), want 1", v, ok)
			}
			if v := got[http2.SettingMaxHeaderListSize]; v != 65536 {
				t.Errorf("SETTINGS_MAX_HEADER_LIST_SIZE: got %d, want 65536", v)
			}
			if v := got[http2.SettingInitialWindowSize]; v <= 1<<20 {
				t.Errorf("SETTINGS_INITIAL_WINDOW_SIZE: got %d, want more than 1 MiB", v)
			}
		})
	}
}

func TestHTTP2SettingsFollowMaxHeaderBytes(t *testing.T) {
	addr := startServe(t, false, 16384)
	if v := readServerSettings(t, addr, "")[http2.SettingMaxHeaderListSize]; v != 16384 {
		t.Errorf("SETTINGS_MAX_HEADER_LIST_SIZE with max_header_bytes 16384: got %d", v)
	}
}

// An HTTP/2 request whose header list is over the announced size is refused; one just under it
// is served.
func TestHTTP2HeaderListEnforced(t *testing.T) {
	addr := startServe(t, false, 0)
	tr := &http2.Transport{AllowHTTP: true, DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	defer tr.CloseIdleConnections()
	do := func(size int) int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
		req.Header["X-Big"] = []string{strings.Repeat("a", size)}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return -1
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := do(60000); got != http.StatusOK {
		t.Errorf("60000-byte header: got status %d, want 200", got)
	}
	if got := do(70000); got == http.StatusOK {
		t.Errorf("70000-byte header: got 200, want a refusal")
	}
}
