package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// scriptConn is a net.Conn that reads a script and records what is written.
type scriptConn struct {
	net.Conn // nil: the methods the tests do not use panic
	r        io.Reader
	written  bytes.Buffer
	closed   bool
}

func (s *scriptConn) Read(p []byte) (int, error)  { return s.r.Read(p) }
func (s *scriptConn) Write(p []byte) (int, error) { return s.written.Write(p) }
func (s *scriptConn) Close() error                { s.closed = true; return nil }

// readAll reads one response's head and body with Next.
func readAll(c *Conn) (*Head, string, error) { return readWith(c, false) }

// readWith reads one response's head and body with Next, or with Read into a buffer larger
// than the connection's (straight from the network).
func readWith(c *Conn, useRead bool) (*Head, string, error) {
	h, err := c.ReadHead()
	if err != nil {
		return nil, "", err
	}
	var body []byte
	p := make([]byte, 64<<10)
	for {
		var b []byte
		var err error
		if useRead {
			var n int
			n, err = c.Read(p)
			b = p[:n]
		} else {
			b, err = c.Next()
		}
		body = append(body, b...)
		if err == io.EOF {
			return h, string(body), nil
		}
		if err != nil {
			return h, string(body), err
		}
	}
}

func TestResponses(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		status   int
		body     string
		length   int64
		chunked  bool
		reusable bool
		err      error // errors.Is target; nil means success
	}{
		{name: "content-length", in: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Type: text/plain\r\n\r\nhello",
			status: 200, body: "hello", length: 5, reusable: true},
		{name: "no reason phrase", in: "HTTP/1.1 404\r\nContent-Length: 0\r\n\r\n", status: 404, reusable: true},
		{name: "chunked", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nTrailer: x\r\n\r\n",
			status: 200, body: "hello world", length: -1, chunked: true, reusable: true},
		{name: "chunk size in capitals", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n",
			status: 200, body: "0123456789", length: -1, chunked: true, reusable: true},
		{name: "until EOF", in: "HTTP/1.1 200 OK\r\n\r\nall of it", status: 200, body: "all of it", length: -1},
		{name: "connection close", in: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
			status: 200, body: "ok", length: 2},
		{name: "HTTP/1.0", in: "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", status: 200, body: "ok", length: 2},
		{name: "HTTP/1.0 keep-alive", in: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
			status: 200, body: "ok", length: 2, reusable: true},
		{name: "1xx skipped", in: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nx",
			status: 201, body: "x", length: 1, reusable: true},
		{name: "204 has no body", in: "HTTP/1.1 204 No Content\r\n\r\n", status: 204, length: 0, reusable: true},
		{name: "LF only", in: "HTTP/1.1 200 OK\nContent-Length: 1\n\nx", status: 200, body: "x", length: 1, reusable: true},
		{name: "short body", in: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", status: 200, body: "short", length: 10,
			err: io.ErrUnexpectedEOF},
		{name: "cut chunk", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", status: 200, body: "hel",
			length: -1, chunked: true, err: io.ErrUnexpectedEOF},
		{name: "bad chunk size", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", status: 200, length: -1,
			chunked: true, err: ErrMalformed},
		{name: "chunk without CRLF", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nxy\r\n0\r\n\r\n", status: 200,
			body: "x", length: -1, chunked: true, err: ErrMalformed},
		{name: "bad status line", in: "HTTP/2 200 OK\r\n\r\n", err: ErrMalformed},
		{name: "bad status code", in: "HTTP/1.1 2x0 OK\r\n\r\n", err: ErrMalformed},
		{name: "bad header line", in: "HTTP/1.1 200 OK\r\nno colon\r\n\r\n", err: ErrMalformed},
		{name: "bad content-length", in: "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", err: ErrMalformed},
		{name: "conflicting content-length", in: "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx", err: ErrMalformed},
		{name: "gzip coding", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", err: ErrMalformed},
		{name: "head too long", in: "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", 5000) + "\r\n\r\n", err: ErrHeadTooLong},
		{name: "no response", in: "", err: io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		for mode := range 4 {
			oneByte, useRead := mode&1 != 0, mode&2 != 0
			var r io.Reader = strings.NewReader(tt.in)
			if oneByte {
				r = iotest.OneByteReader(r)
			}
			c := NewConn(&scriptConn{r: r}, 0)
			if err := c.WriteRequest([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
			h, body, err := readWith(c, useRead)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Errorf("%s: got error %v, want %v", tt.name, err, tt.err)
				}
				if c.Reusable() {
					t.Errorf("%s: got a reusable connection after an error", tt.name)
				}
				if h == nil {
					continue
				}
			} else if err != nil {
				t.Errorf("%s (one byte at a time %v, Read %v): %v", tt.name, oneByte, useRead, err)
				continue
			}
			if h.Status != tt.status || h.ContentLength != tt.length || h.Chunked != tt.chunked || body != tt.body {
				t.Errorf("%s: got %d %d %v %q, want %d %d %v %q", tt.name, h.Status, h.ContentLength, h.Chunked, body,
					tt.status, tt.length, tt.chunked, tt.body)
			}
			if tt.err == nil && c.Reusable() != tt.reusable {
				t.Errorf("%s: got reusable %v, want %v", tt.name, c.Reusable(), tt.reusable)
			}
		}
	}
}

