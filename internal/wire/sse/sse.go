// Package sse reads a text/event-stream (the HTML Living Standard's server-sent events) as
// engines send it: one Reader for every stream layer0 reads, whether it forwards the events'
// bytes unchanged or decodes them. The limits (MaxEvent, the fields a line may hold) and the
// flush rule (Buffered) live here and nowhere else. An event comes back as slices of the
// reader's buffer, without a copy, when it lies whole in it.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// MaxEvent bounds one event read by a Reader, in bytes.
const MaxEvent = 8 << 20

// BufferSize is the size of the buffer a Reader reads through; a *bufio.Reader at least this
// large is used as it is.
const BufferSize = 16 << 10

// ErrEventTooLarge is returned for an event longer than MaxEvent.
var ErrEventTooLarge = errors.New("sse: event too large")

// ErrNotSSE is returned (wrapped in a *FieldError) for a line that is none of the fields an
// engine's stream has (data, event, id, retry) nor a comment: garbage, which the SSE grammar
// would skip, is refused so that a broken engine fails its attempt instead of reaching the
// client.
var ErrNotSSE = errors.New("sse: a line of the stream is not an SSE field")

// A FieldError is the error Next returns for a line that is no SSE field; it wraps ErrNotSSE.
// Line is the line without its end, copied: some engines (llama.cpp) write an `error: {…}`
// line in place of an event, which a decoder may read from it.
type FieldError struct{ Line []byte }

func (e *FieldError) Error() string { return ErrNotSSE.Error() }

// Unwrap returns ErrNotSSE.
func (e *FieldError) Unwrap() error { return ErrNotSSE }

// Reader splits a text/event-stream into whole events without decoding their data: each event
// comes back as its raw bytes (to forward unchanged) with its name and data payload located.
// The slices are valid until the next call. A line that is not an SSE field an engine sends
// (data, event, id, retry) or a comment is an error (a *FieldError).
type Reader struct {
	// Lenient skips a line that is no SSE field, as the SSE grammar does, instead of refusing
	// it: for the readers of servers that are not engines (the probe, the load generator),
	// which take what an event stream has and leave the rest.
	Lenient bool

	br   *bufio.Reader
	own  *bufio.Reader // the buffer NewReader or Reset made, kept for the next Reset
	raw  []byte
	data []byte
	// next is the event Buffered found whole by the fast path's scan, which Next then returns
	// without scanning it again (slices of the read buffer, valid as the fast path's are: no
	// read happens between the two calls).
	next struct{ raw, name, data []byte }
}

// NewReader reads events from r. A *bufio.Reader of at least BufferSize bytes (an upstream
// Response's Reader) is read as it is; any other reader gets a buffer of that size.
func NewReader(r io.Reader) *Reader {
	rd := new(Reader) // raw grows only for events the fast path does not take
	rd.Reset(r)
	return rd
}

// Reset makes the Reader read events from r as NewReader(r) would, keeping the buffers it has
// (a pooled Reader reads a stream without allocating). Reset(nil) drops the reference to the
// last stream.
func (r *Reader) Reset(src io.Reader) {
	r.raw, r.data = r.raw[:0], r.data[:0]
	r.next.raw, r.next.name, r.next.data = nil, nil, nil
	if br, ok := src.(*bufio.Reader); ok && br.Size() >= BufferSize {
		r.br = br
		return
	}
	if src == nil {
		r.br = nil
		if r.own != nil {
			r.own.Reset(nil)
		}
		return
	}
	if r.own == nil {
		r.own = bufio.NewReaderSize(src, BufferSize)
	} else {
		r.own.Reset(src)
	}
	r.br = r.own
}

// Buffered reports whether a whole event is already buffered, so that Next returns it without
// waiting for the network. A reader that forwards or decodes events flushes its output when
// it is false: what arrived together goes out together, and nothing is held back while the
// engine is silent (the standard library's ReverseProxy flushes text/event-stream the same
// way). It may report false for an event Next would return at once, never the reverse.
func (r *Reader) Buffered() bool {
	if r.next.raw != nil {
		return true
	}
	raw, name, data, ok, partial := r.scan()
	switch {
	case ok:
		r.next.raw, r.next.name, r.next.data = raw, name, data
		return true
	case partial:
		return false
	}
	// An event the general path reads (leading blank lines, several data: lines): look for
	// its end line by line.
	buf, _ := r.br.Peek(r.br.Buffered())
	leading := true // blank lines before an event are skipped, as Next skips them
	for i := 0; ; {
		j := bytes.IndexByte(buf[i:], '\n')
		if j < 0 {
			return false
		}
		blank := len(bytes.TrimRight(buf[i:i+j], "\r")) == 0
		i += j + 1
		if blank && !leading {
			return true
		}
		leading = leading && blank
	}
}

// Buffer returns the bytes read and not yet returned as events, without reading: for a caller
// that recognises an event from its bytes alone and consumes it with Discard. It is valid until
// the next call of Next, Buffered or Discard, and only between events.
func (r *Reader) Buffer() []byte {
	buf, _ := r.br.Peek(r.br.Buffered())
	return buf
}

// Discard consumes the first n bytes of Buffer, whole events the caller took from it.
func (r *Reader) Discard(n int) {
	r.next.raw, r.next.name, r.next.data = nil, nil, nil
	_, _ = r.br.Discard(n)
}

