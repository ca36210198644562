package binary

import (
	ebin "encoding/binary"
	"errors"
	"io"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/vocab"
)

// writeThreshold is how much a StreamWriter buffers before it writes without a Flush, so an
// engine that never flushes cannot grow the buffer without bound. Writing is not flushing: the
// bytes wait in the transport's buffer until the next Flush.
const writeThreshold = 64 << 10

// errStreamDone is returned by Send after the stream ended (stop event or WriteError).
var errStreamDone = errors.New("binary: event after the end of the stream")

// StreamWriter is the llm.Sink that encodes a response as binary frames.
//
// Send encodes into a buffer; Flush writes the buffer to the network in one write and flushes
// it. Consecutive text (or tool input) deltas between two flushes share one frame, so a frame
// carries every token that was ready when it was written and no token ever waits for another:
// the engine flushes whenever it is about to wait. After its buffers have grown to the largest
// flush, a StreamWriter allocates nothing.
//
// Version 1 writes "ANTH", token frames, then at the stop event a usage frame and done; tool
// deltas and the stop reason have no version-1 frame and are dropped. Version 2 writes
// "ANTH" 0x02 and a frame per event kind.
type StreamWriter struct {
	// ID is the message id sent in version 2's start frame when the engine's start event has
	// none (engines leave ids to the front; the server sets a msg_ id here).
	ID string

	w     io.Writer
	flush func() error // may be nil
	mode  Mode
	voc   *vocab.Vocab

	buf      []byte    // complete frames not yet written
	pend     []byte    // payload of the open coalesced frame
	pendType FrameType // its type; valid when pendOpen
	pendOpen bool
	ids      []uint32 // scratch for vocabulary IDs
	inTool   bool     // the open block is a tool_use block

	wrote bool  // bytes reached w
	dirty bool  // bytes reached w since the last flush
	done  bool  // the done frame is buffered or written
	err   error // the first write error; every later call returns it
}

// NewStreamWriter returns a StreamWriter writing to w and calling flush (if not nil) after each
// write so the bytes reach the client at once. voc encodes text into token IDs (nil means
// vocab.Default()); it is not used in text mode. The magic (and version) are buffered now and go
// out with the first frames.
func NewStreamWriter(w io.Writer, flush func() error, mode Mode, voc *vocab.Vocab) (*StreamWriter, error) {
	if mode.Version != V1 && mode.Version != V2 {
		return nil, errors.New("binary: NewStreamWriter: unsupported version")
	}
	if voc == nil && !(mode.Version == V2 && mode.Text) {
		voc = vocab.Default()
	}
	if mode.Version == V1 {
		mode.Text = false
		if voc.Len() > MaxVocabV1 {
			return nil, ErrVocabTooLarge
		}
	}
	s := &StreamWriter{w: w, flush: flush, mode: mode, voc: voc, buf: make([]byte, 0, 512), pend: make([]byte, 0, 256)}
	s.buf = append(s.buf, Magic...)
	if mode.Version != V1 {
		s.buf = append(s.buf, byte(mode.Version))
	}
	return s, nil
}

// Mode returns the writer's mode.
func (s *StreamWriter) Mode() Mode { return s.mode }

// Wrote reports whether any byte reached the writer: until then an error can still be an HTTP
// error response, after it only an error frame.
func (s *StreamWriter) Wrote() bool { return s.wrote }

// Done reports whether the done frame was written or buffered.
func (s *StreamWriter) Done() bool { return s.done }

