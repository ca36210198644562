package anthropic

import (
	"errors"
	"fmt"
	"io"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

// errStreamDone is returned by Send after the stream ended (EventStop or WriteError).
var errStreamDone = errors.New("anthropic: event after the end of the stream")

// StreamWriter is an llm.Sink that encodes the event stream as Anthropic SSE. Send appends
// events to a reused buffer; Flush writes the buffer to the writer and calls the flush function,
// so tokens that are ready together go out in one write and none waits for the next. The end of
// the message (EventStop) and WriteError flush at once.
//
// It adds what the wire needs and the canonical stream leaves implicit: the ping after the first
// block start, message_start if the engine sent no EventStart, and content_block_stop for any
// block still open at the end. A StreamWriter is not safe for concurrent use; Reset makes it
// reusable (from a sync.Pool, say). The zero value is not usable: call Reset or NewStreamWriter.
type StreamWriter struct {
	w     io.Writer
	flush func() error
	id    string
	buf   []byte
	open  []int // indexes of the content blocks started and not stopped

	started bool // message_start written
	pinged  bool // ping written
	done    bool // message_stop or error written
	dirty   bool // bytes written since the last flush call
	err     error
}

// NewStreamWriter returns a StreamWriter for the message id (msg_…) that writes to w and calls
// flush (which may be nil) to push written bytes to the network.
func NewStreamWriter(id string, w io.Writer, flush func() error) *StreamWriter {
	s := &StreamWriter{buf: make([]byte, 0, 4096)}
	s.Reset(id, w, flush)
	return s
}

// Reset prepares s for a new stream, keeping its buffers.
func (s *StreamWriter) Reset(id string, w io.Writer, flush func() error) {
	if cap(s.buf) > 1<<20 {
		s.buf = nil // do not keep a huge buffer alive in a pool
	}
	*s = StreamWriter{w: w, flush: flush, id: id, buf: s.buf[:0], open: s.open[:0]}
}

// Send implements llm.Sink. It fails once a write failed (the client went away) and after the
// stream ended.
func (s *StreamWriter) Send(ev *llm.Event) error {
	if s.err != nil {
		return s.err
	}
	if s.done {
		return errStreamDone
	}
	if !s.started {
		s.start(ev)
		if ev.Kind == llm.EventStart {
			return nil
		}
	}
	switch ev.Kind {
	case llm.EventBlockStart:
		s.buf = append(s.buf, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":"...)
		s.buf = appendInt(s.buf, ev.Index)
		if ev.Block == llm.BlockToolUse {
			s.buf = append(s.buf, `,"content_block":{"type":"tool_use","id":`...)
			s.buf = appendString(s.buf, ev.ID)
			s.buf = append(s.buf, `,"name":`...)
			s.buf = appendString(s.buf, ev.Name)
			s.buf = append(s.buf, `,"input":{}}}`+"\n\n"...)
		} else {
			s.buf = append(s.buf, `,"content_block":{"type":"text","text":""}}`+"\n\n"...)
		}
		if !s.pinged {
			s.buf = append(s.buf, "event: ping\ndata: {\"type\":\"ping\"}\n\n"...)
			s.pinged = true
		}
		s.open = append(s.open, ev.Index)
	case llm.EventTextDelta, llm.EventToolDelta:
		if ev.Text == "" {
			return nil
		}
		s.buf = append(s.buf, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":"...)
		s.buf = appendInt(s.buf, ev.Index)
		if ev.Kind == llm.EventTextDelta {
			s.buf = append(s.buf, `,"delta":{"type":"text_delta","text":`...)
		} else {
			s.buf = append(s.buf, `,"delta":{"type":"input_json_delta","partial_json":`...)
		}
		s.buf = appendString(s.buf, ev.Text)
		s.buf = append(s.buf, "}}\n\n"...)
	case llm.EventBlockStop:
		for i, idx := range s.open {
			if idx == ev.Index {
				s.open = append(s.open[:i], s.open[i+1:]...)
				s.blockStop(idx)
				break
			}
		}
	case llm.EventStop:
		for _, idx := range s.open {
			s.blockStop(idx)
		}
		s.open = s.open[:0]
		s.buf = append(s.buf, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\""...)
		s.buf = append(s.buf, ev.Stop.String()...)
		s.buf = append(s.buf, `","stop_sequence":`...)
		s.buf = appendStopSequence(s.buf, ev.StopSequence)
		s.buf = append(s.buf, `},"usage":`...)
		s.buf = appendUsage(s.buf, &ev.Usage, ev.Usage.OutputTokens)
		s.buf = append(s.buf, "}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"...)
		s.done = true
		return s.write(true)
	case llm.EventStart:
		// A second start adds nothing to the wire.
	}
	if len(s.buf) >= llm.WriteThreshold {
		return s.write(false)
	}
	return nil
}

// start writes message_start from ev when it is the EventStart, else with empty usage.
func (s *StreamWriter) start(ev *llm.Event) {
	s.started = true
	var u llm.Usage
	id, model := s.id, ""
	if ev.Kind == llm.EventStart {
		u, model = ev.Usage, ev.Model
		if id == "" {
			id = ev.ID
		}
	}
	s.buf = append(s.buf, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":"...)
	s.buf = appendString(s.buf, id)
	s.buf = append(s.buf, `,"type":"message","role":"assistant","model":`...)
	s.buf = appendString(s.buf, model)
	s.buf = append(s.buf, `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":`...)
	// The real API reports the first output token in message_start.
	s.buf = appendUsage(s.buf, &u, max(u.OutputTokens, 1))
	s.buf = append(s.buf, "}}\n\n"...)
}

func (s *StreamWriter) blockStop(idx int) {
	s.buf = append(s.buf, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":"...)
	s.buf = appendInt(s.buf, idx)
	s.buf = append(s.buf, "}\n\n"...)
}

// Flush implements llm.Sink: it writes what is buffered and calls the flush function.
func (s *StreamWriter) Flush() error {
	if s.err != nil {
		return s.err
	}
	return s.write(true)
}

// WriteError ends the stream with an error event, {"type":"error","error":{"type":…,"message":…}},
// after whatever was buffered, and flushes. It is how a failure after the first byte reaches the
// client, since the status code can no longer change.
func (s *StreamWriter) WriteError(e *apierr.Error) error {
	if s.err != nil {
		return s.err
	}
	s.buf = append(s.buf, "event: error\ndata: "...)
	s.buf = appendErrorObject(s.buf, e)
	s.buf = append(s.buf, "}\n\n"...)
	s.done = true
	return s.write(true)
}

// write sends the buffer to the writer and, when flush is set and anything was written since the
// last flush, calls the flush function.
func (s *StreamWriter) write(flush bool) error {
	if len(s.buf) > 0 {
		_, err := s.w.Write(s.buf)
		s.buf = s.buf[:0]
		if err != nil {
			s.err = fmt.Errorf("anthropic: write stream: %w", err)
			return s.err
		}
		s.dirty = true
	}
	if flush && s.dirty && s.flush != nil {
		s.dirty = false
		if err := s.flush(); err != nil {
			s.err = fmt.Errorf("anthropic: flush stream: %w", err)
			return s.err
		}
	}
	return nil
}
