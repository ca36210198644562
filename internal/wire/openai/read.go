package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/ids"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
	"github.com/layer0ai/layer0/internal/wire/sse"
)

// ErrTruncated is the cause of the error ReadStream returns when the engine's stream ends before
// it said how the generation finished.
var ErrTruncated = errors.New("openai: engine stream ended before finish_reason or [DONE]")

// chunkJSON is one streamed chat.completion.chunk, or a completion (message instead of delta).
type chunkJSON struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int          `json:"index"`
		Delta        *deltaJSON   `json:"delta"`
		Message      *deltaJSON   `json:"message"`
		FinishReason *string      `json:"finish_reason"`
		StopReason   stopReasonJS `json:"stop_reason"`
	} `json:"choices"`
	Usage *usageJSON `json:"usage"`
	// Error shapes, as in errorJSON.
	Error   json.RawMessage `json:"error"`
	Object  string          `json:"object"`
	Message string          `json:"message"`
	Code    json.RawMessage `json:"code"`
}

type deltaJSON struct {
	Content   *string          `json:"content"`
	Refusal   *string          `json:"refusal"`
	ToolCalls []streamToolCall `json:"tool_calls"`
}

// streamToolCall is a tool call of an engine's answer, or a piece of one in a stream.
type streamToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// isNull reports whether raw is absent or null.
func isNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

// stopReasonJS is vLLM's stop_reason: the matched stop string, or a stop token id, or null.
type stopReasonJS struct{ s string }

func (s *stopReasonJS) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &s.s)
	}
	s.s = ""
	return nil
}

// reader turns OpenAI chunks into llm events. It opens a text block when content arrives and a
// tool_use block for each new tool call, closing the previous block, so the canonical order
// (BlockStart, deltas, BlockStop) holds whatever the engine interleaves.
type reader struct {
	sink     llm.Sink
	ev       llm.Event
	started  bool
	open     bool // a block is open at index next-1
	openTool int  // OpenAI tool call index of the open block, -1 for text
	next     int  // next block index
	seen     map[int]bool
	finished bool
	stop     llm.StopReason
	stopSeq  string
	usage    llm.Usage
	cv       chunkView // the chunk being read, its slices reused
	memo     chunkMemo // what the last chunks leave for the next
	// args gathers the open tool call's arguments, checked when its block closes: arguments
	// that are not a JSON object would reach an Anthropic client as "input":{} (or a stream
	// of input_json_delta it cannot parse), a tool call it runs with nothing.
	args []byte
	// decodeAll decodes every chunk with encoding/json, never with scanChunk: the reading the
	// jsontext one must equal, which the package's differential tests hold it to.
	decodeAll bool
}

// ErrToolArguments is the cause of the error for a tool call whose arguments are not a JSON
// object.
var ErrToolArguments = errors.New("openai: engine sent tool call arguments that are not a JSON object")

func (rd *reader) send(ev *llm.Event) error { return rd.sink.Send(ev) }

func (rd *reader) startMsg(id, model string) error {
	if rd.started {
		return nil
	}
	rd.started = true
	rd.ev = llm.Event{Kind: llm.EventStart, ID: MessageID(id), Model: model}
	return rd.send(&rd.ev)
}

func (rd *reader) closeBlock() error {
	if !rd.open {
		return nil
	}
	if rd.openTool != -1 && len(bytes.TrimSpace(rd.args)) > 0 && !jsontext.ValidObject(rd.args) {
		return apierr.Wrap(apierr.BadGateway, ErrToolArguments, "engine sent tool call arguments that are not a JSON object")
	}
	rd.open = false
	rd.ev = llm.Event{Kind: llm.EventBlockStop, Index: rd.next - 1}
	return rd.send(&rd.ev)
}

func (rd *reader) text(s string) error {
	if s == "" {
		return nil
	}
	if !rd.open || rd.openTool != -1 {
		if err := rd.closeBlock(); err != nil {
			return err
		}
		rd.ev = llm.Event{Kind: llm.EventBlockStart, Index: rd.next, Block: llm.BlockText}
		rd.next++
		rd.open, rd.openTool = true, -1
		if err := rd.send(&rd.ev); err != nil {
			return err
		}
	}
	rd.ev = llm.Event{Kind: llm.EventTextDelta, Index: rd.next - 1, Text: s}
	return rd.send(&rd.ev)
}

