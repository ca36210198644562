// Package h1 is a lean HTTP/1.1 client for cleartext keep-alive connections, for the two places
// where net/http's client costs more than the work it carries: the engines layer0 reaches at
// http:// URLs, and the load generator. A Conn writes a request the caller built, head and body,
// in one write from the caller's goroutine (net/http writes from a goroutine of its own per
// connection, a wakeup per request), parses the response head without allocating (status,
// framing, and the header block kept for lookups), and hands the body out of its read buffer as
// it arrives, framed by Content-Length, chunked encoding (RFC 9112 §7.1) or the connection's end.
// A Pool keeps the idle connections to one address.
//
// It does no TLS, HTTP/2, redirects, proxies, compression or 100-continue: callers use net/http
// for those. It sets no timeouts either: callers bound a request with the connection's deadline
// or by closing it from another goroutine, which unblocks a read or write at once.
package h1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
)

// Errors a Conn returns besides the network's own.
var (
	// ErrNoResponse wraps the failure of a reused connection that the server closed before
	// sending any byte of the response: the request may be sent again on a new connection.
	ErrNoResponse = errors.New("h1: connection closed before the response began")
	// ErrHeadTooLong means a status or header line did not fit the read buffer.
	ErrHeadTooLong = errors.New("h1: response header line too long")
	// ErrMalformed means the response is not HTTP/1.x.
	ErrMalformed = errors.New("h1: malformed response")
	// ErrState means a method was called out of order (a body read before its head).
	ErrState = errors.New("h1: body read without a response head")
)

// maxHead bounds the header block kept for Head.Get.
const maxHead = 64 << 10

// Head is a response's status line and headers. It is valid until the Conn reads the next
// response.
type Head struct {
	// Status is the status code.
	Status int
	// ContentLength is the body's length, -1 when the response does not give one.
	ContentLength int64
	// Chunked says the body uses chunked transfer coding.
	Chunked bool
	// Close says the connection ends after this response (Connection: close, HTTP/1.0, or a
	// body framed by the connection's end).
	Close bool

	raw []byte // the header lines, "Name: value\n" each
}

// Get returns the first value of the header name (case-insensitive), or nil. The slice is valid
// as long as the Head.
func (h *Head) Get(name string) []byte {
	raw := h.raw
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, '\n')
		line := raw[:i]
		raw = raw[i+1:]
		colon := bytes.IndexByte(line, ':')
		if colon == len(name) && equalFold(line[:colon], name) {
			return bytes.TrimSpace(line[colon+1:])
		}
	}
	return nil
}

// Header returns the headers as an http.Header. It allocates; use it off the hot path (error
// responses).
func (h *Head) Header() http.Header {
	hd := http.Header{}
	raw := h.raw
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, '\n')
		line := raw[:i]
		raw = raw[i+1:]
		if colon := bytes.IndexByte(line, ':'); colon > 0 {
			hd.Add(string(line[:colon]), string(bytes.TrimSpace(line[colon+1:])))
		}
	}
	return hd
}

// equalFold reports whether b equals the ASCII string s ignoring case.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		if lower(b[i]) != lower(s[i]) {
			return false
		}
	}
	return true
}

