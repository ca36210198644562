package h1server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// start serves h on a loopback listener and returns its address.
func start(t testing.TB, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// echo answers with the request's method, target, Host, a header and its body.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "body: "+err.Error(), 400)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "%s %s %s %s cl=%d x=%s body=%s", r.Method, r.RequestURI, r.URL.Path, r.Host, r.ContentLength,
		r.Header.Get("X-Test"), b)
})

// rawExchange writes req on a new connection, half-closes it and returns everything read back.
func rawExchange(t *testing.T, addr, req string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	b, _ := io.ReadAll(c)
	return string(b)
}

func TestNetHTTPClient(t *testing.T) {
	addr := start(t, &Server{Handler: echo})
	cl := &http.Client{Timeout: 5 * time.Second}
	for i := range 3 { // keep-alive: the same connection serves them all
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/messages?beta=true", strings.NewReader("hello"))
		req.Header.Set("X-Test", fmt.Sprint(i))
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := fmt.Sprintf("POST /v1/messages?beta=true /v1/messages %s cl=5 x=%d body=hello", addr, i)
		if string(b) != want || resp.ContentLength != int64(len(want)) || resp.Header.Get("Date") == "" {
			t.Fatalf("got %q (length %d, header %v), want %q", b, resp.ContentLength, resp.Header, want)
		}
	}
}

func TestChunkedRequestAndPipelining(t *testing.T) {
	addr := start(t, &Server{Handler: echo})
	got := rawExchange(t, addr,
		"POST /a HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"+
			"GET /b HTTP/1.1\r\nhost: h\r\nx-test: lower\r\n\r\n"+
			"GET /c HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
	for _, want := range []string{"POST /a /a h cl=-1 x= body=abcde", "GET /b /b h cl=0 x=lower body=", "GET /c /c h cl=0 x= body="} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	if n := strings.Count(got, "HTTP/1.1 200 OK"); n != 3 {
		t.Errorf("%d answers, want 3:\n%s", n, got)
	}
	if !strings.Contains(got, "Connection: close") {
		t.Errorf("the last answer does not say Connection: close:\n%s", got)
	}
}

func TestRefusals(t *testing.T) {
	addr := start(t, &Server{Handler: echo, MaxHeaderBytes: 1024})
	for _, tc := range []struct{ req, status string }{
		{"GET / HTTP/1.1\r\n\r\n", "400"},                                                                // no Host
		{"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "400"},                                          // two Hosts
		{"GET / HTTP/1.1\nHost: a\n\n", "400"},                                                           // bare LF
		{"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n", "400"},                                       // obs-fold
		{"GET / HTTP/1.1\r\nHost : a\r\n\r\n", "400"},                                                    // space before colon
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", "400"},         // two CLs
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", "400"}, // CL+TE
		{"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", "501"},
		{"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", "400"},
		{"GET / HTTP/1.2\r\nHost: a\r\n\r\n", "505"},
		{"GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("a", 6000) + "\r\n\r\n", "431"},
		{"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n", "501"},
		{"GET / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\n\r\n", "417"},
		{"GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n", "400"},
	} {
		got := rawExchange(t, addr, tc.req)
		if !strings.HasPrefix(got, "HTTP/1.1 "+tc.status+" ") || strings.Contains(got, "body=") {
			t.Errorf("%q: got %q, want status %s and no handler call", tc.req, got, tc.status)
		}
	}
}

func TestBadChunkedBody(t *testing.T) {
	addr := start(t, &Server{Handler: echo})
	for _, body := range []string{
		"3\r\nabcX\r\n0\r\n\r\n",      // no CRLF after the data
		"10000000000000000\r\n",       // 17 hex digits
		"3 \r\nabc\r\n0\r\n\r\n",      // space after the size
		"3\nabc\r\n0\r\n\r\n",         // bare LF
		"0\r\nTrailer: x\r\n\r\n",     // trailers
		"3;a\x00\r\nabc\r\n0\r\n\r\n", // NUL in an extension
	} {
		got := rawExchange(t, addr, "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"+body)
		if !strings.HasPrefix(got, "HTTP/1.1 400 ") || !strings.Contains(got, "body: h1server") {
			t.Errorf("%q: got %q, want the handler's 400 for a body read error", body, got)
		}
	}
}

func TestStreamAndHTTP10(t *testing.T) {
	addr := start(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range 3 {
			fmt.Fprintf(w, "event %d\n", i)
			w.(http.Flusher).Flush()
		}
	})})
	got := rawExchange(t, addr, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	if !strings.Contains(got, "Transfer-Encoding: chunked") || !strings.HasSuffix(got, "8\r\nevent 2\n\r\n0\r\n\r\n") {
		t.Errorf("flushed stream: %q", got)
	}
	got = rawExchange(t, addr, "GET / HTTP/1.0\r\n\r\n")
	if strings.Contains(got, "chunked") || !strings.Contains(got, "Connection: close") || !strings.HasSuffix(got, "event 0\nevent 1\nevent 2\n") {
		t.Errorf("HTTP/1.0 stream: %q", got)
	}
}

func TestExpectContinue(t *testing.T) {
	addr := start(t, &Server{Handler: echo})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
	br := bufio.NewReader(c)
	line, _ := br.ReadString('\n')
	blank, _ := br.ReadString('\n')
	if line != "HTTP/1.1 100 Continue\r\n" || blank != "\r\n" {
		t.Fatalf("got %q before sending the body, want 100 Continue", line)
	}
	io.WriteString(c, "ok")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if !strings.HasSuffix(string(b), "body=ok") {
		t.Fatalf("got %q", b)
	}
}

func TestPanicEndsOnlyTheConnection(t *testing.T) {
	var buf bytes.Buffer
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic("boom")
		}
		io.WriteString(w, "fine")
	})}
	s.ErrorLog = log.New(&lockedWriter{w: &buf}, "", 0)
	addr := start(t, s)
	if got := rawExchange(t, addr, "GET /panic HTTP/1.1\r\nHost: a\r\n\r\n"); got != "" {
		t.Errorf("a panicking handler's connection got %q", got)
	}
	if got := rawExchange(t, addr, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); !strings.HasSuffix(got, "fine") {
		t.Errorf("next connection got %q", got)
	}
}

