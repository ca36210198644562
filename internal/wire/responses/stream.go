package responses

import (
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/ids"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
	"github.com/layer0ai/layer0/internal/wire/openai"
)

// StreamWriter is an llm.Sink that writes the Responses SSE event sequence, each event as
// `event: TYPE` and `data: {"type":TYPE,"sequence_number":N,…}`:
//
//	response.created, response.in_progress                 (the response object, in_progress)
//	per text block:  response.output_item.added (message), response.content_part.added,
//	                 response.output_text.delta…, response.output_text.done,
//	                 response.content_part.done, response.output_item.done
//	per tool_use:    response.output_item.added (function_call),
//	                 response.function_call_arguments.delta…, …arguments.done,
//	                 response.output_item.done
//	response.completed (or response.incomplete when max_output_tokens cut it), with usage
//
// A failure after the stream began ends it with an error event and response.failed. Sequence
// numbers count from 0 across the whole stream. Send appends to a buffer reused for the whole
// stream; Flush writes it in one call and flushes the writer. The writer keeps the answer (the
// final response object needs it) and hands it out with Response and Object. A StreamWriter is
// not safe for concurrent use.
type StreamWriter struct {
	meta  *Meta
	w     io.Writer
	flush func() error
	buf   []byte
	seq   int64
	col   llm.Collector
	ids   []string // per block index: the item id
	calls []string // per block index: the call id of a tool_use block
	out   []int    // per block index: the output index + 1 (0: no item)
	nOut  int
	obj   []byte // the last response object written
	state uint8
	err   error
}

const (
	stateNew uint8 = iota
	stateStreaming
	stateDone
	stateFailed
)

// NewStreamWriter returns a StreamWriter writing m's response to w; flush, when not nil, pushes
// what was written to the client.
func NewStreamWriter(m *Meta, w io.Writer, flush func() error) *StreamWriter {
	return &StreamWriter{meta: m, w: w, flush: flush, buf: make([]byte, 0, 4096)}
}

// event appends the head of an event of type typ, up to the comma after its sequence number.
func (s *StreamWriter) event(typ string) {
	s.buf = append(s.buf, "event: "...)
	s.buf = append(s.buf, typ...)
	s.buf = append(s.buf, "\ndata: {\"type\":\""...)
	s.buf = append(s.buf, typ...)
	s.buf = append(s.buf, `","sequence_number":`...)
	s.buf = strconv.AppendInt(s.buf, s.seq, 10)
	s.buf = append(s.buf, ',')
	s.seq++
}

func (s *StreamWriter) end() { s.buf = append(s.buf, "}\n\n"...) }

// itemRef appends `"item_id":…,"output_index":N` for block i.
func (s *StreamWriter) itemRef(i int) {
	s.buf = append(s.buf, `"item_id":`...)
	s.buf = jsontext.AppendString(s.buf, s.ids[i])
	s.buf = append(s.buf, `,"output_index":`...)
	s.buf = strconv.AppendInt(s.buf, int64(s.out[i]-1), 10)
}

// Send implements llm.Sink.
func (s *StreamWriter) Send(ev *llm.Event) error {
	if s.err != nil {
		return s.err
	}
	if s.state >= stateDone {
		return errors.New("responses: event after the end of the stream")
	}
	if s.state == stateNew {
		if ev.Kind != llm.EventStart {
			return fmt.Errorf("responses: stream must begin with a start event, got kind %d", ev.Kind)
		}
		_ = s.col.Send(ev)
		s.response("response.created", statusInProgress, nil)
		s.response("response.in_progress", statusInProgress, nil)
		s.state = stateStreaming
		return nil
	}
	_ = s.col.Send(ev)
	switch ev.Kind {
	case llm.EventBlockStart:
		s.blockStart(ev)
	case llm.EventTextDelta:
		if ev.Text == "" || !s.open(ev.Index) {
			return nil
		}
		s.event("response.output_text.delta")
		s.itemRef(ev.Index)
		s.buf = append(s.buf, `,"content_index":0,"delta":`...)
		s.buf = jsontext.AppendString(s.buf, ev.Text)
		s.buf = append(s.buf, `,"logprobs":[]`...)
		s.end()
	case llm.EventToolDelta:
		if ev.Text == "" || !s.open(ev.Index) {
			return nil
		}
		s.event("response.function_call_arguments.delta")
		s.itemRef(ev.Index)
		s.buf = append(s.buf, `,"delta":`...)
		s.buf = jsontext.AppendString(s.buf, ev.Text)
		s.end()
	case llm.EventBlockStop:
		s.blockStop(ev.Index)
	case llm.EventStop:
		st := statusOf(ev.Stop)
		typ := "response.completed"
		if st == statusIncomplete {
			typ = "response.incomplete"
		}
		u := ev.Usage
		s.response(typ, st, &u)
		s.state = stateDone
	}
	s.buf, s.err = openai.Spill("responses", s.w, s.buf)
	return s.err
}

// blockStart opens the output item of a text or tool-use block (others have none): a message
// with its empty text part, or a function call.
func (s *StreamWriter) blockStart(ev *llm.Event) {
	if ev.Block != llm.BlockText && ev.Block != llm.BlockToolUse {
		return
	}
	for len(s.out) <= ev.Index {
		s.out, s.ids, s.calls = append(s.out, 0), append(s.ids, ""), append(s.calls, "")
	}
	s.nOut++
	s.out[ev.Index] = s.nOut
	it := outItem{}
	if ev.Block == llm.BlockToolUse {
		it = outItem{call: true, id: ids.FunctionCall(), callID: openai.CallID(ev.ID), name: ev.Name}
		s.calls[ev.Index] = it.callID
	} else {
		it.id = ids.Message()
	}
	s.ids[ev.Index] = it.id
	s.outputItem("response.output_item.added", s.nOut, &it)
	if !it.call {
		s.contentPart("response.content_part.added", ev.Index, "")
	}
}