func lower(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

// body states of a Conn.
const (
	bodyNone   = iota // no response head read yet, or the body was read to its end
	bodyLength        // remain bytes left (Content-Length)
	bodyChunk         // remain bytes left in the current chunk; 0 before the first
	bodyEOF           // until the connection ends
)

// Conn is one HTTP/1.1 client connection. It is not safe for concurrent use, except Close,
// which may be called from another goroutine to abort a blocked read or write.
type Conn struct {
	nc   net.Conn
	br   *bufio.Reader
	head Head

	state    uint8
	remain   int64
	inChunk  bool // a chunk's data was read: a CRLF follows it
	broken   bool // an error, or a body framed by the connection's end: never reuse
	requests int  // requests written on this connection
}

// NewConn wraps nc with a read buffer of readSize bytes (4 KiB when ≤ 0; a response's status
// and header lines must each fit in it).
func NewConn(nc net.Conn, readSize int) *Conn {
	if readSize <= 0 {
		readSize = 4 << 10
	}
	return &Conn{nc: nc, br: bufio.NewReaderSize(nc, readSize)}
}

// NetConn returns the network connection.
func (c *Conn) NetConn() net.Conn { return c.nc }

// Reused reports whether an earlier request was sent on the connection.
func (c *Conn) Reused() bool { return c.requests > 1 }

// Close closes the connection. It may be called concurrently with a read or write, which then
// fails at once.
func (c *Conn) Close() error { return c.nc.Close() }

// WriteRequest writes a complete request, head and body, in one write. The body of the
// previous response must have been read to its end (Reusable).
func (c *Conn) WriteRequest(req []byte) error {
	c.requests++
	if _, err := c.nc.Write(req); err != nil {
		c.broken = true
		if c.Reused() && isClosed(err) {
			return fmt.Errorf("%w: %w", ErrNoResponse, err)
		}
		return err
	}
	return nil
}

// isClosed reports whether err means the peer closed or reset the connection.
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// ReadHead reads the response head, skipping informational (1xx) responses, and prepares the
// body for Next and Read. The Head is valid until the next ReadHead.
func (c *Conn) ReadHead() (*Head, error) {
	for first := true; ; first = false {
		h, err := c.readHead(first)
		if err != nil {
			c.broken = true
			return nil, err
		}
		if h.Status >= 200 || h.Status == http.StatusSwitchingProtocols {
			return h, nil
		}
	}
}

func (c *Conn) readHead(first bool) (*Head, error) {
	h := &c.head
	*h = Head{ContentLength: -1, raw: h.raw[:0]}
	line, err := c.line()
	if err != nil {
		if first && len(line) == 0 && c.Reused() && isClosed(err) {
			return nil, fmt.Errorf("%w: %w", ErrNoResponse, err)
		}
		return nil, unexpected(err)
	}
	// "HTTP/1.1 200 OK"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' ||
		!digit(line[9]) || !digit(line[10]) || !digit(line[11]) || len(line) > 12 && line[12] != ' ' {
		return nil, fmt.Errorf("%w: status line %q", ErrMalformed, truncate(line))
	}
	h.Status = int(line[9]-'0')*100 + int(line[10]-'0')*10 + int(line[11]-'0')
	http10 := line[7] == '0' // HTTP/1.0 closes unless it says keep-alive
	keepAlive := false
	for {
		line, err = c.line()
		if err != nil {
			return nil, unexpected(err)
		}
		if len(line) == 0 {
			break
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return nil, fmt.Errorf("%w: header line %q", ErrMalformed, truncate(line))
		}
		if len(h.raw)+len(line) < maxHead {
			h.raw = append(append(h.raw, line...), '\n')
		}
		name, value := line[:colon], bytes.TrimSpace(line[colon+1:])
		switch {
		case equalFold(name, "Content-Length"):
			n, perr := strconv.ParseInt(string(value), 10, 64)
			if perr != nil || n < 0 || h.ContentLength >= 0 && n != h.ContentLength {
				return nil, fmt.Errorf("%w: Content-Length %q", ErrMalformed, truncate(value))
			}
			h.ContentLength = n
		case equalFold(name, "Transfer-Encoding") && !http10: // HTTP/1.0 has no transfer coding
			h.Chunked = bytes.EqualFold(value, []byte("chunked"))
			if !h.Chunked {
				return nil, fmt.Errorf("%w: unsupported Transfer-Encoding %q", ErrMalformed, truncate(value))
			}
		case equalFold(name, "Connection"):
			switch {
			case bytes.EqualFold(value, []byte("close")):
				h.Close = true
			case bytes.EqualFold(value, []byte("keep-alive")):
				keepAlive = true
			}
		}
	}
	if http10 && !keepAlive {
		h.Close = true
	}
	c.inChunk = false
	switch {
	case h.Status < 200 || h.Status == http.StatusNoContent || h.Status == http.StatusNotModified:
		c.state = bodyNone
		h.ContentLength = 0
	case h.Chunked:
		c.state, c.remain = bodyChunk, 0
		h.ContentLength = -1
	case h.ContentLength >= 0:
		c.state, c.remain = bodyLength, h.ContentLength
		if c.remain == 0 {
			c.state = bodyNone
		}
	default:
		c.state, c.remain = bodyEOF, -1
		h.Close, c.broken = true, true
	}
	return h, nil
}

func digit(b byte) bool { return '0' <= b && b <= '9' }

func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// line returns the next line without its CRLF; it is valid until the next read. On an error
// it returns what it read of an unfinished line.
func (c *Conn) line() ([]byte, error) {
	l, err := c.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return l, ErrHeadTooLong
	}
	if err != nil {
		return l, err
	}
	l = l[:len(l)-1]
	if n := len(l); n > 0 && l[n-1] == '\r' {
		l = l[:n-1]
	}
	return l, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Next returns the next piece of the body straight from the read buffer, as it arrives: valid
// until the next call on c. At the end of the body it returns io.EOF (and the connection may
// carry the next request).
func (c *Conn) Next() ([]byte, error) { return c.next(-1) }

// Read implements io.Reader over the current response's body. A read into p at least as large
// as the connection's buffer, when nothing is buffered, goes straight from the network into p:
// a caller with a large buffer of its own gets a large answer in one system call.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if c.state == bodyLength || c.state == bodyEOF || c.state == bodyChunk && c.remain > 0 {
		if c.remain >= 0 && int64(len(p)) > c.remain {
			p = p[:c.remain]
		}
		n, err := c.br.Read(p)
		if c.remain >= 0 {
			c.remain -= int64(n)
			if c.remain == 0 && c.state == bodyLength {
				c.state = bodyNone
			}
		}
		switch {
		case err == io.EOF && c.state == bodyEOF:
			c.state = bodyNone
		case err == io.EOF:
			c.broken = true
			err = io.ErrUnexpectedEOF
		case err != nil:
			c.broken = true
		}
		return n, err
	}
	b, err := c.next(len(p))
	return copy(p, b), err
}

