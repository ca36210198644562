package server

import (
	"bytes"
	"container/list"
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/layer0ai/layer0/internal/wire/jsontext"
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
	// MaxNew caps the connections that have not sent their first request yet (new ones: see
	// Activate), a share of Max they cannot exceed: at the share, the oldest new connection is
	// closed to make room for the next, so clients that send requests at once always get in.
	// 0 means no share of their own.
	MaxNew int
	// MaxNewPerSource caps the new connections of one client IP address; 0 means no cap.
	MaxNewPerSource int
	// NewTimeout closes a connection still new this long after it was accepted; 0 means no
	// bound.
	NewTimeout time.Duration
	// MaxQUICHandshakes bounds the QUIC handshakes in progress of the HTTP/3 listener on the
	// same port (ListenHTTP3); 0 means config.DefaultMaxQUICHandshakes.
	MaxQUICHandshakes int
	// FitFDs lowers Max (and MaxNew with it) to what the process's file descriptor limit fits
	// beside the gateway's other files, with a warning, when Max is above that.
	FitFDs bool
}

// limitListener caps a listener's open connections. Accept never fails for the cap: the
// connection over it is accepted, answered with a short 503 (or closed, under TLS) and closed,
// so the kernel's backlog does not fill with clients that time out, and the accept loop never
// sees the file descriptor exhaustion that makes net/http retry in a busy loop. Accepted
// connections also pass through answerConn, which gives net/http's own plain-text errors the
// JSON error body every other answer has.
//
// A connection is new from its accept until a handler runs for its first request (Activate):
// new connections have a share of the cap, a per-source cap and a timeout of their own, so that
// strangers who open connections and send nothing (or only HTTP/2's preface and SETTINGS) cannot
// hold the slots of clients that send requests.
type limitListener struct {
	net.Listener
	lim     ConnLimit
	open    atomic.Int64
	refused atomic.Int64 // since the last log line
	lastLog atomic.Int64 // unix nanoseconds of the last log line

	mu       sync.Mutex
	fresh    list.List      // the new connections (*answerConn), oldest first
	bySource map[string]int // new connections per client IP address, when MaxNewPerSource is set
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
			l.refuse(c, refusal, "connection refused: the listener is at max_connections")
			continue
		}
		src := ""
		if l.lim.MaxNewPerSource > 0 {
			src = sourceOf(c.RemoteAddr())
		}
		ac := &answerConn{Conn: c, l: l, src: src}
		ac.fresh.Store(true)
		evicted, why := l.enter(ac)
		if evicted != nil {
			l.count("connection closed: the oldest connection that sent no request made room at max_new_connections")
			_ = evicted.Close()
		}
		if why != "" {
			l.refuse(c, newRefusal, why)
			continue
		}
		l.open.Add(1)
		return ac, nil
	}
}

// enter counts the new connection c in: it returns the oldest new connection, taken out of
// them to make room at MaxNew (the caller closes it), or says why c is refused.
func (l *limitListener) enter(c *answerConn) (evicted *answerConn, why string) {
	if l.lim.MaxNew <= 0 && l.lim.MaxNewPerSource <= 0 && l.lim.NewTimeout <= 0 {
		c.fresh.Store(false)
		return nil, ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lim.MaxNewPerSource > 0 && l.bySource[c.src] >= l.lim.MaxNewPerSource {
		return nil, "connection refused: the client address is at max_new_connections_per_source"
	}
	if l.lim.MaxNew > 0 && l.fresh.Len() >= l.lim.MaxNew {
		// The oldest that is not becoming active at this moment (it then takes itself out).
		for e := l.fresh.Front(); e != nil; e = e.Next() {
			if v := e.Value.(*answerConn); v.fresh.CompareAndSwap(true, false) {
				l.leaveLocked(v)
				evicted = v
				break
			}
		}
		if evicted == nil {
			return nil, "connection refused: the listener is at max_new_connections"
		}
	}
	if l.lim.MaxNewPerSource > 0 {
		if l.bySource == nil {
			l.bySource = make(map[string]int)
		}
		l.bySource[c.src]++
	}
	c.elem = l.fresh.PushBack(c)
	if l.lim.NewTimeout > 0 {
		c.timer = time.AfterFunc(l.lim.NewTimeout, c.expire)
	}
	return evicted, ""
}

// leaveLocked takes c out of the new connections; its fresh flag is already cleared.
func (l *limitListener) leaveLocked(c *answerConn) {
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.elem == nil {
		return
	}
	l.fresh.Remove(c.elem)
	c.elem = nil
	if l.lim.MaxNewPerSource > 0 {
		if l.bySource[c.src] <= 1 {
			delete(l.bySource, c.src)
		} else {
			l.bySource[c.src]--
		}
	}
}

// sourceOf is the client IP address of a connection's remote address.
func sourceOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return string(ta.IP.To16())
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// Activate marks the connection c (as a handler's request context carries it, see ConnContext)
// as one that sent a request: it leaves the new connections' share and timeout. It is cheap and
// idempotent: every request calls it.
func Activate(ctx context.Context) {
	if c, ok := ctx.Value(connKey{}).(*answerConn); ok {
		c.leaveNew()
	}
}

// connKey is the request context key of the listener's connection.
type connKey struct{}

// ConnContext returns ctx carrying the listener's connection under c (c itself, or a TLS or
// replaying connection wrapping it), for Activate.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	for range 4 {
		if ac, ok := c.(*answerConn); ok {
			return context.WithValue(ctx, connKey{}, ac)
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return ctx
		}
		c = u.NetConn()
	}
	return ctx
}