// Next returns the next event: raw is every byte of it including the blank line that ends it;
// name is its event: field (empty when absent); data is its data: lines joined by '\n'. At the
// end of the input it returns io.EOF, with whatever partial event there was in raw, and its
// name and data as far as they go (a decoder may take an event whose blank line never came).
func (r *Reader) Next() (raw, name, data []byte, err error) {
	if raw = r.next.raw; raw != nil { // found whole by Buffered
		name, data = r.next.name, r.next.data
		r.next.raw, r.next.name, r.next.data = nil, nil, nil
		_, _ = r.br.Discard(len(raw))
		return raw, name, data, nil
	}
	for fills := 0; ; fills++ {
		raw, name, data, ok, partial := r.scan()
		if ok {
			_, _ = r.br.Discard(len(raw))
			return raw, name, data, nil
		}
		if !partial || fills == maxFills || r.br.Buffered() == r.br.Size() {
			break
		}
		// The event's end has not arrived: read once more, as ReadSlice would, and look again
		// rather than copy the event to raw (which would grow raw, allocating, per stream).
		if _, err := r.br.Peek(r.br.Buffered() + 1); err != nil {
			if !errors.Is(err, io.EOF) {
				return nil, nil, nil, err
			}
			break // the general path returns the partial event
		}
	}
	r.raw, r.data = r.raw[:0], r.data[:0]
	ndata := 0
	var nameSpan [2]int
	hasName := false
	for {
		line, err := r.br.ReadSlice('\n')
		for errors.Is(err, bufio.ErrBufferFull) {
			r.raw = append(r.raw, line...)
			if len(r.raw) > MaxEvent {
				return nil, nil, nil, ErrEventTooLarge
			}
			line, err = r.br.ReadSlice('\n')
		}
		ls := len(r.raw)
		r.raw = append(r.raw, line...)
		if len(r.raw) > MaxEvent {
			return nil, nil, nil, ErrEventTooLarge
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, nil, nil, err
		}
		// The whole line, possibly assembled from several reads, is r.raw[ls':]; find its start.
		full := r.raw[lineStart(r.raw, ls):]
		text := bytes.TrimRight(full, "\r\n")
		if len(text) == 0 && err == nil {
			if len(r.raw) == len(full) { // leading blank lines: skip
				r.raw = r.raw[:0]
				continue
			}
			if hasName {
				name = r.raw[nameSpan[0]:nameSpan[1]]
			}
			return r.raw, name, r.data, nil
		}
		off := len(r.raw) - len(full)
		switch {
		case len(text) == 0:
		case bytes.HasPrefix(text, dataField):
			if ndata > 0 {
				r.data = append(r.data, '\n')
			}
			r.data = append(r.data, trimSpace1(text[5:])...)
			ndata++
		case bytes.HasPrefix(text, eventField):
			v := text[6:]
			s := off + 6
			if len(v) > 0 && v[0] == ' ' {
				v, s = v[1:], s+1
			}
			nameSpan, hasName = [2]int{s, s + len(v)}, true
		case err == nil && !r.Lenient && !knownField(text):
			return nil, nil, nil, &FieldError{Line: append([]byte(nil), text...)}
		}
		if err != nil { // io.EOF
			if hasName {
				name = r.raw[nameSpan[0]:nameSpan[1]]
			}
			return r.raw, name, r.data, io.EOF
		}
	}
}

// knownField reports whether an event's line (not blank) is a comment or one of the fields
// an engine's stream has.
func knownField(line []byte) bool {
	if line[0] == ':' {
		return true
	}
	name := line
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name = line[:i]
	}
	switch string(name) {
	case "data", "event", "id", "retry":
		return true
	}
	return false
}

// maxFills bounds the reads Next's fast path makes for one event before it leaves the event to
// the general path, so that an engine trickling bytes costs no more than a few scans of the
// buffer per event.
const maxFills = 4

// scan is Next's fast path, for the usual event: whole in the read buffer, after no blank
// line, with at most one data: line. Its bytes are returned where they lie in the buffer,
// without a copy (valid until the reader reads again, so until the next call); the caller
// consumes them (Discard). It reports false for anything else, which the general path then
// reads; partial says the only reason was that the event's end is not buffered yet
// (BenchmarkReader, 105 Anthropic events: 8.3 µs with the general path alone, 4.2 µs).
func (r *Reader) scan() (raw, name, data []byte, ok, partial bool) {
	buf, _ := r.br.Peek(r.br.Buffered())
	hasData := false
	for i := 0; ; {
		j := bytes.IndexByte(buf[i:], '\n')
		if j < 0 {
			return nil, nil, nil, false, true
		}
		next := i + j + 1
		line := bytes.TrimRight(buf[i:i+j], "\r") // as the general path trims
		switch {
		case len(line) == 0:
			if i == 0 {
				return nil, nil, nil, false, false // leading blank lines: the general path skips them
			}
			return buf[:next:next], name, data, true, false
		case bytes.HasPrefix(line, dataField):
			if hasData {
				return nil, nil, nil, false, false // several data: lines are joined by the general path
			}
			data, hasData = trimSpace1(line[5:]), true
		case bytes.HasPrefix(line, eventField):
			name = trimSpace1(line[6:])
		case !knownField(line):
			return nil, nil, nil, false, false // the general path refuses it
		}
		i = next
	}
}

// trimSpace1 removes the one space that may follow a field's colon.
func trimSpace1(v []byte) []byte {
	if len(v) > 0 && v[0] == ' ' {
		return v[1:]
	}
	return v
}

var (
	dataField  = []byte("data:")
	eventField = []byte("event:")
)

// lineStart returns the index in raw where the line that ends raw began, given that the last
// appended piece started at ls (a long line may have been appended in several pieces before).
func lineStart(raw []byte, ls int) int {
	if i := bytes.LastIndexByte(raw[:ls], '\n'); i >= 0 {
		return i + 1
	}
	return 0
}
