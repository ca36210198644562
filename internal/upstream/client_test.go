package upstream

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
)

// rawServer is a loopback HTTP/1.1 server that hands each request to answer, with the
// connection, so that tests control the bytes and the connection's fate. It counts connections
// and keeps the last request.
type rawServer struct {
	addr    string
	conns   atomic.Int32
	mu      sync.Mutex
	last    *http.Request
	lastRaw string
}

func newRawServer(t *testing.T, answer func(conn net.Conn, req *http.Request) bool) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{addr: ln.Addr().String()}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			go func() {
				defer conn.Close()
				br := bufio.NewReader(conn)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					body, _ := io.ReadAll(req.Body)
					s.mu.Lock()
					s.last, s.lastRaw = req, string(body)
					s.mu.Unlock()
					if !answer(conn, req) {
						return
					}
				}
			}()
		}
	}()
	return s
}

const okJSON = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"

func answerOK(conn net.Conn, _ *http.Request) bool {
	_, err := conn.Write([]byte(okJSON))
	return err == nil
}

func newTestClient(t *testing.T, url string, to config.Timeouts, opts Options) *Client {
	t.Helper()
	if to == (config.Timeouts{}) {
		to = config.Timeouts{Connect: time.Second, FirstByte: 5 * time.Second, Idle: 5 * time.Second, Total: 10 * time.Second}
	}
	opts.Getenv = func(string) string { return "sk-test-123456" }
	c, err := New("test", config.Engine{URL: url, APIKeyEnv: "KEY", Timeouts: to}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdle)
	return c
}

func decodeErr(status int, body []byte) *apierr.Error {
	return &apierr.Error{Kind: apierr.BadGateway, Message: "status " + http.StatusText(status) + ": " + string(body)}
}

var testHeader = func() *Header {
	h, err := NewHeader(http.Header{"Content-Type": {"application/json"}, "Anthropic-Version": {"2023-06-01"}})
	if err != nil {
		panic(err)
	}
	return h
}()

// call does one request and reads its whole body.
func call(ctx context.Context, c *Client, stream bool) (string, error) {
	resp, err := c.Do(ctx, &Request{Path: "/messages", Header: testHeader, Body: []byte(`{"a":1}`), Stream: stream, DecodeError: decodeErr})
	if err != nil {
		return "", err
	}
	defer resp.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), resp.Err(err)
}

func TestH1RequestAndReuse(t *testing.T) {
	s := newRawServer(t, answerOK)
	for _, tt := range []struct {
		auth, wantLine string
	}{{"", "Bearer sk-test-123456"}, {"X-Api-Key", "sk-test-123456"}} {
		c := newTestClient(t, "http://"+s.addr+"/v1", config.Timeouts{}, Options{AuthHeader: tt.auth})
		for i := range 5 {
			got, err := call(context.Background(), c, false)
			if err != nil || got != `{"ok":true}` {
				t.Fatalf("request %d: got %q %v", i, got, err)
			}
		}
		s.mu.Lock()
		req, body := s.last, s.lastRaw
		s.mu.Unlock()
		name := tt.auth
		if name == "" {
			name = "Authorization"
		}
		if req.URL.Path != "/v1/messages" || req.Method != http.MethodPost || body != `{"a":1}` ||
			req.Header.Get(name) != tt.wantLine || req.Header.Get("Anthropic-Version") != "2023-06-01" ||
			req.Host != s.addr {
			t.Errorf("got %s %s host %q header %v body %q", req.Method, req.URL, req.Host, req.Header, body)
		}
		if c.InFlight() != 0 {
			t.Errorf("got %d in flight after the calls, want 0", c.InFlight())
		}
	}
	if n := s.conns.Load(); n != 2 {
		t.Errorf("got %d connections for two clients of 5 sequential requests, want 2", n)
	}
}

// TestH1RetriesIdleClosed: an engine that closes a kept-alive connection while it is idle (a
// keep-alive timeout shorter than ours) costs a retry on a new connection, not an error.
func TestH1RetriesIdleClosed(t *testing.T) {
	s := newRawServer(t, func(conn net.Conn, req *http.Request) bool {
		answerOK(conn, req)
		return false // close without saying so
	})
	c := newTestClient(t, "http://"+s.addr, config.Timeouts{}, Options{})
	for i := range 3 {
		if got, err := call(context.Background(), c, false); err != nil || got != `{"ok":true}` {
			t.Fatalf("request %d: got %q %v", i, got, err)
		}
		time.Sleep(10 * time.Millisecond) // let the close arrive
	}
	if n := s.conns.Load(); n != 3 {
		t.Errorf("got %d connections, want 3", n)
	}
}