func TestHeadGet(t *testing.T) {
	c := NewConn(&scriptConn{r: strings.NewReader("HTTP/1.1 429 Too Many\r\nContent-Type:  application/json \r\n" +
		"retry-after: 7\r\nX-Two: a\r\nX-Two: b\r\nContent-Length: 0\r\n\r\n")}, 0)
	h, err := c.ReadHead()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, want string }{
		{"Content-Type", "application/json"}, {"content-type", "application/json"}, {"Retry-After", "7"},
		{"X-Two", "a"}, {"X-Tw", ""}, {"Missing", ""},
	}
	for _, tt := range tests {
		if got := string(h.Get(tt.name)); got != tt.want {
			t.Errorf("Get(%q): got %q, want %q", tt.name, got, tt.want)
		}
	}
	want := http.Header{"Content-Type": {"application/json"}, "Retry-After": {"7"}, "X-Two": {"a", "b"}, "Content-Length": {"0"}}
	if diff := cmp.Diff(want, h.Header()); diff != "" {
		t.Errorf("Header (-want +got):\n%s", diff)
	}
}

// TestKeepAlive reads several responses in a row from one connection, each body left in a
// different state, and checks which leave the connection reusable without blocking.
func TestKeepAlive(t *testing.T) {
	in := "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none" +
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\ntwo\r\n0\r\n\r\n" +
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nthree"
	c := NewConn(&scriptConn{r: strings.NewReader(in)}, 0)
	for i, want := range []string{"one", "two", "three"} {
		if err := c.WriteRequest([]byte("GET / HTTP/1.1\r\n\r\n")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ReadHead(); err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		// Read exactly the body's bytes but not its end: Reusable must consume the rest (the
		// chunked terminator) from the buffer.
		got := make([]byte, len(want))
		if _, err := io.ReadFull(c, got); err != nil || string(got) != want {
			t.Fatalf("response %d: got %q %v, want %q", i, got, err, want)
		}
		if !c.Reusable() {
			t.Fatalf("response %d: got not reusable after its body was read", i)
		}
		if c.Reused() != (i > 0) {
			t.Errorf("response %d: got Reused %v", i, c.Reused())
		}
	}
}

func TestNotReusableWhenBodyUnread(t *testing.T) {
	// The rest of the body is not buffered yet: Reusable must not wait for it.
	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"))
	}()
	c := NewConn(&scriptConn{r: pr}, 0)
	if _, err := c.ReadHead(); err != nil {
		t.Fatal(err)
	}
	done := make(chan bool)
	go func() { done <- c.Reusable() }()
	select {
	case r := <-done:
		if r {
			t.Error("got reusable with 7 body bytes outstanding")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Reusable blocked")
	}
	pw.Close()
}

func TestReadIntoSmallBuffer(t *testing.T) {
	c := NewConn(&scriptConn{r: strings.NewReader("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nabcdef\r\n0\r\n\r\n")}, 0)
	if _, err := c.ReadHead(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(iotest.OneByteReader(c))
	if err != nil || string(got) != "abcdef" {
		t.Errorf("got %q %v, want abcdef", got, err)
	}
}

func TestBodyBeforeHead(t *testing.T) {
	c := NewConn(&scriptConn{r: strings.NewReader("")}, 0)
	if _, err := c.Next(); !errors.Is(err, ErrState) {
		t.Errorf("got %v, want ErrState", err)
	}
}

func TestAppendRequest(t *testing.T) {
	hdr, err := AppendHeader(nil, http.Header{"X-B": {"2"}, "Content-Type": {"application/json"}, "Host": {"ignored"}})
	if err != nil {
		t.Fatal(err)
	}
	got := string(AppendRequest(nil, "POST", "/v1/messages", "127.0.0.1:9", 12, hdr, []byte("X-Api-Key: k\r\n")))
	want := "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1:9\r\nContent-Type: application/json\r\nX-B: 2\r\nX-Api-Key: k\r\nContent-Length: 12\r\n\r\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// The request parses as one with net/http's server-side reader.
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(got + "0123456789ab")))
	if err != nil || req.ContentLength != 12 || req.Header.Get("X-B") != "2" || req.Host != "127.0.0.1:9" {
		t.Errorf("got %+v %v", req, err)
	}
	for _, h := range []http.Header{{"X": {"a\r\nInjected: 1"}}, {"X\nY": {"a"}}} {
		if _, err := AppendHeader(nil, h); err == nil {
			t.Errorf("AppendHeader(%v): got no error", h)
		}
	}
}