// blockStop closes the output item of block i, if it has one, with the events that give its
// whole text or arguments.
func (s *StreamWriter) blockStop(i int) {
	if !s.open(i) {
		return
	}
	it := s.item(i)
	if it.call {
		s.event("response.function_call_arguments.done")
		s.itemRef(i)
		s.buf = append(s.buf, `,"name":`...)
		s.buf = jsontext.AppendString(s.buf, it.name)
		s.buf = append(s.buf, `,"arguments":`...)
		s.buf = jsontext.AppendString(s.buf, it.text)
		s.end()
	} else {
		s.event("response.output_text.done")
		s.itemRef(i)
		s.buf = append(s.buf, `,"content_index":0,"text":`...)
		s.buf = jsontext.AppendString(s.buf, it.text)
		s.buf = append(s.buf, `,"logprobs":[]`...)
		s.end()
		s.contentPart("response.content_part.done", i, it.text)
	}
	s.outputItem("response.output_item.done", s.out[i], &it)
}

// contentPart writes the event typ, a content_part event, of the text part of block i's message,
// holding text.
func (s *StreamWriter) contentPart(typ string, i int, text string) {
	s.event(typ)
	s.itemRef(i)
	s.buf = append(s.buf, `,"content_index":0,"part":`...)
	s.buf = appendTextPart(s.buf, text)
	s.end()
}

// outputItem writes the event typ, an output_item event, of item it, the n-th output (from 1).
func (s *StreamWriter) outputItem(typ string, n int, it *outItem) {
	s.event(typ)
	s.buf = append(s.buf, `"output_index":`...)
	s.buf = strconv.AppendInt(s.buf, int64(n-1), 10)
	s.buf = append(s.buf, `,"item":`...)
	s.buf = appendItem(s.buf, it, s.namespaces())
	s.end()
}

// open reports whether block i has an item.
func (s *StreamWriter) open(i int) bool { return i >= 0 && i < len(s.out) && s.out[i] > 0 }

func (s *StreamWriter) namespaces() map[string]string {
	if s.meta.Extras == nil {
		return nil
	}
	return s.meta.Extras.Namespaces
}

// item returns block i as a complete output item.
func (s *StreamWriter) item(i int) outItem {
	r := &s.col.Response
	var b llm.Block
	if i < len(r.Content) {
		b = r.Content[i]
	}
	if b.Type == llm.BlockToolUse {
		args := string(b.Input)
		if args == "" {
			args = "{}"
		}
		return outItem{call: true, id: s.ids[i], callID: s.calls[i], name: b.Name, text: args, complete: true}
	}
	return outItem{id: s.ids[i], text: b.Text, complete: true}
}

// output returns the items so far, in output order.
func (s *StreamWriter) output() []outItem {
	out := make([]outItem, s.nOut)
	for i, o := range s.out {
		if o > 0 {
			out[o-1] = s.item(i)
		}
	}
	return out
}

// response appends an event carrying the response object with status st.
func (s *StreamWriter) response(typ string, st status, usage *llm.Usage) {
	s.event(typ)
	s.buf = append(s.buf, `"response":`...)
	o := object{m: s.meta, st: st, usage: usage}
	if st != statusInProgress {
		o.out = s.output()
	}
	s.obj = appendObject(s.obj[:0], &o)
	s.buf = append(s.buf, s.obj...)
	s.end()
}

// Flush implements llm.Sink: it writes what is buffered in one Write and flushes the writer.
func (s *StreamWriter) Flush() error {
	if s.err == nil && len(s.buf) > 0 {
		s.err = openai.WriteStream("responses", s.w, s.buf, s.flush)
		s.buf = s.buf[:0]
	}
	return s.err
}

// Done reports whether the stream ended with response.completed or response.incomplete.
func (s *StreamWriter) Done() bool { return s.state == stateDone }

// Response returns the answer streamed so far (complete once Done).
func (s *StreamWriter) Response() *llm.Response { return &s.col.Response }

// Object returns the last response object written (the final one once Done); it is valid until
// the next Send.
func (s *StreamWriter) Object() []byte { return s.obj }

// WriteError ends the stream for a failure after it began: an error event, then response.failed
// with the output so far and the error.
//
//	event: error
//	data: {"type":"error","sequence_number":N,"code":"…","message":"…","param":null}
func (s *StreamWriter) WriteError(e *apierr.Error) error {
	if s.err != nil {
		return s.err
	}
	_, code := openai.ErrorTypeCode(e)
	if code == "" {
		code = "server_error"
	}
	s.event("error")
	s.buf = append(s.buf, `"code":`...)
	s.buf = jsontext.AppendString(s.buf, code)
	s.buf = append(s.buf, `,"message":`...)
	s.buf = jsontext.AppendString(s.buf, e.Message)
	s.buf = append(s.buf, `,"param":`...)
	if e.Param != "" {
		s.buf = jsontext.AppendString(s.buf, ClientParam(e.Param))
	} else {
		s.buf = append(s.buf, "null"...)
	}
	s.end()
	if s.state != stateNew {
		s.event("response.failed")
		s.buf = append(s.buf, `"response":`...)
		s.obj = appendObject(s.obj[:0], &object{m: s.meta, st: statusFailed, out: s.output(), err: e})
		s.buf = append(s.buf, s.obj...)
		s.end()
	}
	s.state = stateFailed
	return s.Flush()
}