// refusal is the whole answer to a connection over the cap, written in one write; newRefusal
// the answer to one over the new connections' share or per-source cap.
var (
	refusal    = refusalAnswer("the server has too many open connections; retry shortly")
	newRefusal = refusalAnswer("the server has too many connections that have not sent a request yet; retry shortly")
)

func refusalAnswer(msg string) []byte {
	body := `{"type":"error","error":{"type":"overloaded_error","message":"` + msg + `"}}` + "\n"
	return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n" +
		"Retry-After: 1\r\nX-Error-Code: TOO_MANY_CONNECTIONS\r\nContent-Length: " + itoa(len(body)) + "\r\n\r\n" + body)
}

func (l *limitListener) refuse(c net.Conn, answer []byte, why string) {
	// Counted and logged before the close, so that whoever sees the close can see the count.
	l.count(why)
	if !l.lim.TLS {
		// Best effort, never blocking the accept loop: the answer fits in any socket buffer.
		_ = c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
		_, _ = c.Write(answer)
	}
	_ = c.Close()
}

// count counts one refused connection, TCP or QUIC, and logs why (at most once a second).
func (l *limitListener) count(why string) {
	if l.lim.Refused != nil {
		l.lim.Refused()
	}
	n := l.refused.Add(1)
	now := time.Now().UnixNano()
	last := l.lastLog.Load()
	if now-last >= int64(time.Second) && l.lastLog.CompareAndSwap(last, now) {
		l.refused.Add(-n)
		l.lim.Logger.Warn(why, "max_connections", l.lim.Max, "refused", n, "addr", l.Addr().String())
	}
}

// answerConn is an accepted connection: it counts itself out of the listener on Close, and
// rewrites the plain-text errors net/http writes by itself before any handler runs (a request
// line or header it cannot parse, headers over the size limit, a protocol version it does not
// speak: 4xx and 505) into the JSON error body of the
// Anthropic format, the default when nothing of the request could be read.
type answerConn struct {
	net.Conn
	l     *limitListener
	once  sync.Once
	src   string      // the client's IP address, when the listener caps new connections per source
	fresh atomic.Bool // the connection is new: no request has reached a handler yet
	// Guarded by the listener's mu:
	elem  *list.Element // in the listener's list of new connections
	timer *time.Timer   // closes the connection at the listener's NewTimeout while it is new
}

// leaveNew counts the connection out of the new ones, once; it reports whether it did.
func (c *answerConn) leaveNew() bool {
	if !c.fresh.Load() || !c.fresh.CompareAndSwap(true, false) {
		return false
	}
	c.l.mu.Lock()
	c.l.leaveLocked(c)
	c.l.mu.Unlock()
	return true
}

// expire closes a connection still new at the listener's NewTimeout.
func (c *answerConn) expire() {
	if c.leaveNew() {
		_ = c.Close()
	}
}

func (c *answerConn) Close() error {
	err := c.Conn.Close()
	c.leaveNew()
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
	j = jsontext.AppendString(j, "the request could not be read: "+msg)
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