// next returns up to max (all when negative) buffered body bytes, reading when none are.
func (c *Conn) next(max int) ([]byte, error) {
	switch c.state {
	case bodyNone:
		if c.head.Status == 0 {
			return nil, ErrState
		}
		return nil, io.EOF
	case bodyChunk:
		if c.remain == 0 {
			if err := c.chunkHead(); err != nil {
				c.broken = true
				return nil, err
			}
			if c.state == bodyNone {
				return nil, io.EOF
			}
		}
	}
	if c.br.Buffered() == 0 {
		if _, err := c.br.Peek(1); err != nil {
			if c.state == bodyEOF && err == io.EOF {
				c.state = bodyNone
				return nil, io.EOF
			}
			c.broken = true
			return nil, unexpected(err)
		}
	}
	k := c.br.Buffered()
	if c.remain >= 0 && int64(k) > c.remain {
		k = int(c.remain)
	}
	if max >= 0 && k > max {
		k = max
	}
	b, _ := c.br.Peek(k)
	_, _ = c.br.Discard(k)
	if c.remain >= 0 {
		c.remain -= int64(k)
		if c.remain == 0 && c.state == bodyLength {
			c.state = bodyNone
		}
	}
	return b, nil
}

// chunkHead reads the CRLF ending the previous chunk, if any, and the next chunk's size line;
// after the last chunk it reads the trailers and the blank line and ends the body.
func (c *Conn) chunkHead() error {
	if c.inChunk {
		line, err := c.line()
		if err != nil {
			return unexpected(err)
		}
		if len(line) != 0 {
			return fmt.Errorf("%w: chunk not followed by CRLF", ErrMalformed)
		}
	}
	line, err := c.line()
	if err != nil {
		return unexpected(err)
	}
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	size, err := parseHex(bytes.TrimSpace(line))
	if err != nil {
		return err
	}
	if size > 0 {
		c.remain, c.inChunk = size, true
		return nil
	}
	for { // trailers, then the blank line
		line, err := c.line()
		if err != nil {
			return unexpected(err)
		}
		if len(line) == 0 {
			c.state, c.inChunk = bodyNone, false
			return nil
		}
	}
}