func TestH1ErrorStatus(t *testing.T) {
	s := newRawServer(t, func(conn net.Conn, _ *http.Request) bool {
		_, _ = conn.Write([]byte("HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nContent-Length: 4\r\n\r\nslow"))
		return true
	})
	c := newTestClient(t, "http://"+s.addr, config.Timeouts{}, Options{})
	_, err := call(context.Background(), c, false)
	var ae *apierr.Error
	// The body is plain text, not an API error: its words stay out of the client's message.
	if !errors.As(err, &ae) || ae.RetryAfter != 3*time.Second || strings.Contains(ae.Message, "slow") ||
		!strings.Contains(ae.Message, "429") {
		t.Fatalf("got %v, want the decoded error with retry-after 3s, naming 429 and not the body", err)
	}
	// The error body was read whole: the connection is reused.
	if _, err := call(context.Background(), c, false); err == nil || s.conns.Load() != 1 {
		t.Errorf("got %v on %d connections, want the error again on 1", err, s.conns.Load())
	}
}

// TestH1Timeouts checks each bound on the http:// path, and that the engine sees the
// connection closed when one is hit.
func TestH1Timeouts(t *testing.T) {
	tests := []struct {
		name   string
		to     config.Timeouts
		stream bool
		answer func(net.Conn)
		want   string
	}{
		{"first byte", config.Timeouts{Connect: time.Second, FirstByte: 50 * time.Millisecond, Idle: time.Second, Total: 5 * time.Second}, false,
			func(conn net.Conn) { time.Sleep(2 * time.Second) }, "no response within 50ms"},
		{"first body byte of a stream", config.Timeouts{Connect: time.Second, FirstByte: 50 * time.Millisecond, Idle: time.Second, Total: 5 * time.Second}, true,
			func(conn net.Conn) {
				_, _ = conn.Write([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"))
				time.Sleep(2 * time.Second)
			}, "no response within 50ms"},
		{"idle", config.Timeouts{Connect: time.Second, FirstByte: time.Second, Idle: 50 * time.Millisecond, Total: 5 * time.Second}, true,
			func(conn net.Conn) {
				_, _ = conn.Write([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n"))
				time.Sleep(2 * time.Second)
			}, "nothing received for 50ms"},
		{"total", config.Timeouts{Connect: time.Second, FirstByte: time.Second, Idle: time.Second, Total: 150 * time.Millisecond}, true,
			func(conn net.Conn) {
				_, _ = conn.Write([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"))
				for range 40 {
					if _, err := conn.Write([]byte("1\r\nx\r\n")); err != nil {
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}, "did not finish within 150ms"},
		{"idle after the headers, not streamed", config.Timeouts{Connect: time.Second, FirstByte: time.Second, Idle: 50 * time.Millisecond, Total: 5 * time.Second}, false,
			func(conn net.Conn) {
				_, _ = conn.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"))
				time.Sleep(2 * time.Second)
			}, "nothing received for 50ms"},
		{"total, not streamed", config.Timeouts{Connect: time.Second, FirstByte: time.Second, Idle: time.Second, Total: 100 * time.Millisecond}, false,
			func(conn net.Conn) {
				_, _ = conn.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"))
				time.Sleep(2 * time.Second)
			}, "did not finish within 100ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			closed := make(chan time.Time, 1)
			s := newRawServer(t, func(conn net.Conn, _ *http.Request) bool {
				tt.answer(conn)
				return false
			})
			_ = s
			// A second server that notices its client closing: for the first-byte case.
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go func() {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				defer conn.Close()
				br := bufio.NewReader(conn)
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				go tt.answer(conn)
				_, _ = io.Copy(io.Discard, br) // ends when the client closes
				closed <- time.Now()
			}()
			c := newTestClient(t, "http://"+ln.Addr().String(), tt.to, Options{})
			start := time.Now()
			_, err = call(context.Background(), c, tt.stream)
			var ae *apierr.Error
			if !errors.As(err, &ae) || ae.Kind != apierr.Timeout || !strings.Contains(ae.Message, tt.want) {
				t.Fatalf("got %v, want a timeout saying %q", err, tt.want)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("took %v", d)
			}
			select {
			case at := <-closed:
				if d := at.Sub(start); d > time.Second {
					t.Errorf("the engine saw the close after %v", d)
				}
			case <-time.After(2 * time.Second):
				t.Error("the engine never saw the connection close")
			}
		})
	}
}

// TestH1CancelClosesConnection: the client's cancel reaches the engine (its connection closes)
// within 100 ms, and the call returns the context's error: early in the call, when the watchdog
// checks the context, and later, when it watches it.
func TestH1CancelClosesConnection(t *testing.T) {
	for _, after := range []time.Duration{watchDelay / 2, 3 * watchDelay} {
		t.Run(after.String(), func(t *testing.T) { testH1Cancel(t, after) })
	}
}

func testH1Cancel(t *testing.T, after time.Duration) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	closed := make(chan time.Time, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		br := bufio.NewReader(conn)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		_, _ = conn.Write([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n"))
		_, _ = io.Copy(io.Discard, br)
		closed <- time.Now()
	}()
	c := newTestClient(t, "http://"+ln.Addr().String(), config.Timeouts{}, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := call(ctx, c, true)
		errc <- err
	}()
	time.Sleep(after)
	at := time.Now()
	cancel()
	select {
	case got := <-closed:
		// watchDelay (50 ms) at most; the 100 ms promised, with room for a loaded machine.
		if d := got.Sub(at); d > 100*time.Millisecond+watchDelay {
			t.Errorf("the engine saw the cancel after %v, want within 100ms", d)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the engine never saw the cancel")
	}
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}

// TestH1PooledResponsesUnderRace runs many short calls at once, some timing out, some
// canceled, so that the race detector sees the watchdog and the cancel hook of pooled Responses
// meet their reuse.
func TestH1PooledResponsesUnderRace(t *testing.T) {
	var n atomic.Int32
	s := newRawServer(t, func(conn net.Conn, _ *http.Request) bool {
		if n.Add(1)%3 == 0 {
			time.Sleep(30 * time.Millisecond) // past the first-byte bound
		}
		_, err := conn.Write([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n"))
		return err == nil
	})
	c := newTestClient(t, "http://"+s.addr, config.Timeouts{Connect: time.Second, FirstByte: 20 * time.Millisecond, Idle: time.Second, Total: time.Second}, Options{})
	var wg sync.WaitGroup
	var ok, timeouts atomic.Int32
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				ctx, cancel := context.WithCancel(context.Background())
				if (g+i)%7 == 0 {
					time.AfterFunc(time.Duration(i%5)*time.Millisecond, cancel)
				}
				got, err := call(ctx, c, i%2 == 0)
				cancel()
				var ae *apierr.Error
				switch {
				case err == nil && got == "ab":
					ok.Add(1)
				case errors.As(err, &ae) && ae.Kind == apierr.Timeout, errors.Is(err, context.Canceled):
					timeouts.Add(1)
				default:
					t.Errorf("got %q %v", got, err)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() == 0 || ok.Load()+timeouts.Load() != 200 {
		t.Errorf("got %d ok and %d timeouts or cancels, want 200 together", ok.Load(), timeouts.Load())
	}
	if c.InFlight() != 0 {
		t.Errorf("got %d in flight, want 0", c.InFlight())
	}
}

// fastServer answers every read with okJSON, allocating nothing, so that allocation counts in
// this process are the client's.
func fastServer(t testing.TB) string {
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
				buf := make([]byte, 4096)
				answer := []byte(okJSON)
				for {
					if _, err := conn.Read(buf); err != nil {
						return
					}
					if _, err := conn.Write(answer); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestH1Allocs guards the http:// path's allocations per call (request written, answer read,
// connection back in the pool): the Response is pooled, the request head built in a pooled
// buffer; a call that ends within watchDelay has its client's context checked by the watchdog,
// not watched (context.AfterFunc's two allocations, and two more for the context's first child).
func TestH1Allocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race (sync.Pool drops items on purpose)")
	}
	c := newTestClient(t, "http://"+fastServer(t), config.Timeouts{}, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	buf := make([]byte, 64)
	req := &Request{Path: "/messages", Header: testHeader, Body: []byte(`{"a":1}`), DecodeError: decodeErr}
	n := testing.AllocsPerRun(200, func() {
		resp, err := c.Do(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := resp.Body.Read(buf); err != nil {
				break
			}
		}
		resp.Close()
	})
	if n > 0 {
		t.Errorf("got %v allocations per call, want none", n)
	}
}

func BenchmarkH1Call(b *testing.B) {
	addr := fastServer(b)
	c, err := New("bench", config.Engine{URL: "http://" + addr,
		Timeouts: config.Timeouts{Connect: time.Second, FirstByte: 5 * time.Second, Idle: 5 * time.Second, Total: 10 * time.Second}}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.CloseIdle()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	buf := make([]byte, 64)
	req := &Request{Path: "/messages", Header: testHeader, Body: []byte(`{"a":1}`), DecodeError: decodeErr}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := c.Do(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := resp.Body.Read(buf); err != nil {
				break
			}
		}
		resp.Close()
	}
}