// server is a loopback HTTP/1.1 server for the pool tests: handle answers each request read.
func server(t testing.TB, handle func(conn net.Conn, br *bufio.Reader) bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				for handle(conn, br) {
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// okOnce answers one request with "ok"; closeAfter closes the connection after it.
func okOnce(closeAfter bool) func(net.Conn, *bufio.Reader) bool {
	return func(conn net.Conn, br *bufio.Reader) bool {
		req, err := http.ReadRequest(br)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, req.Body)
		_, _ = conn.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
		return !closeAfter
	}
}

func roundTrip(ctx context.Context, p *Pool) (*Conn, string, error) {
	c, err := p.Get(ctx)
	if err != nil {
		return nil, "", err
	}
	body := []byte("{}")
	req := AppendRequest(nil, "POST", "/", p.Addr, len(body))
	if err := c.WriteRequest(append(req, body...)); err != nil {
		return c, "", err
	}
	_, got, err := readAll(c)
	return c, got, err
}

func TestPoolReuses(t *testing.T) {
	p := &Pool{Addr: server(t, okOnce(false))}
	defer p.CloseIdle()
	var first *Conn
	for i := range 5 {
		c, got, err := roundTrip(context.Background(), p)
		if err != nil || got != "ok" {
			t.Fatalf("request %d: got %q %v", i, got, err)
		}
		if i == 0 {
			first = c
		} else if c != first {
			t.Errorf("request %d: got a new connection, want the idle one", i)
		}
		p.Put(c)
	}
	if p.Idle() != 1 {
		t.Errorf("got %d idle, want 1", p.Idle())
	}
	p.CloseIdle()
	if p.Idle() != 0 {
		t.Errorf("got %d idle after CloseIdle, want 0", p.Idle())
	}
}

// TestPoolServerClosedIdle checks the error a reused connection gives when the server closed it
// while it was idle: ErrNoResponse, on which a caller may send the request again.
func TestPoolServerClosedIdle(t *testing.T) {
	p := &Pool{Addr: server(t, okOnce(true))}
	defer p.CloseIdle()
	c, got, err := roundTrip(context.Background(), p)
	if err != nil || got != "ok" {
		t.Fatalf("got %q %v", got, err)
	}
	p.Put(c) // reusable as far as the response says
	time.Sleep(50 * time.Millisecond)
	c2, _, err := roundTrip(context.Background(), p)
	if c2 != c {
		t.Fatal("got a new connection, want the idle one")
	}
	if !errors.Is(err, ErrNoResponse) {
		t.Errorf("got %v, want ErrNoResponse", err)
	}
	if c2.Reusable() {
		t.Error("got a failed connection reusable")
	}
}

func TestPoolIdleTimeoutAndMax(t *testing.T) {
	p := &Pool{Addr: server(t, okOnce(false)), MaxIdle: 2, IdleTimeout: time.Nanosecond}
	defer p.CloseIdle()
	var conns []*Conn
	for range 3 {
		c, err := p.Dial(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		p.Put(c)
	}
	if p.Idle() != 2 {
		t.Errorf("got %d idle, want MaxIdle 2", p.Idle())
	}
	c, err := p.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, old := range conns {
		if c == old {
			t.Error("got a connection idle past IdleTimeout")
		}
	}
	if p.Idle() != 0 {
		t.Errorf("got %d idle, want the expired ones closed", p.Idle())
	}
}

// TestCloseUnblocksRead checks that Close from another goroutine ends a read waiting for a
// response at once: how callers enforce timeouts and cancellation.
func TestCloseUnblocksRead(t *testing.T) {
	p := &Pool{Addr: server(t, func(conn net.Conn, br *bufio.Reader) bool {
		_, _ = http.ReadRequest(br)
		time.Sleep(10 * time.Second) // never answers in time
		return false
	})}
	c, err := p.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteRequest(AppendRequest(nil, "POST", "/", p.Addr, 0)); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(20*time.Millisecond, func() { c.Close() })
	start := time.Now()
	if _, err := c.ReadHead(); err == nil {
		t.Fatal("got a head, want an error")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("read ended %v after Close, want at once", d)
	}
}

// FuzzResponse reads any bytes as a response: no panic, and where net/http reads the same
// bytes as a response with a body, both read the same status and body.
func FuzzResponse(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"))
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		c := NewConn(&scriptConn{r: bytes.NewReader(in)}, 0)
		h, body, err := readAll(c)
		c2 := NewConn(&scriptConn{r: bytes.NewReader(in)}, 0)
		h2, body2, err2 := readWith(c2, true)
		if (err == nil) != (err2 == nil) || err == nil && (h.Status != h2.Status || body != body2) {
			t.Fatalf("Next read %v %q, Read read %v %q", err, body, err2, body2)
		}
		if err != nil {
			return
		}
		resp, herr := http.ReadResponse(bufio.NewReader(bytes.NewReader(in)), &http.Request{Method: http.MethodPost})
		if herr != nil {
			return
		}
		want, herr := io.ReadAll(resp.Body)
		if herr != nil || resp.StatusCode < 200 || h.Status != resp.StatusCode {
			return
		}
		if body != string(want) {
			t.Errorf("got body %q, net/http read %q", body, want)
		}
	})
}

