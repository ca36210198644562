package openai

import (
	"errors"
	"fmt"
	"io"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

// StreamWriter is an llm.Sink that writes a Chat Completions SSE stream:
//
//	data: {"id":"chatcmpl-…","object":"chat.completion.chunk","created":…,"model":"…","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}
//	data: {…"delta":{"content":"Hel"}…}
//	data: {…"delta":{"tool_calls":[{"index":0,"id":"call_…","type":"function","function":{"name":"f","arguments":""}}]}…}
//	data: {…"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":"}}]}…}
//	data: {…"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]}
//	data: {…"choices":[],"usage":{…}}            (only with stream_options.include_usage)
//	data: [DONE]
//
// Every chunk carries the same id: the official SDKs drop chunks whose id differs. No chunk
// carries an "error" key except the one WriteError writes, because the SDKs end the stream with
// an error on any chunk that has one, even "error": null.
//
// Send appends to a buffer that is reused for the whole stream; Flush writes it to the writer
// in one call and flushes the writer if it can (http.Flusher). A text delta allocates nothing.
// A StreamWriter is not safe for concurrent use.
type StreamWriter struct {
	// ID is the completion id; when empty, ChatID of the EventStart id.
	ID string
	// Model is the model name the client sees; when empty, the EventStart model.
	Model string
	// Created is the Unix time in seconds put in every chunk.
	Created int64
	// IncludeUsage sends the usage-only chunk before [DONE] (stream_options.include_usage).
	IncludeUsage bool

	w      io.Writer
	buf    []byte
	head   []byte // `data: {"id":…,"choices":[{"index":0,"delta":` shared by all chunks
	tools  []int  // block index → tool call index + 1 (0: not a tool block)
	nTools int
	start  llm.Usage
	state  uint8
	err    error
}

const (
	stateNew uint8 = iota
	stateStreaming
	stateDone
)

const chunkTail = `,"logprobs":null,"finish_reason":null}]}` + "\n\n"

// NewStreamWriter returns a StreamWriter writing to w. Set its exported fields before the first
// Send.
func NewStreamWriter(w io.Writer) *StreamWriter {
	return &StreamWriter{w: w, buf: make([]byte, 0, 4096)}
}

// Reset makes the StreamWriter ready for a new stream to w, keeping its buffers.
func (s *StreamWriter) Reset(w io.Writer) {
	*s = StreamWriter{w: w, buf: s.buf[:0], head: s.head[:0], tools: s.tools[:0]}
}

// Send implements llm.Sink.
func (s *StreamWriter) Send(ev *llm.Event) error {
	if s.err != nil {
		return s.err
	}
	if s.state == stateDone {
		return errors.New("openai: event after the end of the stream")
	}
	if s.state == stateNew {
		if ev.Kind != llm.EventStart {
			return fmt.Errorf("openai: stream must begin with a start event, got kind %d", ev.Kind)
		}
		s.begin(ev)
		return nil
	}
	switch ev.Kind {
	case llm.EventBlockStart:
		if ev.Block != llm.BlockToolUse {
			return nil
		}
		for len(s.tools) <= ev.Index {
			s.tools = append(s.tools, 0)
		}
		s.nTools++
		s.tools[ev.Index] = s.nTools
		s.buf = append(s.buf, s.head...)
		s.buf = append(s.buf, `{"tool_calls":[{"index":`...)
		s.buf = appendInt(s.buf, int64(s.nTools-1))
		s.buf = append(s.buf, `,"id":`...)
		s.buf = appendString(s.buf, CallID(ev.ID))
		s.buf = append(s.buf, `,"type":"function","function":{"name":`...)
		s.buf = appendString(s.buf, ev.Name)
		s.buf = append(s.buf, `,"arguments":""}}]}`...)
		s.buf = append(s.buf, chunkTail...)
	case llm.EventTextDelta:
		if ev.Text == "" {
			return nil
		}
		s.buf = append(s.buf, s.head...)
		s.buf = append(s.buf, `{"content":`...)
		s.buf = appendString(s.buf, ev.Text)
		s.buf = append(s.buf, '}')
		s.buf = append(s.buf, chunkTail...)
	case llm.EventToolDelta:
		if ev.Text == "" || ev.Index >= len(s.tools) || s.tools[ev.Index] == 0 {
			return nil
		}
		s.buf = append(s.buf, s.head...)
		s.buf = append(s.buf, `{"tool_calls":[{"index":`...)
		s.buf = appendInt(s.buf, int64(s.tools[ev.Index]-1))
		s.buf = append(s.buf, `,"function":{"arguments":`...)
		s.buf = appendString(s.buf, ev.Text)
		s.buf = append(s.buf, "}}]}"...)
		s.buf = append(s.buf, chunkTail...)
	case llm.EventStop:
		s.buf = append(s.buf, s.head...)
		s.buf = append(s.buf, `{},"logprobs":null,"finish_reason":`...)
		s.buf = appendString(s.buf, FinishReason(ev.Stop))
		s.buf = append(s.buf, "}]}\n\n"...)
		if s.IncludeUsage {
			// The usage chunk has no choice: cut the head before its choices array.
			h := s.head[:len(s.head)-len(choicesHead)]
			s.buf = append(s.buf, h...)
			s.buf = append(s.buf, `[],"usage":`...)
			s.buf = appendUsage(s.buf, ev.Usage)
			s.buf = append(s.buf, "}\n\n"...)
		}
		s.buf = append(s.buf, "data: [DONE]\n\n"...)
		s.state = stateDone
	}
	s.buf, s.err = Spill("openai", s.w, s.buf)
	return s.err
}

const choicesHead = `[{"index":0,"delta":`

func (s *StreamWriter) begin(ev *llm.Event) {
	id := s.ID
	if id == "" {
		id = ChatID(ev.ID)
		s.ID = id
	}
	model := s.Model
	if model == "" {
		model = ev.Model
	}
	h := append(s.head[:0], `data: {"id":`...)
	h = appendString(h, id)
	h = append(h, `,"object":"chat.completion.chunk","created":`...)
	h = appendInt(h, s.Created)
	h = append(h, `,"model":`...)
	h = appendString(h, model)
	h = append(h, `,"system_fingerprint":null,"choices":`...)
	h = append(h, choicesHead...)
	s.head = h
	s.start = ev.Usage
	s.buf = append(s.buf, h...)
	s.buf = append(s.buf, `{"role":"assistant","content":""}`...)
	s.buf = append(s.buf, chunkTail...)
	s.state = stateStreaming
}

// Flush implements llm.Sink: it writes what is buffered in one Write and flushes the writer.
func (s *StreamWriter) Flush() error {
	if s.err == nil && len(s.buf) > 0 {
		s.err = WriteStream("openai", s.w, s.buf, func() error { return flushWriter(s.w) })
		s.buf = s.buf[:0]
	}
	return s.err
}

// WriteStream writes buf, the events a stream writer buffered, to w in one Write, then calls
// flush (nil: none) to push them to the client. Its error names api, the stream's package:
// "openai: write stream: …".
func WriteStream(api string, w io.Writer, buf []byte, flush func() error) error {
	_, err := w.Write(buf)
	if err == nil && flush != nil {
		err = flush()
	}
	if err != nil {
		return fmt.Errorf("%s: write stream: %w", api, err)
	}
	return nil
}

// Spill writes buf, the events a stream writer buffered, to w once they reach
// llm.WriteThreshold bytes, without flushing, and returns what stays buffered: buf[:0] after a
// write, buf before. A stream writer calls it after each event it buffers.
func Spill(api string, w io.Writer, buf []byte) ([]byte, error) {
	if len(buf) < llm.WriteThreshold {
		return buf, nil
	}
	return buf[:0], WriteStream(api, w, buf, nil)
}

// Done reports whether the stream was completed with [DONE].
func (s *StreamWriter) Done() bool { return s.state == stateDone }

// WriteError ends the stream with an error chunk, for a failure after the stream began:
//
//	data: {"error":{"message":"…","type":"server_error","param":null,"code":"…"}}
//
// The official SDKs turn it into an error returned from the stream, so the client never mistakes
// a failed generation for a complete one. No [DONE] follows. Buffered chunks are written first.
func (s *StreamWriter) WriteError(e *apierr.Error) error {
	if s.err != nil {
		return s.err
	}
	s.buf = append(s.buf, `data: {"error":`...)
	s.buf = appendErrorObject(s.buf, e)
	s.buf = append(s.buf, "}\n\n"...)
	s.state = stateDone
	return s.Flush()
}

// flushWriter flushes w when it can: http.ResponseWriter (http.Flusher) or a bufio.Writer.
func flushWriter(w io.Writer) error {
	switch f := w.(type) {
	case interface{ Flush() error }:
		return f.Flush()
	case interface{ Flush() }:
		f.Flush()
	}
	return nil
}