func parseHex(b []byte) (int64, error) {
	if len(b) == 0 || len(b) > 15 {
		return 0, fmt.Errorf("%w: chunk size %q", ErrMalformed, truncate(b))
	}
	var n int64
	for _, ch := range b {
		switch {
		case '0' <= ch && ch <= '9':
			ch -= '0'
		case 'a' <= ch && ch <= 'f':
			ch -= 'a' - 10
		case 'A' <= ch && ch <= 'F':
			ch -= 'A' - 10
		default:
			return 0, fmt.Errorf("%w: chunk size %q", ErrMalformed, truncate(b))
		}
		n = n<<4 | int64(ch)
	}
	return n, nil
}

// Buffered returns the number of bytes received and not read yet.
func (c *Conn) Buffered() int { return c.br.Buffered() }

// BodyDone reports whether the current response's body was read to its end.
func (c *Conn) BodyDone() bool { return c.state == bodyNone && c.head.Status != 0 }

// Reusable reports whether the connection may carry another request: the last response's body
// was read to its end (or what is left of it is already buffered, which it then discards), and
// neither side asked to close. It is for when the caller is done with the response.
func (c *Conn) Reusable() bool {
	if c.broken || c.head.Close {
		return false
	}
	for c.state != bodyNone {
		switch {
		case c.state == bodyLength && int64(c.br.Buffered()) >= c.remain:
			_, _ = c.br.Discard(int(c.remain))
			c.state = bodyNone
		case c.state == bodyChunk && c.remain > 0 && int64(c.br.Buffered()) >= c.remain:
			_, _ = c.br.Discard(int(c.remain))
			c.remain = 0
		case c.state == bodyChunk && c.remain == 0 && c.chunkHeadBuffered():
			if c.chunkHead() != nil {
				c.broken = true
				return false
			}
		default:
			return false
		}
	}
	return true
}

// chunkHeadBuffered reports whether the lines chunkHead needs next are all in the buffer, so
// that it cannot block: the CRLF ending the chunk, the size line, and for a last chunk its
// trailers up to the blank line.
func (c *Conn) chunkHeadBuffered() bool {
	b, _ := c.br.Peek(c.br.Buffered())
	if c.inChunk {
		if !bytes.HasPrefix(b, []byte("\r\n")) {
			return false
		}
		b = b[2:]
	}
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return false
	}
	size := bytes.TrimSpace(b[:i])
	if j := bytes.IndexByte(size, ';'); j >= 0 {
		size = bytes.TrimSpace(size[:j])
	}
	if n, err := parseHex(size); err != nil || n > 0 {
		return err == nil
	}
	b = b[i+1:]
	for { // the last chunk: trailers up to a blank line
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return false
		}
		if len(bytes.TrimRight(b[:i], "\r")) == 0 {
			return true
		}
		b = b[i+1:]
	}
}

// AppendRequest appends a request head to dst: the request line, Host, the header blocks hdr in
// order (complete "Name: value\r\n" lines, as AppendHeader writes them), Content-Length and
// the blank line. The caller appends the body.
func AppendRequest(dst []byte, method, target, host string, contentLength int, hdr ...[]byte) []byte {
	dst = append(dst, method...)
	dst = append(dst, ' ')
	dst = append(dst, target...)
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	dst = append(dst, host...)
	dst = append(dst, "\r\n"...)
	for _, h := range hdr {
		dst = append(dst, h...)
	}
	dst = append(dst, "Content-Length: "...)
	dst = strconv.AppendInt(dst, int64(contentLength), 10)
	return append(dst, "\r\n\r\n"...)
}

// AppendHeader appends h as header lines, in sorted key order; Host and Content-Length, which
// AppendRequest writes, are left out. A name or value with a line break is refused.
func AppendHeader(dst []byte, h http.Header) ([]byte, error) {
	for k, vs := range h {
		for _, v := range vs {
			if strings.ContainsAny(k, "\r\n:") || strings.ContainsAny(v, "\r\n") {
				return dst, fmt.Errorf("h1: header %q: line break in name or value", k)
			}
		}
	}
	b := bytes.NewBuffer(dst)
	if err := h.WriteSubset(b, map[string]bool{"Host": true, "Content-Length": true}); err != nil {
		return dst, err
	}
	return b.Bytes(), nil
}
