package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// client sends the run's one request and streams the response to a worker: head once, then body
// (200) or errorBody (any other status) with each piece as it arrives. A client belongs to one
// worker and is never used concurrently.
type client interface {
	do(ctx context.Context, w *worker) error
	close()
}

// clientFactory returns how to make each worker's client, and how to release what they share.
func clientFactory(cfg Config, body []byte, hdr http.Header) (func(int) client, func(), error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, nil, fmt.Errorf("bench: %w", err)
	}
	if u.Scheme == "http" && !cfg.HTTP2 && !cfg.NetHTTP {
		req := rawRequest(u, body, hdr)
		addr := hostPort(u)
		return func(int) client {
			return &rawClient{addr: addr, req: req, timeout: cfg.Timeout}
		}, func() {}, nil
	}

	n := 1
	if cfg.HTTP2 {
		n = cfg.H2Conns
	}
	transports := make([]*http.Transport, n)
	for i := range transports {
		t := &http.Transport{
			Proxy:               nil, // a benchmark never goes through an environment proxy
			DialContext:         (&net.Dialer{Timeout: cfg.Timeout}).DialContext,
			MaxIdleConnsPerHost: max(cfg.MaxInFlight, cfg.Connections),
			DisableCompression:  true,
			TLSClientConfig:     &tls.Config{InsecureSkipVerify: cfg.Insecure}, //nolint:gosec // --insecure asks for it
			Protocols:           new(http.Protocols),
			ForceAttemptHTTP2:   cfg.HTTP2,
		}
		switch {
		case cfg.HTTP2 && u.Scheme == "http":
			t.Protocols.SetUnencryptedHTTP2(true) // h2c with prior knowledge
		case cfg.HTTP2:
			t.Protocols.SetHTTP2(true)
		default:
			t.Protocols.SetHTTP1(true)
		}
		transports[i] = t
	}
	u2 := u.String()
	return func(i int) client {
			return &stdClient{
				hc:      &http.Client{Transport: transports[i%len(transports)]},
				url:     u2,
				body:    body,
				hdr:     hdr,
				timeout: cfg.Timeout,
			}
		}, func() {
			for _, t := range transports {
				t.CloseIdleConnections()
			}
		}, nil
}

func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return net.JoinHostPort(u.Hostname(), "443")
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// stdClient is net/http's client: HTTP/2 (TLS or h2c), HTTPS, or HTTP/1.1 on request.
type stdClient struct {
	hc      *http.Client
	url     string
	body    []byte
	hdr     http.Header // shared by all workers, read only
	timeout time.Duration
	buf     []byte
}