// toolPiece applies a piece of the tool call of OpenAI index idx: its start when it is new, then
// its arguments.
func (rd *reader) toolPiece(idx int, callID, name, args string) error {
	if !rd.open || rd.openTool != idx {
		if rd.seen[idx] {
			return apierr.Wrap(apierr.BadGateway, fmt.Errorf("openai: tool call %d resumed after another began", idx), "engine sent interleaved tool calls")
		}
		if err := rd.closeBlock(); err != nil {
			return err
		}
		if rd.seen == nil {
			rd.seen = map[int]bool{}
		}
		rd.seen[idx] = true
		id := ToolUseID(callID)
		if id == "" {
			id = ids.ToolUse()
		}
		rd.ev = llm.Event{Kind: llm.EventBlockStart, Index: rd.next, Block: llm.BlockToolUse, ID: id, Name: name}
		rd.next++
		rd.open, rd.openTool = true, idx
		rd.args = rd.args[:0]
		if err := rd.send(&rd.ev); err != nil {
			return err
		}
	}
	if args == "" {
		return nil
	}
	rd.args = append(rd.args, args...)
	rd.ev = llm.Event{Kind: llm.EventToolDelta, Index: rd.next - 1, Text: args}
	return rd.send(&rd.ev)
}

func (rd *reader) finish(reason, stopSeq string) error {
	rd.finished = true
	switch reason {
	case "length":
		rd.stop = llm.StopMaxTokens
	case "tool_calls", "function_call":
		rd.stop = llm.StopToolUse
	case "content_filter":
		rd.stop = llm.StopRefusal
	default: // stop, eos and anything new
		rd.stop = llm.StopEndTurn
		if stopSeq != "" {
			rd.stop, rd.stopSeq = llm.StopSequence, stopSeq
		}
	}
	return rd.closeBlock()
}

func (rd *reader) end() error {
	if err := rd.closeBlock(); err != nil {
		return err
	}
	rd.ev = llm.Event{Kind: llm.EventStop, Stop: rd.stop, StopSequence: rd.stopSeq, Usage: rd.usage}
	return rd.send(&rd.ev)
}

// chunk applies one decoded chunk or completion: as the chunkView scanChunk would have read
// from it, so that view is the one reading of a chunk's choices.
func (rd *reader) chunk(c *chunkJSON) error {
	if err := chunkError(c); err != nil {
		return err
	}
	c.view(&rd.cv)
	return rd.view(&rd.cv)
}

// view sets v to the chunkView of c, reusing v's slices.
func (c *chunkJSON) view(v *chunkView) {
	v.reset()
	v.id, v.model = c.ID, c.Model
	for i := range c.Choices {
		ch := &c.Choices[i]
		cv := choiceView{index: ch.Index, stopSeq: ch.StopReason.s}
		if ch.FinishReason != nil {
			cv.finish = *ch.FinishReason
		}
		cv.delta, cv.message = v.deltaOf(ch.Delta), v.deltaOf(ch.Message)
		v.choices = append(v.choices, cv)
	}
	if u := c.Usage; u != nil {
		v.hasUsage = true
		v.usage = usageView{prompt: u.PromptTokens, completion: u.CompletionTokens}
		if d := u.PromptTokensDetails; d != nil {
			v.usage.cached = d.CachedTokens
		}
	}
}

// deltaOf returns the deltaView of d (not present when nil), its tool calls appended to v.calls.
func (v *chunkView) deltaOf(d *deltaJSON) deltaView {
	if d == nil {
		return deltaView{}
	}
	dv := deltaView{present: true, calls0: len(v.calls)}
	if d.Content != nil {
		dv.hasContent, dv.content = true, *d.Content
	}
	if d.Refusal != nil {
		dv.hasRefusal, dv.refusal = true, *d.Refusal
	}
	for i := range d.ToolCalls {
		tc := &d.ToolCalls[i]
		call := callView{id: tc.ID, name: tc.Function.Name, args: tc.Function.Arguments}
		if tc.Index != nil {
			call.index, call.hasIndex = *tc.Index, true
		}
		v.calls = append(v.calls, call)
	}
	dv.calls1 = len(v.calls)
	return dv
}

// data applies the data of one stream event: read by scanChunk, or decoded with encoding/json
// when scanChunk leaves it to it (an error chunk, a malformed one, an odd one).
func (rd *reader) data(data []byte) error {
	if !rd.decodeAll && scanChunk(data, &rd.cv, !rd.started, &rd.memo) {
		return rd.view(&rd.cv)
	}
	var c chunkJSON
	if err := json.Unmarshal(data, &c); err != nil {
		return apierr.Wrap(apierr.BadGateway, fmt.Errorf("openai: bad chunk: %w", err), "engine sent an invalid stream chunk")
	}
	return rd.chunk(&c)
}

