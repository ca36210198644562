package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"
)

// Serve after Shutdown or Close returns http.ErrServerClosed at once, as net/http's does, with
// either server of cleartext HTTP/1.1: a shutdown that comes before Serve started must not leave
// a listener served for good.
func TestFrontServeAfterShutdown(t *testing.T) {
	for _, http1 := range []string{HTTP1NetHTTP, HTTP1Lean} {
		for _, stop := range []string{"shutdown", "close"} {
			f := HTTPServer(http.NotFoundHandler(), ListenOptions{HTTP1: http1})
			if stop == "shutdown" {
				if err := f.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}
			} else {
				_ = f.Close()
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			errc := make(chan error, 1)
			go func() { errc <- f.Serve(ln) }()
			select {
			case err := <-errc:
				if !errors.Is(err, http.ErrServerClosed) {
					t.Errorf("%s after %s: Serve returned %v", http1, stop, err)
				}
			case <-time.After(2 * time.Second):
				t.Errorf("%s after %s: Serve still serving", http1, stop)
				ln.Close()
				_ = f.Close()
				<-errc
			}
		}
	}
}