func (c *stdClient) do(ctx context.Context, w *worker) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(c.body))
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	req.Header = c.hdr
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	w.head(resp.StatusCode)
	if c.buf == nil {
		c.buf = make([]byte, 16<<10)
	}
	for {
		n, err := resp.Body.Read(c.buf)
		if n > 0 {
			if resp.StatusCode == http.StatusOK {
				w.body(c.buf[:n])
			} else {
				w.errorBody(c.buf[:n])
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (c *stdClient) close() {}

// rawRequest is the complete HTTP/1.1 request, head and body, that rawClient writes each time.
func rawRequest(u *url.URL, body []byte, hdr http.Header) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: layer0-bench\r\nContent-Length: %d\r\n",
		u.RequestURI(), u.Host, len(body))
	_ = hdr.Write(&b)
	b.WriteString("\r\n")
	b.Write(body)
	return b.Bytes()
}

// rawClient is a minimal HTTP/1.1 client on one keep-alive connection: it writes a prebuilt
// request, reads the status line and the three headers that frame the body (Content-Length,
// Transfer-Encoding, Connection), and hands body pieces to the worker straight from its read
// buffer. It allocates nothing per request; net/http's client costs several times more CPU per
// request, which on a machine shared with the server under test is CPU taken from the server.
type rawClient struct {
	addr    string
	req     []byte
	timeout time.Duration

	conn   net.Conn
	br     *bufio.Reader
	reused bool        // conn has served a request before
	stop   func() bool // detaches the cancel hook of conn
}

// errHeadTooLong means a status or header line did not fit the read buffer.
var errHeadTooLong = errors.New("bench: response header line too long")

func (c *rawClient) do(ctx context.Context, w *worker) error {
	for attempt := 0; ; attempt++ {
		if c.conn == nil {
			if err := c.dial(ctx); err != nil {
				return err
			}
		}
		reused := c.reused
		err := c.exchange(w)
		if err == nil {
			c.reused = true
			return nil
		}
		c.close()
		// A kept-alive connection the server closed while idle fails before any response byte;
		// send again once on a new connection, as net/http does.
		if reused && !w.gotHead && attempt == 0 && ctx.Err() == nil &&
			(errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isConnReset(err)) {
			continue
		}
		return err
	}
}

func isConnReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

func (c *rawClient) dial(ctx context.Context) error {
	d := net.Dialer{Timeout: c.timeout}
	conn, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return err
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	c.conn, c.reused = conn, false
	if c.br == nil {
		c.br = bufio.NewReaderSize(conn, 8<<10)
	} else {
		c.br.Reset(conn)
	}
	// Interrupting the run must interrupt a blocked read: push the deadline into the past.
	c.stop = context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	return nil
}

func (c *rawClient) close() {
	if c.conn == nil {
		return
	}
	c.stop()
	_ = c.conn.Close()
	c.conn = nil
}

// exchange writes the request and reads one response on the open connection.
func (c *rawClient) exchange(w *worker) error {
	if err := c.conn.SetDeadline(time.Now().Add(c.timeout)); err != nil {
		return err
	}
	if _, err := c.conn.Write(c.req); err != nil {
		return err
	}
	var (
		status             int
		length             int64
		chunked, closeConn bool
		err                error
	)
	for { // skip 1xx informational responses
		status, length, chunked, closeConn, err = c.readHead()
		if err != nil {
			return err
		}
		if status >= 200 || status == http.StatusSwitchingProtocols {
			break
		}
	}
	w.head(status)
	emit := w.body
	if status != http.StatusOK {
		emit = w.errorBody
	}
	switch {
	case chunked:
		err = c.readChunked(emit)
	case length >= 0:
		err = c.readN(length, emit)
	default: // no framing: the body ends with the connection
		err = c.readN(-1, emit)
		closeConn = true
	}
	if err != nil {
		return err
	}
	if closeConn {
		c.close()
	}
	return nil
}

// readHead reads a status line and headers. length is -1 when no Content-Length was given.
func (c *rawClient) readHead() (status int, length int64, chunked, closeConn bool, err error) {
	line, err := c.line()
	if err != nil {
		return 0, 0, false, false, err
	}
	// "HTTP/1.1 200 OK"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, 0, false, false, fmt.Errorf("bench: malformed status line %q", line)
	}
	status = int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
	if status < 100 || status > 999 {
		return 0, 0, false, false, fmt.Errorf("bench: malformed status line %q", line)
	}
	closeConn = line[7] == '0' // HTTP/1.0 closes unless told otherwise; keep it simple
	length = -1
	for {
		line, err = c.line()
		if err != nil {
			return 0, 0, false, false, err
		}
		if len(line) == 0 {
			return status, length, chunked, closeConn, nil
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			continue
		}
		name, value := line[:colon], bytes.TrimSpace(line[colon+1:])
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, perr := strconv.ParseInt(string(value), 10, 64)
			if perr != nil || n < 0 {
				return 0, 0, false, false, fmt.Errorf("bench: bad Content-Length %q", value)
			}
			length = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			closeConn = bytes.EqualFold(value, []byte("close"))
		}
	}
}

// line returns the next line without its CRLF; it is valid until the next read.
func (c *rawClient) line() ([]byte, error) {
	l, err := c.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return nil, errHeadTooLong
	}
	if err != nil {
		if err == io.EOF && len(l) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	l = l[:len(l)-1]
	if n := len(l); n > 0 && l[n-1] == '\r' {
		l = l[:n-1]
	}
	return l, nil
}

// readN hands n body bytes (n < 0: until EOF) to emit as they arrive, without copying them.
func (c *rawClient) readN(n int64, emit func([]byte)) error {
	for n != 0 {
		if c.br.Buffered() == 0 {
			if _, err := c.br.Peek(1); err != nil {
				if n < 0 && err == io.EOF {
					return nil
				}
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
		}
		k := c.br.Buffered()
		if n > 0 && int64(k) > n {
			k = int(n)
		}
		b, _ := c.br.Peek(k)
		emit(b)
		_, _ = c.br.Discard(k)
		if n > 0 {
			n -= int64(k)
		}
	}
	return nil
}

// readChunked decodes a chunked body (RFC 9112 section 7.1), ignoring extensions and trailers.
func (c *rawClient) readChunked(emit func([]byte)) error {
	for {
		line, err := c.line()
		if err != nil {
			return unexpected(err)
		}
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		size, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 16, 63)
		if err != nil {
			return fmt.Errorf("bench: bad chunk size %q", line)
		}
		if size == 0 {
			for { // trailers, then the blank line
				line, err := c.line()
				if err != nil {
					return unexpected(err)
				}
				if len(line) == 0 {
					return nil
				}
			}
		}
		if err := c.readN(int64(size), emit); err != nil {
			return unexpected(err)
		}
		line, err = c.line()
		if err != nil {
			return unexpected(err)
		}
		if len(line) != 0 {
			return errors.New("bench: chunk not followed by CRLF")
		}
	}
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
