package binary

import (
	ebin "encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

// Frame is one response frame. Payload aliases the decoder's buffer: it is valid until the next
// call to the decoder.
type Frame struct {
	Type    FrameType
	Payload []byte
}

// Errors of the frame-stream decoder; they wrap a description of where.
var (
	// ErrBadMagic: the stream does not start with "ANTH" (and, in version 2, the version byte).
	ErrBadMagic = errors.New("binary: bad stream magic")
	// ErrFrameTooLarge: a frame's length exceeds the version's limit.
	ErrFrameTooLarge = errors.New("binary: frame too large")
	// ErrUnknownFrame: a version-1 frame type other than 0-3.
	ErrUnknownFrame = errors.New("binary: unknown frame type")
	// ErrAfterDone: bytes follow the done frame.
	ErrAfterDone = errors.New("binary: bytes after the done frame")
	// ErrPayload: a frame's payload does not match its type's layout.
	ErrPayload = errors.New("binary: malformed frame payload")
)

// Decoder splits a response byte stream into frames. Feed it the bytes in chunks of any size,
// split anywhere, with Write; Next returns each frame as soon as it is complete. Once its buffer
// has grown to the largest frame, decoding allocates nothing. The zero value is not usable; use
// NewDecoder.
type Decoder struct {
	v      Version
	buf    []byte
	r      int  // buf[r:] is unread
	header bool // the magic (and version) were read
	done   bool // the done frame was returned
	off    int64
}

// NewDecoder returns a decoder for a stream of version v.
func NewDecoder(v Version) *Decoder {
	return &Decoder{v: v, buf: make([]byte, 0, 4096)}
}

// Write adds stream bytes; it never fails. It invalidates the payloads returned before.
func (d *Decoder) Write(p []byte) (int, error) {
	d.compact()
	d.buf = append(d.buf, p...)
	return len(p), nil
}

// compact moves the unread bytes to the front of buf.
func (d *Decoder) compact() {
	if d.r > 0 {
		n := copy(d.buf, d.buf[d.r:])
		d.buf = d.buf[:n]
		d.r = 0
	}
}

// Buffered is the number of bytes received and not yet returned in a frame.
func (d *Decoder) Buffered() int { return len(d.buf) - d.r }

// Next returns the next complete frame. ok is false when more bytes are needed (or, after the
// done frame, always). An error is final: the stream cannot be decoded past it.
func (d *Decoder) Next() (f Frame, ok bool, err error) {
	b := d.buf[d.r:]
	if d.done {
		if len(b) > 0 {
			return Frame{}, false, fmt.Errorf("%w (%d bytes at offset %d)", ErrAfterDone, len(b), d.off)
		}
		return Frame{}, false, nil
	}
	if !d.header {
		hl := len(Magic)
		if d.v != V1 {
			hl++
		}
		for i := 0; i < len(b) && i < hl; i++ {
			want := byte(d.v)
			if i < len(Magic) {
				want = Magic[i]
			}
			if b[i] != want {
				return Frame{}, false, fmt.Errorf("%w: byte %d is 0x%02x, want 0x%02x", ErrBadMagic, i, b[i], want)
			}
		}
		if len(b) < hl {
			return Frame{}, false, nil
		}
		d.header = true
		d.consume(hl)
		b = b[hl:]
	}
	if len(b) < 2 {
		return Frame{}, false, nil
	}
	t := FrameType(b[0])
	var n, hl int
	if d.v == V1 {
		if len(b) < 3 {
			return Frame{}, false, nil
		}
		if t > FrameDone {
			return Frame{}, false, fmt.Errorf("%w %d at offset %d", ErrUnknownFrame, t, d.off)
		}
		n, hl = int(ebin.BigEndian.Uint16(b[1:])), 3
	} else {
		x, l := ebin.Uvarint(b[1:])
		switch {
		case l == 0:
			if len(b) > 1+ebin.MaxVarintLen32 {
				return Frame{}, false, fmt.Errorf("%w: length varint at offset %d", ErrFrameTooLarge, d.off+1)
			}
			return Frame{}, false, nil
		case l < 0 || x > MaxPayloadV2:
			return Frame{}, false, fmt.Errorf("%w: %s frame at offset %d: length exceeds %d", ErrFrameTooLarge, t, d.off, MaxPayloadV2)
		case l > 1 && b[l] == 0:
			return Frame{}, false, fmt.Errorf("%w: %s frame at offset %d: non-minimal length", ErrPayload, t, d.off)
		}
		n, hl = int(x), 1+l
	}
	if len(b) < hl+n {
		return Frame{}, false, nil
	}
	f = Frame{Type: t, Payload: b[hl : hl+n : hl+n]}
	if t == FrameDone {
		if n != 0 {
			return Frame{}, false, fmt.Errorf("%w: done frame at offset %d has %d payload bytes", ErrPayload, d.off, n)
		}
		d.done = true
	}
	d.consume(hl + n)
	return f, true, nil
}

func (d *Decoder) consume(n int) {
	d.r += n
	d.off += int64(n)
	if d.r == len(d.buf) {
		d.r, d.buf = 0, d.buf[:0]
	}
}

// Reader reads frames from an io.Reader through a Decoder, reading straight into the decoder's
// buffer.
type Reader struct {
	// BeforeRead, if not nil, is called before each read of the underlying reader, that is
	// whenever no complete frame is buffered and the next read may block: a sink flushes there.
	// An error it returns ends the stream.
	BeforeRead func() error

	r   io.Reader
	d   *Decoder
	err error
}

// NewReader returns a Reader of a version-v stream.
func NewReader(r io.Reader, v Version) *Reader { return &Reader{r: r, d: NewDecoder(v)} }

// Next returns the next frame, reading as needed; the payload is valid until the next call.
// After the done frame it returns io.EOF (or ErrAfterDone if more bytes follow); a stream that
// ends before its done frame gives io.ErrUnexpectedEOF.
func (r *Reader) Next() (Frame, error) {
	for {
		f, ok, err := r.d.Next()
		if err != nil {
			return Frame{}, err
		}
		if ok {
			return f, nil
		}
		if r.d.done {
			// Check nothing follows the done frame.
			if _, err := r.fill(); err != nil && err != io.EOF {
				return Frame{}, err
			}
			if r.d.Buffered() > 0 {
				continue // Next reports ErrAfterDone
			}
			return Frame{}, io.EOF
		}
		if r.err != nil {
			return Frame{}, r.err
		}
		n, err := r.fill()
		if err == io.EOF && n == 0 {
			if r.d.Buffered() > 0 || !r.d.header {
				r.err = fmt.Errorf("binary: stream ends inside a frame (%d bytes buffered): %w", r.d.Buffered(), io.ErrUnexpectedEOF)
			} else {
				r.err = fmt.Errorf("binary: stream ends before the done frame: %w", io.ErrUnexpectedEOF)
			}
			return Frame{}, r.err
		}
		if err != nil && err != io.EOF {
			r.err = err
		}
	}
}

// fill reads once into the decoder's buffer.
func (r *Reader) fill() (int, error) {
	if r.BeforeRead != nil {
		if err := r.BeforeRead(); err != nil {
			return 0, err
		}
	}
	d := r.d
	d.compact()
	if len(d.buf) == cap(d.buf) {
		d.buf = append(d.buf, 0)[:len(d.buf)]
	}
	n, err := r.r.Read(d.buf[len(d.buf):cap(d.buf)])
	d.buf = d.buf[:len(d.buf)+n]
	return n, err
}

// AppendTokens appends the IDs of a token frame's payload to dst.
func AppendTokens(dst []uint32, v Version, p []byte) ([]uint32, error) {
	if v == V1 {
		if len(p)%2 != 0 {
			return dst, fmt.Errorf("%w: token frame of odd length %d", ErrPayload, len(p))
		}
		for i := 0; i < len(p); i += 2 {
			dst = append(dst, uint32(ebin.BigEndian.Uint16(p[i:])))
		}
		return dst, nil
	}
	for len(p) > 0 {
		x, n := ebin.Uvarint(p)
		if n <= 0 || x > math.MaxUint32 {
			return dst, fmt.Errorf("%w: bad token ID varint", ErrPayload)
		}
		dst = append(dst, uint32(x))
		p = p[n:]
	}
	return dst, nil
}

// Usage is a usage frame's counts. Version 1 carries no cache counts, only CacheHitRatio;
// version 2 carries the counts, and CacheHitRatio is computed from them.
type Usage struct {
	llm.Usage
	// CacheHitRatio is cache_read / total prompt tokens in units of 0.001%.
	CacheHitRatio uint32
}

// ParseUsage decodes a usage frame's payload.
func ParseUsage(v Version, p []byte) (Usage, error) {
	var u Usage
	if v == V1 {
		if len(p) != 12 {
			return u, fmt.Errorf("%w: usage frame of length %d, want 12", ErrPayload, len(p))
		}
		u.InputTokens = int(ebin.BigEndian.Uint32(p))
		u.OutputTokens = int(ebin.BigEndian.Uint32(p[4:]))
		u.CacheHitRatio = ebin.BigEndian.Uint32(p[8:])
		return u, nil
	}
	pr := payload{b: p}
	u.InputTokens = pr.int()
	u.OutputTokens = pr.int()
	u.CacheCreationInputTokens = pr.int()
	u.CacheReadInputTokens = pr.int()
	if err := pr.end("usage"); err != nil {
		return u, err
	}
	u.CacheHitRatio = CacheHitRatio(u.Usage)
	return u, nil
}

// ParseError decodes an error frame's payload into the error it carries. The kind is the one
// whose status (and, in version 2, type) the frame names.
func ParseError(v Version, p []byte) (*apierr.Error, error) {
	if v == V1 {
		if len(p) < 2 {
			return nil, fmt.Errorf("%w: error frame of length %d, want at least 2", ErrPayload, len(p))
		}
		status := int(ebin.BigEndian.Uint16(p))
		return &apierr.Error{Kind: kindFor(status, ""), Message: string(p[2:]), Cause: apierr.ErrEngineSaid}, nil
	}
	pr := payload{b: p}
	status := pr.int()
	typ := pr.str()
	code := pr.str()
	if pr.err != nil {
		return nil, fmt.Errorf("%w: error frame", ErrPayload)
	}
	return &apierr.Error{Kind: kindFor(status, string(typ)), Code: string(code), Message: string(pr.b), Cause: apierr.ErrEngineSaid}, nil
}

// kindFor finds the kind with the status and Anthropic type ("" matches any type).
func kindFor(status int, typ string) apierr.Kind {
	for k := apierr.API; k <= apierr.Unavailable; k++ {
		if k.Status() == status && (typ == "" || k.AnthropicType() == typ) {
			return k
		}
	}
	return apierr.KindForStatus(status)
}

// Start is a version-2 start frame. Its slices alias the payload.
type Start struct {
	ID, Model []byte
	Usage     llm.Usage // input and cache counts
}

// ParseStart decodes a version-2 start frame's payload.
func ParseStart(p []byte) (Start, error) {
	pr := payload{b: p}
	s := Start{ID: pr.str(), Model: pr.str()}
	s.Usage.InputTokens = pr.int()
	s.Usage.CacheCreationInputTokens = pr.int()
	s.Usage.CacheReadInputTokens = pr.int()
	return s, pr.end("start")
}

// BlockStart is a version-2 block_start frame. ID and Name (tool_use only) alias the payload.
type BlockStart struct {
	Kind     byte // BlockKindText or BlockKindToolUse
	ID, Name []byte
}

// ParseBlockStart decodes a version-2 block_start frame's payload.
func ParseBlockStart(p []byte) (BlockStart, error) {
	if len(p) == 0 {
		return BlockStart{}, fmt.Errorf("%w: empty block_start frame", ErrPayload)
	}
	pr := payload{b: p[1:]}
	bs := BlockStart{Kind: p[0]}
	switch bs.Kind {
	case BlockKindText:
	case BlockKindToolUse:
		bs.ID, bs.Name = pr.str(), pr.str()
	default:
		return bs, fmt.Errorf("%w: block kind %d", ErrPayload, bs.Kind)
	}
	return bs, pr.end("block_start")
}

// ParseStop decodes a version-2 stop frame's payload; the sequence aliases it.
func ParseStop(p []byte) (llm.StopReason, []byte, error) {
	if len(p) == 0 || p[0] > byte(llm.StopRefusal) {
		return 0, nil, fmt.Errorf("%w: stop frame", ErrPayload)
	}
	return llm.StopReason(p[0]), p[1:], nil
}

// payload reads uvarints and strs from a version-2 payload, remembering the first error.
type payload struct {
	b   []byte
	err error
}

func (p *payload) int() int {
	if p.err != nil {
		return 0
	}
	x, n := ebin.Uvarint(p.b)
	if n <= 0 || x > math.MaxInt32 {
		p.err = ErrPayload
		return 0
	}
	p.b = p.b[n:]
	return int(x)
}

func (p *payload) str() []byte {
	n := p.int()
	if p.err != nil {
		return nil
	}
	if n > len(p.b) {
		p.err = ErrPayload
		return nil
	}
	s := p.b[:n:n]
	p.b = p.b[n:]
	return s
}

func (p *payload) end(frame string) error {
	if p.err == nil && len(p.b) > 0 {
		p.err = ErrPayload
	}
	if p.err != nil {
		return fmt.Errorf("%w: %s frame", ErrPayload, frame)
	}
	return nil
}
