package binary

import (
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/vocab"
)

// ReadStream decodes a response stream of mode m from r and pushes its events into sink in the
// order llm.EventKind documents, flushing sink whenever the next read may block. voc decodes
// token IDs (unused in text mode). It returns nil after the done frame of a response that
// stopped, the *apierr.Error an error frame carries, or a decoding or read error.
//
// Text deltas hold whole UTF-8 characters: the bytes of a character split across frames are
// kept until it is complete (a token may end inside a character). Version 1 has no start, block
// or stop frames: the events are synthesized (one text block, no id or model, stop reason
// max_tokens when the output tokens reached m.MaxTokens, else end_turn), and its usage has no cache counts. Unknown version-2 frame types are skipped.
func ReadStream(r io.Reader, m Mode, voc *vocab.Vocab, sink llm.Sink) error {
	rd := NewReader(r, m.Version)
	rd.BeforeRead = sink.Flush
	st := streamState{m: m, voc: voc, sink: sink, blocks: -1}
	for {
		f, err := rd.Next()
		if err == io.EOF {
			if !st.stopped {
				return fmt.Errorf("binary: stream done without a usage frame: %w", io.ErrUnexpectedEOF)
			}
			return sink.Flush()
		}
		if err != nil {
			return err
		}
		if err := st.frame(f); err != nil {
			return err
		}
	}
}

// streamState turns frames into events.
type streamState struct {
	m       Mode
	voc     *vocab.Vocab
	sink    llm.Sink
	ev      llm.Event
	started bool
	blocks  int  // index of the last block opened; -1 before the first
	open    bool // a block is open
	stopped bool // the stop (v2) or usage (v1) frame was seen
	usage   llm.Usage
	stop    llm.StopReason
	stopSeq string
	ids     []uint32
	text    []byte // decoded text not yet sent: an incomplete UTF-8 sequence at most, between frames
}

func (s *streamState) send(kind llm.EventKind) error {
	s.ev.Kind = kind
	err := s.sink.Send(&s.ev)
	s.ev = llm.Event{}
	return err
}

// start synthesizes the start event (version 1, or a version-2 stream without one).
func (s *streamState) start() error {
	if s.started {
		return nil
	}
	s.started = true
	return s.send(llm.EventStart)
}

// openText makes sure a text block is open (version 1 opens one at the first token).
func (s *streamState) openText() error {
	if s.open {
		return nil
	}
	return s.openBlock(llm.BlockText, nil, nil)
}

// openBlock closes the open block, if any, and opens the next one.
func (s *streamState) openBlock(typ llm.BlockType, id, name []byte) error {
	if err := s.start(); err != nil {
		return err
	}
	if err := s.closeBlock(); err != nil {
		return err
	}
	s.blocks++
	s.open = true
	s.ev.Index, s.ev.Block, s.ev.ID, s.ev.Name = s.blocks, typ, string(id), string(name)
	return s.send(llm.EventBlockStart)
}

// textDelta sends the complete characters of s.text and keeps an incomplete tail.
func (s *streamState) textDelta(final bool) error {
	n := len(s.text)
	if !final {
		n = completeUTF8(s.text)
	}
	if n == 0 {
		return nil
	}
	s.ev.Index, s.ev.Text = s.blocks, string(s.text[:n])
	s.text = s.text[:copy(s.text, s.text[n:])]
	return s.send(llm.EventTextDelta)
}

// completeUTF8 returns the length of the longest prefix of b that does not end inside a valid
// UTF-8 sequence that later bytes could complete.
func completeUTF8(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}

func (s *streamState) closeBlock() error {
	if !s.open {
		return nil
	}
	if err := s.textDelta(true); err != nil {
		return err
	}
	s.open = false
	s.ev.Index = s.blocks
	return s.send(llm.EventBlockStop)
}

func (s *streamState) frame(f Frame) error {
	v1 := s.m.Version == V1
	switch f.Type {
	case FrameToken, FrameText:
		if err := s.openText(); err != nil {
			return err
		}
		if f.Type == FrameText {
			s.text = append(s.text, f.Payload...)
		} else {
			var err error
			if s.ids, err = AppendTokens(s.ids[:0], s.m.Version, f.Payload); err != nil {
				return err
			}
			if s.text, err = s.voc.AppendDecoded(s.text, s.ids); err != nil {
				return fmt.Errorf("binary: token frame: %w", err)
			}
		}
		return s.textDelta(false)
	case FrameUsage:
		u, err := ParseUsage(s.m.Version, f.Payload)
		if err != nil {
			return err
		}
		s.usage = u.Usage
		if v1 {
			s.stopped = true
			if s.m.MaxTokens > 0 && u.Usage.OutputTokens >= s.m.MaxTokens {
				s.stop = llm.StopMaxTokens
			}
		}
	case FrameError:
		e, err := ParseError(s.m.Version, f.Payload)
		if err != nil {
			return err
		}
		return e
	case FrameDone:
		if !s.stopped {
			return nil // ReadStream reports the missing usage
		}
		if err := s.start(); err != nil {
			return err
		}
		if err := s.closeBlock(); err != nil {
			return err
		}
		s.ev.Stop, s.ev.StopSequence, s.ev.Usage = s.stop, s.stopSeq, s.usage
		return s.send(llm.EventStop)
	}
	if v1 {
		return nil
	}
	switch f.Type {
	case FrameStart:
		st, err := ParseStart(f.Payload)
		if err != nil {
			return err
		}
		if s.started {
			return fmt.Errorf("%w: second start frame", ErrPayload)
		}
		s.started = true
		s.ev.ID, s.ev.Model, s.ev.Usage = string(st.ID), string(st.Model), st.Usage
		return s.send(llm.EventStart)
	case FrameBlockStart:
		bs, err := ParseBlockStart(f.Payload)
		if err != nil {
			return err
		}
		if bs.Kind == BlockKindToolUse {
			return s.openBlock(llm.BlockToolUse, bs.ID, bs.Name)
		}
		return s.openBlock(llm.BlockText, nil, nil)
	case FrameToolInput:
		if !s.open {
			return fmt.Errorf("%w: tool_input frame outside a block", ErrPayload)
		}
		s.ev.Index, s.ev.Text = s.blocks, string(f.Payload)
		return s.send(llm.EventToolDelta)
	case FrameBlockStop:
		return s.closeBlock()
	case FrameStop:
		reason, seq, err := ParseStop(f.Payload)
		if err != nil {
			return err
		}
		s.stopped, s.stop, s.stopSeq = true, reason, string(seq)
	}
	return nil // a frame type this version does not know: skipped
}