// Send implements llm.Sink. It buffers; nothing reaches the writer before Flush.
func (s *StreamWriter) Send(ev *llm.Event) error {
	if s.err != nil {
		return s.err
	}
	if s.done {
		return errStreamDone
	}
	v2 := s.mode.Version != V1
	switch ev.Kind {
	case llm.EventStart:
		if v2 {
			s.closePend()
			s.frame(FrameStart, func(b []byte) []byte {
				id := ev.ID
				if id == "" {
					id = s.ID
				}
				b = appendStr(b, id)
				b = appendStr(b, ev.Model)
				b = ebin.AppendUvarint(b, uint64(nonNeg(ev.Usage.InputTokens)))
				b = ebin.AppendUvarint(b, uint64(nonNeg(ev.Usage.CacheCreationInputTokens)))
				return ebin.AppendUvarint(b, uint64(nonNeg(ev.Usage.CacheReadInputTokens)))
			})
		}
	case llm.EventBlockStart:
		s.inTool = ev.Block == llm.BlockToolUse
		if v2 {
			s.closePend()
			s.frame(FrameBlockStart, func(b []byte) []byte {
				if !s.inTool {
					return append(b, BlockKindText)
				}
				b = append(b, BlockKindToolUse)
				b = appendStr(b, ev.ID)
				return appendStr(b, ev.Name)
			})
		}
	case llm.EventTextDelta:
		s.text(ev.Text)
	case llm.EventToolDelta:
		if v2 {
			s.appendPend(FrameToolInput, ev.Text)
		}
	case llm.EventBlockStop:
		s.inTool = false
		if v2 {
			s.closePend()
			s.frame(FrameBlockStop, nil)
		}
	case llm.EventStop:
		s.closePend()
		u := ev.Usage
		if v2 {
			s.frame(FrameStop, func(b []byte) []byte {
				b = append(b, byte(ev.Stop))
				return append(b, ev.StopSequence...)
			})
			s.frame(FrameUsage, func(b []byte) []byte {
				b = ebin.AppendUvarint(b, uint64(nonNeg(u.InputTokens)))
				b = ebin.AppendUvarint(b, uint64(nonNeg(u.OutputTokens)))
				b = ebin.AppendUvarint(b, uint64(nonNeg(u.CacheCreationInputTokens)))
				return ebin.AppendUvarint(b, uint64(nonNeg(u.CacheReadInputTokens)))
			})
		} else {
			s.frame(FrameUsage, func(b []byte) []byte {
				b = ebin.BigEndian.AppendUint32(b, clampU32(u.InputTokens))
				b = ebin.BigEndian.AppendUint32(b, clampU32(u.OutputTokens))
				return ebin.BigEndian.AppendUint32(b, CacheHitRatio(u))
			})
		}
		s.frame(FrameDone, nil)
		s.done = true
	}
	if len(s.buf)+len(s.pend) > writeThreshold {
		s.closePend()
		return s.write()
	}
	return nil
}

// write writes the buffered frames without flushing.
func (s *StreamWriter) write() error {
	if len(s.buf) == 0 {
		return nil
	}
	_, err := s.w.Write(s.buf)
	s.wrote = true
	s.buf = s.buf[:0]
	s.dirty = true
	if err != nil {
		s.err = err
	}
	return err
}

// text adds a text delta to the open token (or text) frame.
func (s *StreamWriter) text(t string) {
	if t == "" {
		return
	}
	if s.mode.Text {
		s.appendPend(FrameText, t)
		return
	}
	s.ids = s.voc.Append(s.ids[:0], t)
	max := s.maxPayload()
	for _, id := range s.ids {
		if !s.pendOpen || s.pendType != FrameToken || len(s.pend)+ebin.MaxVarintLen32 > max {
			s.closePend()
			s.pendOpen, s.pendType = true, FrameToken
		}
		if s.mode.Version == V1 {
			s.pend = ebin.BigEndian.AppendUint16(s.pend, uint16(id))
		} else {
			s.pend = ebin.AppendUvarint(s.pend, uint64(id))
		}
	}
}

// appendPend adds bytes to the open frame of type t, opening one (and closing another) as
// needed, splitting at the payload limit.
func (s *StreamWriter) appendPend(t FrameType, p string) {
	max := s.maxPayload()
	for len(p) > 0 {
		if !s.pendOpen || s.pendType != t || len(s.pend) == max {
			s.closePend()
			s.pendOpen, s.pendType = true, t
		}
		n := min(len(p), max-len(s.pend))
		s.pend = append(s.pend, p[:n]...)
		p = p[n:]
	}
}

func (s *StreamWriter) maxPayload() int {
	if s.mode.Version == V1 {
		return MaxPayloadV1
	}
	return MaxPayloadV2
}

// closePend moves the open coalesced frame, if any, into buf.
func (s *StreamWriter) closePend() {
	if !s.pendOpen {
		return
	}
	s.buf = s.appendHeader(s.buf, s.pendType, len(s.pend))
	s.buf = append(s.buf, s.pend...)
	s.pend = s.pend[:0]
	s.pendOpen = false
}

