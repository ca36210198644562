package h1server

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A connection that opens with HTTP/2's preface on a server without HTTP2 is answered 505 and
// ends: it is not left in the server's connections, where Shutdown would wait for it forever
// and Close would find it without its net.Conn.
func TestPrefaceWithoutHTTP2IsForgotten(t *testing.T) {
	s := &Server{Handler: echo}
	addr := start(t, s)
	for i := 0; i < 3; i++ {
		got := rawExchange(t, addr, http2Preface)
		if !strings.HasPrefix(got, "HTTP/1.1 505 ") {
			t.Fatalf("preface answered %q", got)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown after preface connections ended: %v", err)
	}
	s.mu.Lock()
	n := len(s.conns)
	s.mu.Unlock()
	if n != 0 {
		t.Errorf("%d connections left tracked", n)
	}
}