func TestClientGoneCancelsContext(t *testing.T) {
	canceled := make(chan error, 1)
	addr := start(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			canceled <- context.Cause(r.Context())
		case <-time.After(5 * time.Second):
			canceled <- nil
		}
	})})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	c.Close()
	if err := <-canceled; !errors.Is(err, ErrClientGone) {
		t.Fatalf("cause %v, want ErrClientGone", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("noticed after %v", d)
	}
}

func TestShutdownWaitsForRequests(t *testing.T) {
	release := make(chan struct{})
	var served atomic.Int32
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		served.Add(1)
		io.WriteString(w, "done")
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	time.Sleep(50 * time.Millisecond)
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a request running", err)
	default:
	}
	close(release)
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, _ := io.ReadAll(c)
	if !strings.Contains(string(b), "Connection: close") || !strings.HasSuffix(string(b), "done") {
		t.Fatalf("answer during shutdown: %q", b)
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestLargeHead(t *testing.T) {
	addr := start(t, &Server{Handler: echo, MaxHeaderBytes: 64 << 10})
	big := strings.Repeat("b", 40<<10)
	got := rawExchange(t, addr, "GET /big HTTP/1.1\r\nHost: a\r\nX-Test: "+big+"\r\n\r\nGET /next HTTP/1.1\r\nHost: a\r\n\r\n")
	if !strings.Contains(got, "x="+big+" body=") || !strings.Contains(got, "GET /next /next a") {
		t.Fatalf("a 40 KiB head and the request after it: got %.200q", got)
	}
}

func TestLargeAnswers(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	addr := start(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/declared" {
			w.Header().Set("Content-Length", fmt.Sprint(len(big)))
		}
		w.Write(big[:len(big)/2])
		w.Write(big[len(big)/2:])
	})})
	cl := &http.Client{Timeout: 10 * time.Second}
	for _, path := range []string{"/declared", "/undeclared"} {
		for range 2 { // the same connection serves the next one
			resp, err := cl.Get("http://" + addr + path)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || !bytes.Equal(b, big) {
				t.Fatalf("%s: %d bytes, err %v", path, len(b), err)
			}
			if path == "/undeclared" && resp.ContentLength != -1 {
				t.Errorf("an answer over the buffer was not chunked: length %d", resp.ContentLength)
			}
		}
	}
}

func TestConnectionTokens(t *testing.T) {
	addr := start(t, &Server{Handler: echo})
	for _, tc := range []struct {
		req     string
		answers int
	}{
		{"GET /a HTTP/1.1\r\nHost: a\r\nConnection: foo close\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n", 1},
		{"GET /a HTTP/1.1\r\nHost: a\r\nConnection: foo\r\nConnection: Close\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n", 1},
		{"GET /a HTTP/1.0\r\nConnection: x\r\nConnection: keep-alive\r\n\r\nGET /b HTTP/1.0\r\n\r\n", 1},
		{"GET /a HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\nGET /b HTTP/1.0\r\n\r\n", 2},
		{"GET /a HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, x-closed\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n", 2},
	} {
		got := rawExchange(t, addr, tc.req)
		if n := strings.Count(got, "HTTP/1.1 200 OK"); n != tc.answers {
			t.Errorf("%q: %d answers, want %d", tc.req, n, tc.answers)
		}
	}
}

func TestBareLFNamed(t *testing.T) {
	addr := start(t, &Server{Handler: echo})
	if got := rawExchange(t, addr, "GET / HTTP/1.1\nHost: a\n\n"); !strings.Contains(got, "request line not ending in CRLF") {
		t.Fatalf("a request line ending in a bare LF: got %q, want the reason named", got)
	}
}
