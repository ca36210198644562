package server

import (
	"bytes"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ConnLimit is what the listener does at its connection cap.
type ConnLimit struct {
	// Max caps the open connections; 0 means no cap.
	Max int
	// Refused, when set, is called once per refused connection (a metric).
	Refused func()
	// Logger receives one line per second at most while connections are being refused.
	Logger *slog.Logger
	// TLS is set when the connections carry TLS: a refused one is closed without an answer (a
	// cleartext 503 would be garbage to a TLS client).
	TLS bool
}

// limitListener caps a listener's open connections. Accept never fails for the cap: the
// connection over it is accepted, answered with a short 503 (or closed, under TLS) and closed,
// so the kernel's backlog does not fill with clients that time out, and the accept loop never
// sees the file descriptor exhaustion that makes net/http retry in a busy loop. Accepted
// connections also pass through answerConn, which gives net/http's own plain-text errors the
// JSON error body every other answer has.
type limitListener struct {
	net.Listener
	lim     ConnLimit
	open    atomic.Int64
	refused atomic.Int64 // since the last log line
	lastLog atomic.Int64 // unix nanoseconds of the last log line
}

// LimitListener wraps ln with the cap of lim.
func LimitListener(ln net.Listener, lim ConnLimit) net.Listener {
	if lim.Logger == nil {
		lim.Logger = slog.New(slog.DiscardHandler)
	}
	return &limitListener{Listener: ln, lim: lim}
}

// Open returns the connections open now.
func (l *limitListener) Open() int64 { return l.open.Load() }

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.lim.Max > 0 && l.open.Load() >= int64(l.lim.Max) {
			l.refuse(c)
			continue
		}
		l.open.Add(1)
		return &answerConn{Conn: c, l: l}, nil
	}
}

// refusal is the whole answer to a connection over the cap, written in one write.
var refusal = func() []byte {
	body := `{"type":"error","error":{"type":"overloaded_error","message":"the server has too many open connections; retry shortly"}}` + "\n"
	return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n" +
		"Retry-After: 1\r\nX-Error-Code: TOO_MANY_CONNECTIONS\r\nContent-Length: " + itoa(len(body)) + "\r\n\r\n" + body)
}()

func (l *limitListener) refuse(c net.Conn) {
	// Counted and logged before the close, so that whoever sees the close can see the count.
	l.count()
	if !l.lim.TLS {
		// Best effort, never blocking the accept loop: the answer fits in any socket buffer.
		_ = c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
		_, _ = c.Write(refusal)
	}
	_ = c.Close()
}

// count counts and logs (at most once a second) one refused connection, TCP or QUIC.
func (l *limitListener) count() {
	if l.lim.Refused != nil {
		l.lim.Refused()
	}
	n := l.refused.Add(1)
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	if now-last >= int64(time.Second) && l.lastLog.CompareAndSwap(last, now) {
		l.refused.Add(-n)
		l.lim.Logger.Warn("connection refused: the listener is at max_connections",
			"max_connections", l.lim.Max, "refused", n, "addr", l.Addr().String())
	}
}

// answerConn is an accepted connection: it counts itself out of the listener on Close, and
// rewrites the plain-text errors net/http writes by itself before any handler runs (a request
// line or header it cannot parse, headers over the size limit, a protocol version it does not
// speak: 4xx and 505) into the JSON error body of the
// Anthropic format, the default when nothing of the request could be read.
type answerConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *answerConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}

// CloseWrite half-closes the connection (the lean server's linger before a close).
func (c *answerConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// net/http writes its own errors in one write, as "HTTP/1.1 " + status + plainHeaders + body.
var plainHeaders = []byte("\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n")

// net/http has no reason phrase for 529 (the overloaded status of the Anthropic API) and writes
// "status code 529" in its place.
var (
	status529     = []byte("HTTP/1.1 529 status code 529\r\n")
	status529Text = []byte("HTTP/1.1 529 Overloaded\r\n")
)

func (c *answerConn) Write(b []byte) (int, error) {
	if len(b) > 13 && b[0] == 'H' && b[9] == '5' && bytes.HasPrefix(b, status529) {
		// An answer's status line starts the write that carries it (net/http buffers the
		// header block and writes it first).
		out := append(append(make([]byte, 0, len(b)), status529Text...), b[len(status529):]...)
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	if len(b) > 13 && b[0] == 'H' && (bytes.HasPrefix(b, []byte("HTTP/1.1 4")) || bytes.HasPrefix(b, []byte("HTTP/1.1 505"))) {
		if i := bytes.Index(b, plainHeaders); i > 0 {
			if _, err := c.Conn.Write(jsonAnswer(b[len("HTTP/1.1 "):i], b[i+len(plainHeaders):])); err != nil {
				return 0, err
			}
			return len(b), nil
		}
	}
	return c.Conn.Write(b)
}

// jsonAnswer rewrites one of net/http's plain-text error answers (status line text and body)
// as a JSON error in the Anthropic format.
func jsonAnswer(status, body []byte) []byte {
	typ, code := "invalid_request_error", "INVALID_REQUEST"
	switch {
	case bytes.HasPrefix(status, []byte("431")):
		typ, code = "request_too_large", "HEADERS_TOO_LARGE"
	case bytes.HasPrefix(status, []byte("408")):
		typ, code = "timeout_error", "REQUEST_TIMEOUT"
	case bytes.HasPrefix(status, []byte("505")):
		code = "HTTP_VERSION_NOT_SUPPORTED"
	}
	msg := string(bytes.ToValidUTF8(bytes.TrimSpace(body), []byte("?")))
	if msg == "" {
		msg = string(status)
	}
	var j []byte
	j = append(j, `{"type":"error","error":{"type":"`...)
	j = append(j, typ...)
	j = append(j, `","message":`...)
	j = appendJSONString(j, "the request could not be read: "+msg)
	j = append(j, "}}\n"...)
	var out []byte
	out = append(out, "HTTP/1.1 "...)
	out = append(out, status...)
	out = append(out, "\r\nContent-Type: application/json\r\nConnection: close\r\nX-Error-Code: "...)
	out = append(out, code...)
	out = append(out, "\r\nContent-Length: "...)
	out = append(out, itoa(len(j))...)
	out = append(out, "\r\n\r\n"...)
	return append(out, j...)
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// appendJSONString appends s as a JSON string, escaping what JSON requires.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}
