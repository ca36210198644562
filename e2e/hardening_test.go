package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/fakeclock"
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/syncbuf"
)

// The listener's protections, driven over real sockets as a stranger would: slow clients, bodies
// declared and never sent, too many connections, bodies that pin memory, headers over the limit.

// hardKey is the API key of the hardened gateway's config; hardConfig holds its hash.
const hardKey = "l0-hardening-test-key"

func hardConfig(t testing.TB, server string) *config.Config {
	return parseConfig(t, fmt.Sprintf(`
server:
%s
keys:
  - name: tester
    hash: %s
`, server, authHash(hardKey)))
}

// serveListener serves cfg the way `layer0 serve` does — the gateway's own capped listener and
// the configuration's listener timeouts — and returns the gateway, its address, and the log.
func serveListener(t testing.TB, cfg *config.Config, opts ...layer0.Option) (*layer0.Gateway, string, *syncbuf.Buffer) {
	t.Helper()
	logs := &syncbuf.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	g, err := layer0.New(cfg, append([]layer0.Option{layer0.WithLogger(logger)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := g.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.HTTPServer(g, server.ListenOptions{ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
		IdleTimeout: cfg.Server.IdleTimeout, MaxHeaderBytes: cfg.Limits.MaxHeaderBytes, Logger: logger,
		HTTP1: frontOf(t, cfg)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.Serve(ctx, srv, ln, time.Second, nil) }()
	t.Cleanup(func() {
		cancel()
		<-done
		g.Close()
	})
	return g, ln.Addr().String(), logs
}

// forFronts runs f once with each server of cleartext HTTP/1.1, in subtests named after them:
// the listener's protections hold whichever serves the connections.
func forFronts(t *testing.T, f func(t *testing.T)) {
	for _, front := range []string{server.HTTP1Lean, server.HTTP1NetHTTP} {
		t.Run(front, f)
	}
}

// frontOf is the server of cleartext HTTP/1.1 a test serves with: the one its forFronts subtest
// is named after, else the configuration's.
func frontOf(t testing.TB, cfg *config.Config) string {
	if strings.HasSuffix(t.Name(), "/"+server.HTTP1NetHTTP) {
		return server.HTTP1NetHTTP
	}
	if strings.HasSuffix(t.Name(), "/"+server.HTTP1Lean) {
		return server.HTTP1Lean
	}
	return cfg.Server.HTTP1
}

// closedWithin reads c until the server closes it, failing when that takes longer than limit;
// it returns what the server sent.
func closedWithin(t *testing.T, c net.Conn, limit time.Duration) string {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(limit))
	b, err := io.ReadAll(c)
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("the connection was still open after %s (read %q)", limit, b)
		}
		// A reset after the answer is a close too.
	}
	return string(b)
}

// healthy checks the server still answers /healthz.
func healthy(t *testing.T, addr string) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("healthz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %d", resp.StatusCode)
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// statusOf parses the status code of a raw HTTP/1.1 answer.
func statusOf(t *testing.T, raw string) int {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(raw)), nil)
	if err != nil {
		t.Fatalf("not an HTTP answer: %v: %q", err, raw)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// jsonError parses a raw HTTP/1.1 answer whose body must be an Anthropic-format JSON error, and
// returns its status and error type.
func jsonError(t *testing.T, raw string) (int, string, http.Header) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(raw)), nil)
	if err != nil {
		t.Fatalf("not an HTTP answer: %v: %q", err, raw)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Type != "error" || e.Error.Type == "" || e.Error.Message == "" {
		t.Fatalf("status %d: body is not a JSON error (%v): %q", resp.StatusCode, err, body)
	}
	return resp.StatusCode, e.Error.Type, resp.Header
}

