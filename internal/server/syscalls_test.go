package server_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/h1"
	"github.com/layer0ai/layer0/internal/server"
)

// countingListener hands out connections that count their Read and Write calls: each is at
// least one system call (a Read that finds nothing waits in the poller and retries once). reads
// counts the Reads that returned bytes, calls all of them (an aborted or ended read too).
type countingListener struct {
	net.Listener
	reads, calls, writes atomic.Int64
	deadlines            atomic.Int64 // SetDeadline, SetReadDeadline and SetWriteDeadline calls
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err //nolint:wrapcheck // the listener's own error, as net/http expects it
	}
	return &countingConn{Conn: c, l: l}, nil
}

type countingConn struct {
	net.Conn
	l *countingListener
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.l.calls.Add(1)
	if n > 0 {
		c.l.reads.Add(1)
	}
	return n, err //nolint:wrapcheck // a connection's own error
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.l.writes.Add(1)
	return c.Conn.Write(p) //nolint:wrapcheck // a connection's own error
}

// SetReadDeadline counts a deadline change: a runtime timer change each.
func (c *countingConn) SetReadDeadline(t time.Time) error {
	c.l.deadlines.Add(1)
	return c.Conn.SetReadDeadline(t) //nolint:wrapcheck // a connection's own error
}

// SetWriteDeadline counts a deadline change.
func (c *countingConn) SetWriteDeadline(t time.Time) error {
	c.l.deadlines.Add(1)
	return c.Conn.SetWriteDeadline(t) //nolint:wrapcheck // a connection's own error
}

// SetDeadline counts a deadline change.
func (c *countingConn) SetDeadline(t time.Time) error {
	c.l.deadlines.Add(1)
	return c.Conn.SetDeadline(t) //nolint:wrapcheck // a connection's own error
}

// NetConn returns the wrapped connection (the lean server half-closes through it).
func (c *countingConn) NetConn() net.Conn { return c.Conn }

// TestSystemCallsPerRequest pins the client connection's system calls per keep-alive request on
// the lean server: one read for the request and one write for the whole answer — head and body
// of a JSON answer, head, every event and the chunked end of a stream whose events are ready
// together (the simulator without delays), and of a binary stream; a paced stream of 5 tokens
// (1 ms apart) in at most 5 writes, one per token, the head going with the first and the
// stream's end with the last. A write or read more per request (a head flushed alone, the
// chunked end after the last flush, a watch read per request) fails it. net/http's figures are logged beside them: it reads twice per request (its
// background read of the client's end) and writes 4 KiB at a time.
func TestSystemCallsPerRequest(t *testing.T) {
	const n = 20
	const prompt = `"messages":[{"role":"user","content":"Write a story about a lighthouse keeper."}]`
	tests := []struct {
		name, path, contentType string
		body                    []byte
		want                    string  // the end of a complete answer
		writes                  float64 // the most writes per request on the lean server
	}{
		{"sim-json", "/v1/messages", "application/json", []byte(`{"model":"sim","max_tokens":100,` + prompt + `}`), `}`, 1},
		{"sim-sse", "/v1/messages", "application/json", []byte(`{"model":"sim","max_tokens":100,"stream":true,` + prompt + `}`), `"message_stop"}` + "\n\n", 1},
		{"sim-openai-sse", "/v1/chat/completions", "application/json", []byte(`{"model":"sim","max_tokens":100,"stream":true,` + prompt + `}`), "[DONE]\n\n", 1},
		{"sim-binary-v1", "/v1/messages", "application/x-anthropic-binary", binaryV1("sim", "Write a story about a lighthouse keeper.", 100), "\x03\x00\x00", 1},
		{"paced-sse", "/v1/messages", "application/json", []byte(`{"model":"paced","max_tokens":5,"stream":true,` + prompt + `}`), `"message_stop"}` + "\n\n", 5},
		{"paced-openai-sse", "/v1/chat/completions", "application/json", []byte(`{"model":"paced","max_tokens":5,"stream":true,` + prompt + `}`), "[DONE]\n\n", 5},
		{"paced-binary-v1", "/v1/messages", "application/x-anthropic-binary", binaryV1("paced", "Write a story about a lighthouse keeper.", 5), "\x03\x00\x00", 5},
		{"anthropic-json", "/v1/messages", "application/json", []byte(`{"model":"anth","max_tokens":100,` + prompt + `}`), `}`, 1},
		{"openai-json", "/v1/chat/completions", "application/json", []byte(`{"model":"oai","max_tokens":100,` + prompt + `}`), `}`, 1},
	}
	for _, front := range []string{server.HTTP1Lean, server.HTTP1NetHTTP} {
		cl := &countingListener{}
		addr := benchGatewayOn(t, front, func(ln net.Listener) net.Listener { cl.Listener = ln; return cl })
		for _, tt := range tests {
			t.Run(strings.ReplaceAll(front, "/", "")+"/"+tt.name, func(t *testing.T) {
				hdr, err := h1.AppendHeader(nil, http.Header{"Content-Type": {tt.contentType}, "Anthropic-Version": {"2023-06-01"}})
				if err != nil {
					t.Fatal(err)
				}
				req := append(h1.AppendRequest(nil, http.MethodPost, tt.path, addr, len(tt.body), hdr), tt.body...)
				pool := &h1.Pool{Addr: addr}
				defer pool.CloseIdle()
				var body []byte
				roundTrip(t, pool, req, tt.want, &body) // the connection is open and the path warm
				r0, c0, w0, d0 := cl.reads.Load(), cl.calls.Load(), cl.writes.Load(), cl.deadlines.Load()
				for range n {
					roundTrip(t, pool, req, tt.want, &body)
				}
				reads := float64(cl.reads.Load()-r0) / n
				calls := float64(cl.calls.Load()-c0) / n
				writes := float64(cl.writes.Load()-w0) / n
				deadlines := float64(cl.deadlines.Load()-d0) / n
				t.Logf("%s %s: %.2f reads (%.2f Read calls), %.2f writes, %.2f deadline changes per request", front, tt.name,
					reads, calls, writes, deadlines)
				if front == server.HTTP1Lean && (reads != 1 || writes > tt.writes) {
					t.Errorf("lean server, %s: %.2f reads and %.2f writes per request, want 1 and at most %.0f", tt.name, reads, writes, tt.writes)
				}
				// The idle timeout and the answer's write deadline: a head already in hand needs no
				// header timeout, a body in hand no read deadline, a stream's flushes within
				// armSlack share one write deadline, and what a request leaves is cleared lazily.
				// On a busy machine a flush now and then comes later than that, or a handler runs
				// long enough to start the watch: 2.5 on average (it was 7 to 16).
				if front == server.HTTP1Lean && deadlines > 2.5 {
					t.Errorf("lean server, %s: %.2f deadline changes per request, want at most 2.5", tt.name, deadlines)
				}
			})
		}
	}
}

// roundTrip sends req on a connection of pool and reads its answer to its end into *body.
func roundTrip(t testing.TB, pool *h1.Pool, req []byte, want string, body *[]byte) {
	t.Helper()
	c, err := pool.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteRequest(req); err != nil {
		t.Fatal(err)
	}
	h, err := c.ReadHead()
	if err != nil {
		t.Fatal(err)
	}
	*body = (*body)[:0]
	for {
		p, err := c.Next()
		*body = append(*body, p...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if h.Status != http.StatusOK || !bytes.HasSuffix(*body, []byte(want)) {
		t.Fatalf("got %d %s, want 200 ending in %q", h.Status, truncate(*body), want)
	}
	pool.Put(c)
}