func BenchmarkRoundTrip(b *testing.B) {
	addr := server(b, okOnce(false))
	p := &Pool{Addr: addr}
	defer p.CloseIdle()
	req := AppendRequest(nil, "POST", "/", addr, 2)
	req = append(req, "{}"...)
	b.ReportAllocs()
	for b.Loop() {
		c, err := p.Get(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if err := c.WriteRequest(req); err != nil {
			b.Fatal(err)
		}
		if _, err := c.ReadHead(); err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := c.Next(); err != nil {
				break
			}
		}
		p.Put(c)
	}
}

func TestBufferedAndBodyDone(t *testing.T) {
	in := "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nabcd"
	c := NewConn(&scriptConn{r: strings.NewReader(in)}, 0)
	if c.BodyDone() {
		t.Error("got BodyDone before any head")
	}
	if _, err := c.ReadHead(); err != nil {
		t.Fatal(err)
	}
	if c.BodyDone() || c.Buffered() != 4 {
		t.Errorf("after the head: got BodyDone %v, Buffered %d; want false, 4", c.BodyDone(), c.Buffered())
	}
	p := make([]byte, 3)
	if _, err := io.ReadFull(c, p); err != nil {
		t.Fatal(err)
	}
	if c.BodyDone() || c.Buffered() != 1 {
		t.Errorf("after 3 bytes: got BodyDone %v, Buffered %d; want false, 1", c.BodyDone(), c.Buffered())
	}
	if _, err := c.Read(p); err != nil {
		t.Fatal(err)
	}
	if !c.BodyDone() || c.Buffered() != 0 {
		t.Errorf("at the end: got BodyDone %v, Buffered %d; want true, 0", c.BodyDone(), c.Buffered())
	}
}
