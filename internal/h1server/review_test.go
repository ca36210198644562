package h1server

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
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

// A handler's goroutine may keep its *http.Request after the handler returned (net/http gives
// each request its own): the connection's next request must not be written over it.
func TestRequestOutlivesHandler(t *testing.T) {
	kept := make(chan *http.Request, 2)
	addr := start(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kept <- r
		io.WriteString(w, "ok")
	})})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	for _, p := range []string{"/first", "/second"} {
		io.WriteString(c, "GET "+p+" HTTP/1.1\r\nHost: a\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	first, second := <-kept, <-kept
	if first == second {
		t.Fatal("both requests are the same *http.Request")
	}
	if got := first.URL.Path; got != "/first" {
		t.Errorf("the first request's path reads %q after the second was served", got)
	}
}

// The answer's framing is the server's alone, as net/http makes it: a handler's
// Transfer-Encoding, or a Content-Length it did not validly declare before the head, never goes
// out beside the server's own (an answer with both, or two of either, is read by the client as
// something other than what was written).
func TestHandlerFramingFieldsReplaced(t *testing.T) {
	addr := start(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/te":
			w.Header().Set("Transfer-Encoding", "chunked")
		case "/te-flushed":
			w.Header().Set("Transfer-Encoding", "chunked")
			w.(http.Flusher).Flush()
		case "/bad-cl":
			w.Header().Set("Content-Length", "abc")
		case "/late-cl":
			w.WriteHeader(http.StatusOK)
			w.Header().Set("Content-Length", "10")
		}
		io.WriteString(w, "hello")
	})})
	for _, p := range []string{"/te", "/te-flushed", "/bad-cl", "/late-cl"} {
		got := rawExchange(t, addr, "GET "+p+" HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
		head, body, _ := strings.Cut(got, "\r\n\r\n")
		te := strings.Count(head, "\r\nTransfer-Encoding:")
		cl := strings.Count(head, "\r\nContent-Length:")
		switch {
		case te == 0 && cl == 1:
			if !strings.Contains(head, "\r\nContent-Length: 5") || body != "hello" {
				t.Errorf("%s: %q", p, got)
			}
		case te == 1 && cl == 0:
			if body != "5\r\nhello\r\n0\r\n\r\n" {
				t.Errorf("%s: %q", p, got)
			}
		default:
			t.Errorf("%s: %d Transfer-Encoding and %d Content-Length fields: %q", p, te, cl, got)
		}
	}
}

// Shutdown closes a connection that has sent no request after newGrace, as net/http closes a
// StateNew connection after five seconds, even with no header timeout to end it.
func TestShutdownClosesSilentNewConnection(t *testing.T) {
	if testing.Short() {
		t.Skip("waits newGrace")
	}
	s := &Server{Handler: echo}
	addr := start(t, s)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(50 * time.Millisecond) // accepted and being served
	ctx, cancel := context.WithTimeout(context.Background(), newGrace+3*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with a silent new connection: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Errorf("the silent connection read %d bytes, want its end", n)
	}
}

// A read deadline the handler set for its body does not outlive its request: with no
// IdleTimeout the connection's next request is read without a deadline, as net/http reads it.
func TestHandlerReadDeadlineEndsWithRequest(t *testing.T) {
	addr := start(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	for i := 0; i < 2; i++ {
		if i == 1 {
			time.Sleep(300 * time.Millisecond) // past the first request's read deadline
		}
		io.WriteString(c, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// An answer after which the connection ends says so, whatever Connection field the handler
// set, as net/http replaces it: a client told keep-alive would send its next request into a
// closing connection.
func TestCloseAnswerSaysClose(t *testing.T) {
	addr := start(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "keep-alive")
		io.WriteString(w, "ok")
	})})
	got := rawExchange(t, addr, "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
	head, _, _ := strings.Cut(got, "\r\n\r\n")
	if !strings.Contains(head, "\r\nConnection: close") || strings.Contains(head, "keep-alive") {
		t.Errorf("answer before the connection's end: %q", got)
	}
}