func TestSlowHeadersClosed(t *testing.T) {
	forFronts(t, func(t *testing.T) {
		t.Parallel()
		_, addr, _ := serveListener(t, hardConfig(t, "  read_header_timeout: 300ms"))
		c := dial(t, addr)
		// Headers one byte at a time, never finished.
		go func() {
			for _, b := range []byte("POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nX-Slow: ") {
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		closedWithin(t, c, 3*time.Second)
		healthy(t, addr)
	})
}

// A refused request is answered at once and the connection closed: the server does not wait for
// a body it will not read.
func TestRefusedBeforeBodyAnsweredAndClosed(t *testing.T) {
	forFronts(t, func(t *testing.T) {
		t.Parallel()
		_, addr, _ := serveListener(t, hardConfig(t, "  read_body_timeout: 30s"))
		c := dial(t, addr)
		fmt.Fprintf(c, "POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
		raw := closedWithin(t, c, 3*time.Second)
		status, typ, _ := jsonError(t, raw)
		if status != http.StatusUnauthorized || typ != "authentication_error" {
			t.Fatalf("got %d %s, want 401 authentication_error", status, typ)
		}
		if !strings.Contains(raw, "\r\nConnection: close\r\n") {
			t.Fatalf("no Connection: close in %q", raw)
		}
		healthy(t, addr)
	})
}

func TestDeclaredBodyNeverSent(t *testing.T) {
	forFronts(t, func(t *testing.T) {
		t.Parallel()
		_, addr, _ := serveListener(t, hardConfig(t, "  read_body_timeout: 700ms"))
		c := dial(t, addr)
		fmt.Fprintf(c, "POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", hardKey)
		start := time.Now()
		raw := closedWithin(t, c, 3*time.Second)
		if took := time.Since(start); took < 600*time.Millisecond {
			t.Fatalf("closed after %s, before the body timeout", took)
		}
		status, typ, _ := jsonError(t, raw)
		if status != http.StatusRequestTimeout || typ != "timeout_error" {
			t.Fatalf("got %d %s, want 408 timeout_error", status, typ)
		}
		healthy(t, addr)
	})
}

// An authenticated body sent at one byte every 100ms gets 408 at the whole-body deadline.
func TestBodySlowloris(t *testing.T) {
	forFronts(t, func(t *testing.T) {
		t.Parallel()
		_, addr, _ := serveListener(t, hardConfig(t, "  read_body_timeout: 1s"))
		c := dial(t, addr)
		body := `{"model":"sim","max_tokens":8,"messages":[{"role":"user","content":"hello there"}]}`
		fmt.Fprintf(c, "POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", hardKey, len(body))
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for i := 0; i < len(body); i++ {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				if _, err := c.Write([]byte{body[i]}); err != nil {
					return
				}
			}
		}()
		raw := closedWithin(t, c, 4*time.Second)
		if status, _, _ := jsonError(t, raw); status != http.StatusRequestTimeout {
			t.Fatalf("status %d, want 408", status)
		}
		healthy(t, addr)
	})
}

// Under the minimum rate a body is refused before the whole-body deadline: after the grace,
// the deadline moves by one second per min_body_rate bytes.
func TestBodyUnderMinimumRate(t *testing.T) {
	forFronts(t, func(t *testing.T) {
		if testing.Short() {
			t.Skip("waits for the rate's grace")
		}
		t.Parallel()
		_, addr, _ := serveListener(t, hardConfig(t, "  read_body_timeout: 60s\n  min_body_rate: 1000"))
		c := dial(t, addr)
		fmt.Fprintf(c, "POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n", hardKey)
		c.Write(bytes.Repeat([]byte(" "), 1000)) // one second's worth
		start := time.Now()
		raw := closedWithin(t, c, server.BodyRateGrace+4*time.Second)
		if took := time.Since(start); took < server.BodyRateGrace {
			t.Fatalf("closed after %s, inside the grace", took)
		}
		if status, _, _ := jsonError(t, raw); status != http.StatusRequestTimeout {
			t.Fatalf("status %d, want 408", status)
		}
	})
}

func TestConnectionCap(t *testing.T) {
	forFronts(t, func(t *testing.T) {
		t.Parallel()
		g, addr, logs := serveListener(t, hardConfig(t, "  max_connections: 4"))
		_ = g
		// Four idle connections take every slot…
		held := make([]net.Conn, 4)
		for i := range held {
			held[i] = dial(t, addr)
			fmt.Fprintf(held[i], "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n") // accepted and served: the slot is taken
			br := bufio.NewReader(held[i])
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		// …so a fifth gets a 503 in JSON and is closed.
		c := dial(t, addr)
		raw := closedWithin(t, c, 3*time.Second)
		status, typ, h := jsonError(t, raw)
		if status != http.StatusServiceUnavailable || typ != "overloaded_error" || h.Get("Retry-After") == "" {
			t.Fatalf("got %d %s retry-after %q, want 503 overloaded_error with retry-after", status, typ, h.Get("Retry-After"))
		}
		if !strings.Contains(logs.String(), `"msg":"connection refused: the listener is at max_connections"`) {
			t.Fatalf("no log line for the refusal: %s", logs.String())
		}
		// One slot freed: the server answers again.
		held[0].Close()
		deadline := time.Now().Add(3 * time.Second)
		for {
			c := http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			resp, err := c.Get("http://" + addr + "/healthz")
			if err == nil && resp.StatusCode == http.StatusOK {
				resp.Body.Close()
				break
			}
			if resp != nil {
				resp.Body.Close()
			}
			if time.Now().After(deadline) {
				t.Fatalf("no slot freed after a close: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		// The refusal is counted (the fifth; the wait for a free slot may have been refused too).
		// The scrape's own connection may meet the cap while the probe's closed one is still
		// being let go of server-side (a 503 instead of the metrics): it is tried again.
		for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			v, ok, err := tryMetric("http://"+addr, "layer0_connections_refused_total")
			if err == nil && ok {
				if v < 1 {
					t.Fatalf("layer0_connections_refused_total %v, want at least 1", v)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("layer0_connections_refused_total not scraped: found %v, %v", ok, err)
			}
		}
	})
}

// Bodies that declare the maximum size and send one byte hold what they sent, not what they
// declared: 100 of them (3.2 GB declared) must keep the heap under 64 MiB more.
func TestDeclaredBodiesDoNotPinMemory(t *testing.T) {
	forFronts(t, func(t *testing.T) {
		g, addr, _ := serveListener(t, hardConfig(t, "  read_body_timeout: 30s"))
		const n = 100
		const bound = 64 << 20
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := 0; i < n; i++ {
			c := dial(t, addr)
			fmt.Fprintf(c, "POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", hardKey, 32<<20)
		}
		// Wait until every body is being read.
		deadline := time.Now().Add(10 * time.Second)
		for g.BodyBytesInFlight() < n*16<<10 {
			if time.Now().After(deadline) {
				t.Fatalf("bodies in flight hold %d bytes, want %d connections reading", g.BodyBytesInFlight(), n)
			}
			time.Sleep(10 * time.Millisecond)
		}
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
		t.Logf("%d connections declaring 32 MiB and sending 1 byte: heap +%d KiB, bodies hold %d KiB", n, grew>>10, g.BodyBytesInFlight()>>10)
		if grew > bound {
			t.Fatalf("heap grew by %d bytes with %d one-byte bodies, over the bound of %d", grew, n, bound)
		}
	})
}

// When the bodies in flight hold the whole budget, one more is refused with 503 and retry-after.
func TestBodyBudget(t *testing.T) {
	forFronts(t, func(t *testing.T) {
		t.Parallel()
		g, addr, _ := serveListener(t, hardConfig(t, "  max_body_bytes: 65536\n  max_body_bytes_in_flight: 65536"))
		for i := 0; i < 4; i++ { // 4 × 16 KiB: the budget
			c := dial(t, addr)
			fmt.Fprintf(c, "POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: %s\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n{", hardKey)
		}
		deadline := time.Now().Add(5 * time.Second)
		for g.BodyBytesInFlight() < 4*16<<10 {
			if time.Now().After(deadline) {
				t.Fatalf("bodies hold %d bytes", g.BodyBytesInFlight())
			}
			time.Sleep(10 * time.Millisecond)
		}
		c := dial(t, addr)
		body := `{"model":"sim","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
		fmt.Fprintf(c, "POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", hardKey, len(body), body)
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("got %d retry-after %q, want 503 with retry-after", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	})
}

// Headers over the limit, and requests net/http cannot parse, get JSON errors too.
func TestUnparsableRequestsGetJSON(t *testing.T) {
	forFronts(t, func(t *testing.T) {
		t.Parallel()
		_, addr, _ := serveListener(t, hardConfig(t, "  read_header_timeout: 2s"))
		for name, req := range map[string]string{
			"headers over the limit": "GET /v1/models HTTP/1.1\r\nHost: localhost\r\nX-Big: " + strings.Repeat("a", 70<<10) + "\r\n\r\n",
			"bad request line":       "GARBAGE\r\n\r\n",
			"bad header":             "GET / HTTP/1.1\r\nHost: localhost\r\nno colon here\r\n\r\n",
			"unknown version":        "GET /v1/models HTTP/9.9\r\nHost: localhost\r\n\r\n",
		} {
			c := dial(t, addr)
			io.WriteString(c, req)
			raw := closedWithin(t, c, 3*time.Second)
			status, typ, _ := jsonError(t, raw)
			if name == "headers over the limit" && (status != http.StatusRequestHeaderFieldsTooLarge || typ != "request_too_large") {
				t.Fatalf("%s: got %d %s, want 431 request_too_large", name, status, typ)
			}
			if name == "unknown version" && status != http.StatusHTTPVersionNotSupported {
				t.Fatalf("%s: got %d, want 505", name, status)
			}
			if name != "headers over the limit" && name != "unknown version" && status != http.StatusBadRequest {
				t.Fatalf("%s: got %d, want 400", name, status)
			}
		}
	})
}

// A client that sends half its body and leaves is a canceled request, not a 400.
func TestClientGoneMidBodyIsCanceled(t *testing.T) {
	forFronts(t, func(t *testing.T) {
		t.Parallel()
		_, addr, _ := serveListener(t, hardConfig(t, ""))
		before, _ := findMetric(t, "http://"+addr, "layer0_requests_total", `outcome="canceled"`)
		c := dial(t, addr)
		fmt.Fprintf(c, "POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":", hardKey)
		time.Sleep(100 * time.Millisecond)
		c.Close()
		deadline := time.Now().Add(3 * time.Second)
		for {
			if v, _ := findMetric(t, "http://"+addr, "layer0_requests_total", `outcome="canceled"`); v == before+1 {
				break
			}
			if time.Now().After(deadline) {
				inv, _ := findMetric(t, "http://"+addr, "layer0_requests_total", `outcome="invalid"`)
				t.Fatalf("canceled not counted; invalid=%v", inv)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// A client that sends part of its body and half-closes (or leaves: the server cannot tell the
// two apart) is a canceled request: it gets no status line at all, never the server's implicit
// 200 with an empty body, and the connection ends.
func TestClientHalfClosedMidBodyGetsNoAnswer(t *testing.T) {
	forFronts(t, func(t *testing.T) {
		t.Parallel()
		_, addr, _ := serveListener(t, hardConfig(t, ""))
		for _, enc := range []string{"Content-Length: 1000\r\n", "Transfer-Encoding: chunked\r\n"} {
			c := dial(t, addr)
			fmt.Fprintf(c, "POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: %s\r\nContent-Type: application/json\r\n%s\r\n", hardKey, enc)
			if strings.HasPrefix(enc, "Transfer") {
				fmt.Fprintf(c, "9\r\n{\"model\":")
			} else {
				fmt.Fprintf(c, "{\"model\":")
			}
			_ = c.(*net.TCPConn).CloseWrite()
			raw := closedWithin(t, c, 3*time.Second)
			if len(raw) != 0 {
				t.Errorf("%s: the half-closed request got an answer:\n%q", enc, raw)
			}
		}
		healthy(t, addr)
	})
}

// A client that stops reading a stream is disconnected after the write timeout instead of
// holding the request forever.
func TestStalledReaderDisconnected(t *testing.T) {
	forFronts(t, func(t *testing.T) {
		t.Parallel()
		cfg := parseConfig(t, fmt.Sprintf(`
server: {write_timeout: 500ms}
engines: {echo: {kind: sim, sim: {mode: echo}}}
models: {sim: {engines: [echo]}}
keys: [{name: tester, hash: %s}]
`, authHash(hardKey)))
		_, addr, _ := serveListener(t, cfg)
		d := net.Dialer{}
		conn, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.(*net.TCPConn).SetReadBuffer(4096)
		// The echo engine repeats 750 KB of words: tens of megabytes of events, more than any socket
		// buffers hold.
		body := `{"model":"sim","max_tokens":1000000,"stream":true,"messages":[{"role":"user","content":"` +
			strings.Repeat("word ", 150000) + `"}]}`
		fmt.Fprintf(conn, "POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nX-Api-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", hardKey, len(body), body)
		// Never read. The request must end (stream error or canceled) within seconds.
		base := "http://" + addr
		deadline := time.Now().Add(15 * time.Second)
		// The gateway's 500ms write timeout covers /metrics too: on a busy machine a scrape can
		// be cut off, and is tried again.
		outcome := func(o string) float64 {
			v, _, err := tryMetric(base, "layer0_requests_total", `model="sim"`, `outcome="`+o+`"`)
			if err != nil {
				return -1
			}
			return v
		}
		for {
			v, w, o := outcome("stream_error"), outcome("canceled"), outcome("ok")
			if outcome("invalid") > 0 {
				t.Fatal("the request was refused")
			}
			if v >= 0 && w >= 0 && o >= 0 && v+w+o >= 1 {
				if o >= 1 {
					t.Skip("the whole answer fit in the socket buffers; nothing stalled")
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("a stream to a client that stopped reading was still running after 15s")
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

func TestNegotiateIgnoresHost(t *testing.T) {
	t.Parallel()
	_, addr, _ := serveListener(t, hardConfig(t, ""))
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/layer/negotiate?model=sim", nil)
	req.Host = "203.0.113.9:8080" // an address: a name would be refused on loopback
	req.Header.Set("X-Api-Key", hardKey)
	c := http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusFound || strings.Contains(loc, "203.0.113.9") || loc != "/v1/messages" {
		t.Fatalf("got %d Location %q, want 302 to /v1/messages", resp.StatusCode, loc)
	}
	req, _ = http.NewRequest(http.MethodPut, "http://"+addr+"/v1/layer/negotiate?model=sim", nil)
	req.Header.Set("X-Api-Key", hardKey)
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("PUT negotiate: %d, want 405", resp.StatusCode)
	}
}

func TestVocabErrorsInJSON(t *testing.T) {
	t.Parallel()
	_, addr, _ := serveListener(t, hardConfig(t, ""))
	for _, tc := range []struct {
		method, path string
		want         int
	}{{"GET", "/v1/binary/vocab/0000", 404}, {"POST", "/v1/binary/vocab", 405}} {
		c := dial(t, addr)
		fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", tc.method, tc.path)
		raw := closedWithin(t, c, 3*time.Second)
		if status, _, _ := jsonError(t, raw); status != tc.want {
			t.Fatalf("%s %s: %d, want %d", tc.method, tc.path, status, tc.want)
		}
	}
}

// With an admin address the metrics leave the public listener.
func TestAdminListener(t *testing.T) {
	t.Parallel()
	g, addr, _ := serveListener(t, hardConfig(t, "  admin_addr: 127.0.0.1:0"))
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("public /metrics: %d, want 404", resp.StatusCode)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: g.AdminHandler(), ReadHeaderTimeout: time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends at Close
	defer srv.Close()
	resp, err = http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "layer0_connections_refused_total") {
		t.Fatalf("admin /metrics: %d", resp.StatusCode)
	}
	resp, err = http.Get("http://" + ln.Addr().String() + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("admin /v1/models: %d, want 404", resp.StatusCode)
	}
}

// The Anthropic and OpenAI reset headers of one answer describe the same instant: the time the
// limit is full again, by both APIs' definitions. Checked on answers and refusals, with time
// moving between them (a clock the test moves, and Date from the same clock is not available, so
// the Anthropic instant is compared with the clock's now).
func TestRateLimitResetHeadersAgree(t *testing.T) {
	t.Parallel()
	cfg := parseConfig(t, fmt.Sprintf(`
keys:
  - name: tester
    hash: %s
    limits: {requests_per_minute: 5, input_tokens_per_minute: 100000}
`, authHash(hardKey)))
	clock := fakeclock.New(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	_, addr, _ := serveListener(t, cfg, layer0.WithClock(clock.Now))
	body := `{"model":"sim","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`
	steps := []time.Duration{0, 0, 0, 0, 0, 0, 7 * time.Second, 41 * time.Second, 0, 0, 3 * time.Second}
	for i, step := range steps {
		clock.Advance(step)
		for _, path := range []string{"/v1/messages", "/v1/chat/completions"} {
			req, _ := http.NewRequest(http.MethodPost, "http://"+addr+path, strings.NewReader(body))
			req.Header.Set("X-Api-Key", hardKey)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			now := clock.Now()
			for _, dim := range [][2]string{{"Requests", "Requests"}, {"Input-Tokens", "Tokens"}} {
				a := resp.Header.Get("Anthropic-Ratelimit-" + dim[0] + "-Reset")
				o := resp.Header.Get("X-Ratelimit-Reset-" + dim[1])
				at, err := time.Parse(time.RFC3339, a)
				if err != nil {
					t.Fatalf("step %d %s (%d): anthropic %s reset %q: %v", i, path, resp.StatusCode, dim[0], a, err)
				}
				in, err := time.ParseDuration(o)
				if err != nil {
					t.Fatalf("step %d %s (%d): openai %s reset %q: %v", i, path, resp.StatusCode, dim[1], o, err)
				}
				// RFC 3339 has whole seconds, rounded up: the two agree within a second.
				if d := at.Sub(now) - in; d < -time.Second || d > time.Second {
					t.Fatalf("step %d %s (%d): %s: anthropic reset %s is now+%s, openai reset %s",
						i, path, resp.StatusCode, dim[0], a, at.Sub(now), in)
				}
				ar := resp.Header.Get("Anthropic-Ratelimit-" + dim[0] + "-Remaining")
				or := resp.Header.Get("X-Ratelimit-Remaining-" + dim[1])
				if ar != or {
					t.Fatalf("step %d %s: %s remaining: anthropic %s, openai %s", i, path, dim[0], ar, or)
				}
			}
		}
	}
}

// An overloaded answer's status line has a reason phrase, not net/http's "status code 529".
func TestStatusLine529(t *testing.T) {
	forFronts(t, func(t *testing.T) {
		t.Parallel()
		cfg := parseConfig(t, fmt.Sprintf(`
engines: {busy: {kind: sim, sim: {fail: {status: 529}}}}
models: {sim: {engines: [busy]}}
keys: [{name: tester, hash: %s}]
`, authHash(hardKey)))
		_, addr, _ := serveListener(t, cfg)
		c := dial(t, addr)
		body := `{"model":"sim","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
		fmt.Fprintf(c, "POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nX-Api-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", hardKey, len(body), body)
		raw := closedWithin(t, c, 5*time.Second)
		if !strings.HasPrefix(raw, "HTTP/1.1 529 Overloaded\r\n") {
			t.Fatalf("status line: %q", strings.SplitN(raw, "\r\n", 2)[0])
		}
		if status, typ, _ := jsonError(t, raw); status != 529 || typ != "overloaded_error" {
			t.Fatalf("got %d %s", status, typ)
		}
	})
}

// Bodies that outgrow the first pooled buffer, many at once: each request is answered from its
// own body (the echo engine repeats it), never from another request's bytes.
func TestGrownBodiesStayTheirOwn(t *testing.T) {
	forFronts(t, func(t *testing.T) {
		t.Parallel()
		cfg := parseConfig(t, fmt.Sprintf(`
engines: {echo: {kind: sim, sim: {mode: echo}}}
models: {sim: {engines: [echo]}}
keys: [{name: tester, hash: %s}]
`, authHash(hardKey)))
		_, addr, _ := serveListener(t, cfg)
		c := &http.Client{Timeout: 20 * time.Second}
		errs := make(chan error, 64)
		for g := 0; g < 8; g++ {
			go func() {
				for i := 0; i < 8; i++ {
					marker := fmt.Sprintf("marker%dx%d", g, i)
					text := marker + strings.Repeat(" filler", 8000) // about 56 KB: the buffer grows twice
					body := `{"model":"sim","max_tokens":4,"messages":[{"role":"user","content":"` + text + `"}]}`
					req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/messages", strings.NewReader(body))
					req.Header.Set("X-Api-Key", hardKey)
					req.Header.Set("Content-Type", "application/json")
					resp, err := c.Do(req)
					if err != nil {
						errs <- err
						continue
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), marker) {
						errs <- fmt.Errorf("%s: %d %.200s", marker, resp.StatusCode, b)
						continue
					}
					errs <- nil
				}
			}()
		}
		for n := 0; n < 64; n++ {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	})
}

// h2cHello is what an h2c client with prior knowledge sends before its first request: the
// preface and an empty SETTINGS frame.
const h2cHello = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\x00\x00\x00\x04\x00\x00\x00\x00\x00"

// Strangers who open connections and send nothing, or only h2c's preface and SETTINGS, never
// hold the listener: they take at most their share of max_connections (the oldest making room
// for the next), are closed after new_connection_timeout, and clients that send requests (health
// checks included) still get in. A connection that sent a request keeps its idle timeout.
func TestNewConnectionsBounded(t *testing.T) {
	forFronts(t, func(t *testing.T) {
		t.Parallel()
		_, addr, logs := serveListener(t, hardConfig(t, `  max_connections: 20
  max_new_connections: 5
  new_connection_timeout: 1500ms
  max_new_connections_per_source: -1`))
		// A client that sent a request before the strangers came.
		active := dial(t, addr)
		br := bufio.NewReader(active)
		get := func() {
			t.Helper()
			fmt.Fprintf(active, "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
			_ = active.SetReadDeadline(time.Now().Add(3 * time.Second))
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("the active connection: %v", err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		get()
		// And one over h2c (prior knowledge), which the lean server hands to the HTTP/2 server.
		var protos http.Protocols
		protos.SetUnencryptedHTTP2(true)
		h2c := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{Protocols: &protos}}
		defer h2c.CloseIdleConnections()
		h2cGet := func() bool {
			t.Helper()
			reused := false
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }})
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/healthz", nil)
			resp, err := h2c.Do(req)
			if err != nil {
				t.Fatalf("h2c: %v", err)
			}
			resp.Body.Close()
			if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK {
				t.Fatalf("h2c: HTTP/%d %d, want HTTP/2 200", resp.ProtoMajor, resp.StatusCode)
			}
			return reused
		}
		h2cGet()
		// Twenty strangers, as many as max_connections: half idle, half h2c hello only.
		strangers := make([]net.Conn, 20)
		for i := range strangers {
			strangers[i] = dial(t, addr)
			if i%2 == 1 {
				io.WriteString(strangers[i], h2cHello)
			}
		}
		// Real clients still get in, on new connections.
		for range 3 {
			c := http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			resp, err := c.Get("http://" + addr + "/healthz")
			if err != nil {
				t.Fatalf("healthz beside the strangers: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("healthz beside the strangers: %d", resp.StatusCode)
			}
		}
		// Every stranger is gone by the timeout (with slack), evicted or timed out.
		for _, c := range strangers {
			closedWithin(t, c, 4*time.Second)
		}
		// The active connections outlived new_connection_timeout and still serve.
		get()
		if !h2cGet() {
			t.Error("the h2c connection that sent a request was closed at new_connection_timeout")
		}
		if !strings.Contains(logs.String(), "made room at max_new_connections") {
			t.Fatalf("no log line for the evictions: %s", logs.String())
		}
	})
}

// One address may hold only max_new_connections_per_source connections that sent no request;
// the next gets a JSON 503 at once, and a slot frees when one of them sends a request.
func TestNewConnectionsPerSource(t *testing.T) {
	forFronts(t, func(t *testing.T) {
		t.Parallel()
		_, addr, _ := serveListener(t, hardConfig(t, `  max_new_connections_per_source: 3
  new_connection_timeout: 30s`))
		held := make([]net.Conn, 3)
		for i := range held {
			held[i] = dial(t, addr)
		}
		time.Sleep(100 * time.Millisecond) // the three are accepted before the fourth
		raw := closedWithin(t, dial(t, addr), 3*time.Second)
		status, typ, h := jsonError(t, raw)
		if status != http.StatusServiceUnavailable || typ != "overloaded_error" || h.Get("X-Error-Code") != "TOO_MANY_CONNECTIONS" {
			t.Fatalf("the fourth: %d %s %q, want 503 overloaded_error TOO_MANY_CONNECTIONS", status, typ, h.Get("X-Error-Code"))
		}
		// One of the three sends a request: it is no longer new, and another gets in.
		fmt.Fprintf(held[0], "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(held[0]), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		healthy(t, addr)
	})
}

// rawAnswer sends one raw request on a new connection and returns the answer's status, its
// X-Error-Code and its body.
func rawAnswer(t *testing.T, addr, req string) (int, string, string) {
	t.Helper()
	c := dial(t, addr)
	io.WriteString(c, req)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", req, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Error-Code"), string(b)
}

// DNS rebinding: a page whose name an attacker points at 127.0.0.1 reaches a loopback listener
// (and the admin listener) as a same-origin request with that name in Host. They answer only for
// localhost, IP addresses and server.allowed_hosts; any other name gets 403 in the client's format.
func TestHostCheckedOnLoopbackAndAdmin(t *testing.T) {
	forFronts(t, func(t *testing.T) {
		t.Parallel()
		cfg := hardConfig(t, "  allowed_hosts: [layer0.internal]")
		g, addr, _ := serveListener(t, cfg)
		_, port, _ := net.SplitHostPort(addr)
		aln, err := g.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		admin := server.HTTPServer(g.AdminHandler(), server.ListenOptions{ReadHeaderTimeout: time.Second, HTTP1: frontOf(t, cfg)})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- server.Serve(ctx, admin, aln, time.Second, nil) }()
		defer func() { cancel(); <-done }()
		for _, tc := range []struct {
			addr, path, host string
			want             int
		}{
			{addr, "/healthz", "attacker.example", 403},
			{addr, "/healthz", "attacker.example:" + port, 403},
			{addr, "/v1/models", "localhost.attacker.example", 403},
			{aln.Addr().String(), "/config", "attacker.example", 403},
			{addr, "/healthz", "localhost:" + port, 200},
			{addr, "/healthz", "127.0.0.1:" + port, 200},
			{addr, "/healthz", "[::1]:" + port, 200},
			{addr, "/healthz", "LAYER0.internal.", 200},
			{aln.Addr().String(), "/config", "localhost", 200},
			{aln.Addr().String(), "/healthz", "10.1.2.3:9090", 200}, // a probe addressing the pod by IP
		} {
			status, code, body := rawAnswer(t, tc.addr, "GET "+tc.path+" HTTP/1.1\r\nHost: "+tc.host+"\r\nX-Api-Key: "+hardKey+"\r\nConnection: close\r\n\r\n")
			inFormat := strings.Contains(body, `"permission_error"`) || strings.Contains(body, `"code":"host_not_allowed"`)
			if status != tc.want || tc.want == 403 && (code != "HOST_NOT_ALLOWED" || !inFormat) {
				t.Errorf("GET %s Host %q: %d %s %s, want %d", tc.path, tc.host, status, code, body, tc.want)
			}
		}
		// In the client's own format: OpenAI's for its endpoint.
		body := `{"model":"sim","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`
		status, code, b := rawAnswer(t, addr, "POST /v1/chat/completions HTTP/1.1\r\nHost: attacker.example\r\nContent-Type: application/json\r\n"+
			"Authorization: Bearer "+hardKey+"\r\nContent-Length: "+fmt.Sprint(len(body))+"\r\n\r\n"+body)
		if status != 403 || code != "HOST_NOT_ALLOWED" || !strings.Contains(b, `"code":"host_not_allowed"`) {
			t.Errorf("OpenAI endpoint with a foreign Host: %d %s %s, want 403 host_not_allowed in OpenAI's format", status, code, b)
		}
	})
}

// A page on another site can make a browser POST text/plain, form or typeless bodies without
// asking first (a "simple request"); the API endpoints read only JSON and the binary protocol's
// type, and refuse the rest with 415 in the client's format before reading the body.
func TestAPIRequiresJSONContentType(t *testing.T) {
	forFronts(t, func(t *testing.T) {
		t.Parallel()
		_, addr, _ := serveListener(t, hardConfig(t, ""))
		body := `{"model":"sim","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`
		for _, tc := range []struct {
			path, ct string
			want     int
		}{
			{"/v1/messages", "text/plain;charset=UTF-8", 415},
			{"/v1/messages", "application/x-www-form-urlencoded", 415},
			{"/v1/messages", "multipart/form-data; boundary=x", 415},
			{"/v1/messages", "", 415},
			{"/v1/messages/count_tokens", "text/plain", 415},
			{"/v1/chat/completions", "text/plain", 415},
			{"/v1/messages", "application/json", 200},
			{"/v1/messages", "Application/JSON; charset=utf-8", 200},
			{"/v1/chat/completions", "application/json", 200},
		} {
			ct := ""
			if tc.ct != "" {
				ct = "Content-Type: " + tc.ct + "\r\n"
			}
			status, code, b := rawAnswer(t, addr, "POST "+tc.path+" HTTP/1.1\r\nHost: localhost\r\n"+ct+"X-Api-Key: "+hardKey+
				"\r\nAuthorization: Bearer "+hardKey+"\r\nConnection: close\r\nContent-Length: "+fmt.Sprint(len(body))+"\r\n\r\n"+body)
			if status != tc.want {
				t.Errorf("POST %s with Content-Type %q: %d %s, want %d", tc.path, tc.ct, status, b, tc.want)
				continue
			}
			if tc.want != 415 {
				continue
			}
			if code != "UNSUPPORTED_MEDIA_TYPE" {
				t.Errorf("POST %s with Content-Type %q: X-Error-Code %q, want UNSUPPORTED_MEDIA_TYPE", tc.path, tc.ct, code)
			}
			want := `"type":"invalid_request_error"`
			if tc.path == "/v1/chat/completions" {
				want = `"code":"unsupported_media_type"`
			}
			if !strings.Contains(b, want) {
				t.Errorf("POST %s with Content-Type %q: body %s, want %s in the client's format", tc.path, tc.ct, b, want)
			}
		}
	})
}