// view applies a chunk scanChunk read, or one decoded (chunk).
func (rd *reader) view(v *chunkView) error {
	if err := rd.startMsg(v.id, v.model); err != nil {
		return err
	}
	for i := range v.choices {
		ch := &v.choices[i]
		if ch.index != 0 {
			continue
		}
		d := &ch.delta
		if !d.present {
			d = &ch.message
		}
		if d.present {
			if d.hasContent {
				if err := rd.text(d.content); err != nil {
					return err
				}
			}
			if d.hasRefusal {
				if err := rd.text(d.refusal); err != nil {
					return err
				}
			}
			for j, tc := range v.calls[d.calls0:d.calls1] {
				idx := j
				if tc.hasIndex {
					idx = tc.index
				}
				if err := rd.toolPiece(idx, tc.id, tc.name, tc.args); err != nil {
					return err
				}
			}
		}
		if ch.finish != "" {
			if err := rd.finish(ch.finish, ch.stopSeq); err != nil {
				return err
			}
		}
	}
	if v.hasUsage {
		rd.usage = canonicalUsage(v.usage.prompt, v.usage.completion, v.usage.cached)
	}
	return nil
}

// chunkError returns the error a chunk carries, if any.
func chunkError(c *chunkJSON) error {
	if isNull(c.Error) && c.Object != "error" {
		return nil
	}
	var msg, typ, code string
	status := 0
	switch {
	case len(c.Error) > 0 && c.Error[0] == '{':
		var eo errorObject
		_ = json.Unmarshal(c.Error, &eo)
		msg, typ, code = eo.Message, eo.Type, rawString(eo.Code)
	case len(c.Error) > 0 && c.Error[0] == '"':
		_ = json.Unmarshal(c.Error, &msg)
	default:
		msg, code = c.Message, rawString(c.Code)
	}
	if n, err := strconv.Atoi(code); err == nil && n >= 400 && n <= 599 {
		status = n
	}
	if status == 0 {
		status = 502
	}
	e := engineError(status, msg, typ, code)
	e.Cause = apierr.EngineSaid(errors.New("openai: engine sent an error in its stream"))
	return e
}

// ReadStream reads an OpenAI SSE stream (data: chunks, data: [DONE]) from an engine and sends
// the events to sink. It accepts vLLM's final usage-only chunk (choices empty), error chunks
// ({"error":…} or vLLM's {"object":"error",…}) and llama.cpp's `error:` lines, which become an
// *apierr.Error. It calls sink.Flush whenever no whole event is buffered (sse.Reader.Buffered),
// just before it would wait for the network. A stream that ends without [DONE] is accepted only
// if a finish_reason arrived; otherwise the error wraps ErrTruncated: never a silent truncation.
// A line that is no SSE field, or an event over sse.MaxEvent, is a 502 *apierr.Error. Chunks are
// read in place with jsontext (chunk.go), an allocation per token (its text); error chunks and
// odd ones are decoded with encoding/json, to the same meaning.
func ReadStream(r io.Reader, sink llm.Sink) error { return readStream(r, sink, false) }

