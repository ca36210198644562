package h1server

import (
	"bufio"
	"errors"
	"io"
	"net/http"
)

// body is a request's body as the handler reads it: framed by Content-Length or chunked
// coding, read straight from the connection's buffer (or from the connection itself into a
// large enough slice). It is part of the connection and serves one request at a time.
type body struct {
	c         *conn
	remaining int64 // bytes left: of the body (Content-Length) or of the current chunk
	chunked   bool
	inChunk   bool // chunked: reading a chunk's data (else its size line comes next)
	done      bool // the body was read to its end
	closed    bool // the handler closed it
	err       error
	expect100 bool // the client waits for 100 Continue before it sends the body
	sent100   bool
}

// Errors of a chunked body.
var (
	errChunkLine = errors.New("h1server: malformed chunk size line")
	errChunkEnd  = errors.New("h1server: chunk data not followed by CRLF")
	errTrailer   = errors.New("h1server: trailer fields are not accepted")
)

// maxChunkLine bounds a chunk's size line (its extensions included).
const maxChunkLine = 4096

func (b *body) reset(f framing) {
	*b = body{c: b.c, remaining: f.length, chunked: f.chunked, expect100: f.expect100}
	if f.length == 0 {
		b.done = true
	}
	b.c.bodyDone.Store(b.done)
}

func (b *body) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.done {
		return 0, io.EOF
	}
	if b.err != nil {
		return 0, b.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if b.expect100 && !b.sent100 {
		b.sent100 = true
		if err := b.c.continue100(); err != nil {
			b.err = err
			return 0, err
		}
	}
	n, err := b.read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

func (b *body) read(p []byte) (int, error) {
	br := b.c.br
	if b.chunked || br.Buffered() == 0 {
		b.c.freshRead() // this read may reach the connection
	}
	if b.chunked && !b.inChunk {
		size, err := readChunkSize(br)
		if err != nil {
			return 0, err
		}
		if size == 0 {
			// The last chunk: no trailer fields, the empty line right after.
			if err := expectCRLF(br, errTrailer); err != nil {
				return 0, err
			}
			b.end()
			return 0, io.EOF
		}
		b.remaining, b.inChunk = size, true
	}
	if int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	n, err := br.Read(p)
	b.remaining -= int64(n)
	if b.remaining == 0 {
		if !b.chunked {
			b.end()
			return n, io.EOF
		}
		b.inChunk = false
		if err := expectCRLF(br, errChunkEnd); err != nil {
			return n, err
		}
		return n, nil
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// readChunkSize reads a chunk's size line: hexadecimal digits (at most 15: the size fits an
// int64 with room), then optionally extensions after ';' (ignored; no control bytes), then CRLF.
func readChunkSize(br *bufio.Reader) (int64, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull || len(line) > maxChunkLine {
		return 0, errChunkLine
	}
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return 0, errChunkLine
	}
	line = line[:len(line)-2]
	var n int64
	i := 0
	for ; i < len(line); i++ {
		c := line[i]
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			goto ext
		}
		if i == 15 {
			return 0, errChunkLine
		}
		n = n<<4 | int64(d)
	}
ext:
	if i == 0 {
		return 0, errChunkLine
	}
	if i < len(line) {
		if line[i] != ';' {
			return 0, errChunkLine
		}
		for _, c := range line[i+1:] {
			if c < ' ' && c != '\t' || c == 0x7f {
				return 0, errChunkLine
			}
		}
	}
	return n, nil
}

// expectCRLF reads CRLF, failing with bad when the next bytes are anything else.
func expectCRLF(br *bufio.Reader, bad error) error {
	b, err := br.Peek(2)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if b[0] != '\r' || b[1] != '\n' {
		return bad
	}
	_, _ = br.Discard(2)
	return nil
}

// end marks the body read to its end.
func (b *body) end() {
	b.done = true
	b.c.bodyDone.Store(true)
}

func (b *body) Close() error {
	b.closed = true
	return nil
}