func (s *StreamWriter) appendHeader(b []byte, t FrameType, n int) []byte {
	b = append(b, byte(t))
	if s.mode.Version == V1 {
		return ebin.BigEndian.AppendUint16(b, uint16(n))
	}
	return ebin.AppendUvarint(b, uint64(n))
}

// frame appends a complete frame whose payload payload appends (nil: empty). The payload is
// built after a one-byte length, which is patched (or, rarely, widened) afterwards.
func (s *StreamWriter) frame(t FrameType, payload func([]byte) []byte) {
	if payload == nil {
		s.buf = s.appendHeader(s.buf, t, 0)
		return
	}
	if s.mode.Version == V1 {
		s.buf = append(s.buf, byte(t), 0, 0)
		start := len(s.buf)
		s.buf = payload(s.buf)
		if n := len(s.buf) - start; n > MaxPayloadV1 {
			s.buf = s.buf[:start+MaxPayloadV1] // only an error message can be this long
		}
		ebin.BigEndian.PutUint16(s.buf[start-2:], uint16(len(s.buf)-start))
		return
	}
	s.buf = append(s.buf, byte(t), 0)
	start := len(s.buf)
	s.buf = payload(s.buf)
	s.buf = patchUvarintLen(s.buf, start)
}

// patchUvarintLen writes the length of b[start:] as a uvarint into the one byte reserved at
// b[start-1], moving the payload when the length needs more bytes.
func patchUvarintLen(b []byte, start int) []byte {
	n := len(b) - start
	if n < 0x80 {
		b[start-1] = byte(n)
		return b
	}
	var lb [ebin.MaxVarintLen64]byte
	l := ebin.PutUvarint(lb[:], uint64(n))
	b = append(b, lb[:l-1]...)
	copy(b[start+l-1:], b[start:start+n])
	copy(b[start-1:], lb[:l])
	return b
}

// Flush implements llm.Sink: it closes the open frame and writes everything buffered in one
// write, then flushes the connection.
func (s *StreamWriter) Flush() error {
	if s.err != nil {
		return s.err
	}
	s.closePend()
	if len(s.buf) == 0 && !s.dirty {
		return nil
	}
	err := s.write()
	s.dirty = false
	if err == nil && s.flush != nil {
		if err = s.flush(); err != nil {
			s.err = err
		}
	}
	return err
}

// WriteError ends a stream that failed after it began: whatever is buffered, an error frame
// with e's status and client-safe message (in version 2 also its type and code), and done, all
// flushed. After done it does nothing.
func (s *StreamWriter) WriteError(e *apierr.Error) error {
	if s.err != nil {
		return s.err
	}
	if s.done {
		return s.Flush()
	}
	s.closePend()
	if s.mode.Version == V1 {
		s.frame(FrameError, func(b []byte) []byte {
			b = ebin.BigEndian.AppendUint16(b, uint16(e.Status()))
			return append(b, e.Message...)
		})
	} else {
		s.frame(FrameError, func(b []byte) []byte {
			b = ebin.AppendUvarint(b, uint64(e.Status()))
			b = appendStr(b, e.Kind.AnthropicType())
			b = appendStr(b, e.Code)
			return append(b, e.Message...)
		})
	}
	s.frame(FrameDone, nil)
	s.done = true
	return s.Flush()
}

// Close ends the stream: if no stop event or error ended it, a done frame is added; then
// everything buffered is flushed.
func (s *StreamWriter) Close() error {
	if !s.done && s.err == nil {
		s.closePend()
		s.frame(FrameDone, nil)
		s.done = true
	}
	return s.Flush()
}

// CacheHitRatio is the version-1 usage frame's cache_hit_ratio: the share of the prompt's
// tokens read from the cache, cache_read / (input + cache_creation + cache_read), in units of
// 0.001% (92.3% is 92300), rounded down; 0 for an empty prompt.
func CacheHitRatio(u llm.Usage) uint32 {
	total := int64(nonNeg(u.InputTokens)) + int64(nonNeg(u.CacheCreationInputTokens)) + int64(nonNeg(u.CacheReadInputTokens))
	if total == 0 {
		return 0
	}
	return uint32(int64(nonNeg(u.CacheReadInputTokens)) * 100000 / total)
}

func nonNeg(n int) int { return max(n, 0) }

func clampU32(n int) uint32 {
	if n < 0 {
		return 0
	}
	if uint64(n) > 1<<32-1 {
		return 1<<32 - 1
	}
	return uint32(n)
}