// readStream is ReadStream, with every chunk decoded by encoding/json when decodeAll.
func readStream(r io.Reader, sink llm.Sink, decodeAll bool) error {
	er := sse.NewReader(r)
	rd := &reader{sink: sink, openTool: -1, decodeAll: decodeAll}
	dirty := false // events sent since the last Flush
	for {
		if dirty && !er.Buffered() {
			dirty = false
			if err := sink.Flush(); err != nil {
				return err
			}
		}
		raw, _, data, err := er.Next()
		switch {
		case err == nil, errors.Is(err, io.EOF):
		case errors.Is(err, sse.ErrNotSSE):
			if line := refusedLine(err); bytes.HasPrefix(line, []byte("error:")) {
				return lineError(bytes.TrimSpace(line[6:]))
			}
			return apierr.Wrap(apierr.BadGateway, fmt.Errorf("openai: %w", err), "engine sent an invalid stream")
		case errors.Is(err, sse.ErrEventTooLarge):
			return apierr.Wrap(apierr.BadGateway, fmt.Errorf("openai: %w", err), "engine sent an invalid stream")
		default:
			return err
		}
		eof := err != nil
		if last := raw[bytes.LastIndexByte(raw, '\n')+1:]; eof && bytes.HasPrefix(last, []byte("error:")) {
			return lineError(bytes.TrimSpace(last[6:])) // the reader leaves a partial last line to its caller
		}
		if len(data) == 0 { // comments, event:, id:, retry: and blank lines only
			if eof {
				return rd.eof()
			}
			continue
		}
		if bytes.Equal(bytes.TrimSpace(data), []byte("[DONE]")) {
			if !rd.started {
				return apierr.Wrap(apierr.BadGateway, ErrTruncated, "engine sent an empty stream")
			}
			if !rd.finished {
				// [DONE] without a finish_reason: the answer was cut, not ended (it must not
				// reach the client as end_turn).
				return apierr.Wrap(apierr.BadGateway, ErrTruncated, "engine stream ended before the response was complete")
			}
			if err := rd.end(); err != nil {
				return err
			}
			return sink.Flush()
		}
		if err := rd.data(data); err != nil {
			return err
		}
		if eof {
			return rd.eof()
		}
		dirty = true
	}
}

// refusedLine returns the line an sse.Reader refused with err (kept out of ReadStream's loop,
// where the target of errors.As would escape to the heap on every event).
func refusedLine(err error) []byte {
	var fe *sse.FieldError
	if errors.As(err, &fe) {
		return fe.Line
	}
	return nil
}

// lineError decodes llama.cpp's `error: {…}` line.
func lineError(data []byte) error {
	var c chunkJSON
	if json.Unmarshal(data, &c) != nil || (isNull(c.Error) && c.Message == "") {
		e := engineError(502, string(bytes.ToValidUTF8(data, nil)), "", "")
		e.Cause = apierr.EngineSaid(errors.New("openai: engine sent an error line in its stream"))
		return e
	}
	if isNull(c.Error) {
		c.Object = "error"
	}
	return chunkError(&c)
}

// eof ends a stream that closed without [DONE].
func (rd *reader) eof() error {
	if !rd.finished {
		return apierr.Wrap(apierr.BadGateway, ErrTruncated, "engine stream ended before the response was complete")
	}
	if err := rd.end(); err != nil {
		return err
	}
	return rd.sink.Flush()
}

// ReadResponse reads a non-streamed chat.completion body from an engine and sends it to sink
// as events, as if it had been streamed in one piece.
func ReadResponse(body []byte, sink llm.Sink) error {
	var c chunkJSON
	if err := json.Unmarshal(body, &c); err != nil {
		return apierr.Wrap(apierr.BadGateway, fmt.Errorf("openai: bad response: %w", err), "engine sent an invalid response")
	}
	rd := &reader{sink: sink, openTool: -1}
	if err := rd.chunk(&c); err != nil {
		return err
	}
	if !rd.finished {
		return apierr.Wrap(apierr.BadGateway, ErrTruncated, "engine response has no finish_reason")
	}
	if err := rd.end(); err != nil {
		return err
	}
	return sink.Flush()
}

// ChunkUsage returns the usage carried by one data: payload of an OpenAI stream, if any, without
// decoding the rest of the chunk. The pass-through path uses it to read usage on the way.
func ChunkUsage(data []byte) (llm.Usage, bool) {
	i := bytes.Index(data, []byte(`"usage":`))
	if i < 0 {
		return llm.Usage{}, false
	}
	rest := bytes.TrimLeft(data[i+len(`"usage":`):], " \t\r\n")
	if len(rest) == 0 || rest[0] != '{' {
		return llm.Usage{}, false
	}
	var u struct {
		Usage *usageJSON `json:"usage"`
	}
	if json.Unmarshal(data, &u) != nil || u.Usage == nil {
		return llm.Usage{}, false
	}
	return u.Usage.canonical(), true
}

// StreamError returns the error one data: payload of an engine's stream carries, or nil. It
// looks for the error shapes ReadStream knows without decoding a chunk that has none.
func StreamError(data []byte) *apierr.Error {
	if !bytes.Contains(data, []byte(`"error"`)) {
		return nil
	}
	var c chunkJSON
	if json.Unmarshal(data, &c) != nil {
		return nil
	}
	if err := chunkError(&c); err != nil {
		var e *apierr.Error
		if errors.As(err, &e) {
			return e
		}
	}
	return nil
}
