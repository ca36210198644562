package upstream

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
)

// TestClientClose checks that Close leaves no connection open behind a client, on both the
// HTTP/1.1 path (http://) and the standard transport's (https://), that a response still open
// at Close gives its connection back to be closed, not pooled, and that a later Do is a 503.
func TestClientClose(t *testing.T) {
	for _, tls := range []bool{false, true} {
		var open atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"ok":true}`))
		})
		s := httptest.NewUnstartedServer(h)
		s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				open.Add(1)
			case http.StateClosed, http.StateHijacked:
				open.Add(-1)
			}
		}
		var opts Options
		if tls {
			s.StartTLS()
			opts.TLSConfig = s.Client().Transport.(*http.Transport).TLSClientConfig
		} else {
			s.Start()
		}
		c := newTestClient(t, s.URL, config.Timeouts{}, opts)
		for range 3 {
			if _, err := call(context.Background(), c, false); err != nil {
				t.Fatalf("tls=%v: %v", tls, err)
			}
		}
		held, err := c.Do(context.Background(), &Request{Path: "/messages", Header: testHeader, Body: []byte(`{}`), DecodeError: decodeErr})
		if err != nil {
			t.Fatalf("tls=%v: %v", tls, err)
		}
		if n := open.Load(); n == 0 {
			t.Fatalf("tls=%v: the server counts no open connection before Close", tls)
		}
		c.Close()
		held.Close()
		deadline := time.Now().Add(5 * time.Second)
		for open.Load() != 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := open.Load(); n != 0 {
			t.Errorf("tls=%v: got %d connections open after Close, want 0", tls, n)
		}
		_, err = call(context.Background(), c, false)
		var ae *apierr.Error
		if !errors.As(err, &ae) || ae.Kind != apierr.Unavailable || !errors.Is(err, errClosed) {
			t.Errorf("tls=%v: Do after Close: got %v, want a 503 caused by errClosed", tls, err)
		}
		s.Close()
	}
}
