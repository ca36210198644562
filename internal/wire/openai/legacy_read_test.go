package openai

// This file keeps ReadStream as it was before it read chunks with jsontext: every chunk decoded
// with encoding/json. FuzzReadStreamLegacy holds the new reader to it.

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

// legacyChunk is one streamed chat.completion.chunk, or a completion (message instead of delta).
type legacyChunk struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int              `json:"index"`
		Delta        *legacyDelta     `json:"delta"`
		Message      *legacyDelta     `json:"message"`
		FinishReason *string          `json:"finish_reason"`
		StopReason   legacyStopReason `json:"stop_reason"`
	} `json:"choices"`
	Usage *usageJSON `json:"usage"`
	// Error shapes, as in errorJSON.
	Error   json.RawMessage `json:"error"`
	Object  string          `json:"object"`
	Message string          `json:"message"`
	Code    json.RawMessage `json:"code"`
}

type legacyDelta struct {
	Content   *string          `json:"content"`
	Refusal   *string          `json:"refusal"`
	ToolCalls []legacyToolCall `json:"tool_calls"`
}

// legacyToolCall is a tool call of an engine's answer, or a piece of one in a stream.
type legacyToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// legacyIsNull reports whether raw is absent or null.
func legacyIsNull(raw json.RawMessage) bool { return len(raw) == 0 || string(raw) == "null" }

// legacyStopReason is vLLM's stop_reason: the matched stop string, or a stop token id, or null.
type legacyStopReason struct{ s string }

func (s *legacyStopReason) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &s.s)
	}
	s.s = ""
	return nil
}

// reader turns OpenAI chunks into llm events. It opens a text block when content arrives and a
// tool_use block for each new tool call, closing the previous block, so the canonical order
// (BlockStart, deltas, BlockStop) holds whatever the engine interleaves.
type legacyReader struct {
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
	// args gathers the open tool call's arguments, checked when its block closes: arguments
	// that are not a JSON object would reach an Anthropic client as "input":{} (or a stream
	// of input_json_delta it cannot parse), a tool call it runs with nothing.
	args []byte
}

func (rd *legacyReader) send(ev *llm.Event) error { return rd.sink.Send(ev) }

func (rd *legacyReader) startMsg(id, model string) error {
	if rd.started {
		return nil
	}
	rd.started = true
	rd.ev = llm.Event{Kind: llm.EventStart, ID: MessageID(id), Model: model}
	return rd.send(&rd.ev)
}

func (rd *legacyReader) closeBlock() error {
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

func (rd *legacyReader) text(s string) error {
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

func (rd *legacyReader) toolCall(tc *legacyToolCall, pos int) error {
	idx := pos
	if tc.Index != nil {
		idx = *tc.Index
	}
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
		id := ToolUseID(tc.ID)
		if id == "" {
			id = ids.ToolUse()
		}
		rd.ev = llm.Event{Kind: llm.EventBlockStart, Index: rd.next, Block: llm.BlockToolUse, ID: id, Name: tc.Function.Name}
		rd.next++
		rd.open, rd.openTool = true, idx
		rd.args = rd.args[:0]
		if err := rd.send(&rd.ev); err != nil {
			return err
		}
	}
	if tc.Function.Arguments == "" {
		return nil
	}
	rd.args = append(rd.args, tc.Function.Arguments...)
	rd.ev = llm.Event{Kind: llm.EventToolDelta, Index: rd.next - 1, Text: tc.Function.Arguments}
	return rd.send(&rd.ev)
}

func (rd *legacyReader) finish(reason, stopSeq string) error {
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

func (rd *legacyReader) end() error {
	if err := rd.closeBlock(); err != nil {
		return err
	}
	rd.ev = llm.Event{Kind: llm.EventStop, Stop: rd.stop, StopSequence: rd.stopSeq, Usage: rd.usage}
	return rd.send(&rd.ev)
}

// chunk applies one decoded chunk or completion.
func (rd *legacyReader) chunk(c *legacyChunk) error {
	if err := legacyChunkError(c); err != nil {
		return err
	}
	if err := rd.startMsg(c.ID, c.Model); err != nil {
		return err
	}
	for i := range c.Choices {
		ch := &c.Choices[i]
		if ch.Index != 0 {
			continue
		}
		d := ch.Delta
		if d == nil {
			d = ch.Message
		}
		if d != nil {
			if d.Content != nil {
				if err := rd.text(*d.Content); err != nil {
					return err
				}
			}
			if d.Refusal != nil {
				if err := rd.text(*d.Refusal); err != nil {
					return err
				}
			}
			for j := range d.ToolCalls {
				if err := rd.toolCall(&d.ToolCalls[j], j); err != nil {
					return err
				}
			}
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			if err := rd.finish(*ch.FinishReason, ch.StopReason.s); err != nil {
				return err
			}
		}
	}
	if c.Usage != nil {
		rd.usage = c.Usage.canonical()
	}
	return nil
}

// legacyChunkError returns the error a chunk carries, if any.
func legacyChunkError(c *legacyChunk) error {
	if legacyIsNull(c.Error) && c.Object != "error" {
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

// legacyReadStream is ReadStream as it was: it reads an OpenAI SSE stream (data: chunks, data: [DONE]) from an engine and sends
// the events to sink. It accepts vLLM's final usage-only chunk (choices empty), error chunks
// ({"error":…} or vLLM's {"object":"error",…}) and llama.cpp's `error:` lines, which become an
// *apierr.Error. It calls sink.Flush whenever no whole event is buffered (sse.Reader.Buffered),
// just before it would wait for the network. A stream that ends without [DONE] is accepted only
// if a finish_reason arrived; otherwise the error wraps ErrTruncated: never a silent truncation.
// A line that is no SSE field, or an event over sse.MaxEvent, is a 502 *apierr.Error.
func legacyReadStream(r io.Reader, sink llm.Sink) error {
	er := sse.NewReader(r)
	rd := &legacyReader{sink: sink, openTool: -1}
	var c legacyChunk
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
			if line := legacyRefusedLine(err); bytes.HasPrefix(line, []byte("error:")) {
				return legacyLineError(bytes.TrimSpace(line[6:]))
			}
			return apierr.Wrap(apierr.BadGateway, fmt.Errorf("openai: %w", err), "engine sent an invalid stream")
		case errors.Is(err, sse.ErrEventTooLarge):
			return apierr.Wrap(apierr.BadGateway, fmt.Errorf("openai: %w", err), "engine sent an invalid stream")
		default:
			return err
		}
		eof := err != nil
		if last := raw[bytes.LastIndexByte(raw, '\n')+1:]; eof && bytes.HasPrefix(last, []byte("error:")) {
			return legacyLineError(bytes.TrimSpace(last[6:])) // the reader leaves a partial last line to its caller
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
		c = legacyChunk{}
		if jerr := json.Unmarshal(data, &c); jerr != nil {
			return apierr.Wrap(apierr.BadGateway, fmt.Errorf("openai: bad chunk: %w", jerr), "engine sent an invalid stream chunk")
		}
		if err := rd.chunk(&c); err != nil {
			return err
		}
		if eof {
			return rd.eof()
		}
		dirty = true
	}
}

// legacyRefusedLine returns the line an sse.Reader refused with err (kept out of ReadStream's loop,
// where the target of errors.As would escape to the heap on every event).
func legacyRefusedLine(err error) []byte {
	var fe *sse.FieldError
	if errors.As(err, &fe) {
		return fe.Line
	}
	return nil
}

// legacyLineError decodes llama.cpp's `error: {…}` line.
func legacyLineError(data []byte) error {
	var c legacyChunk
	if json.Unmarshal(data, &c) != nil || (legacyIsNull(c.Error) && c.Message == "") {
		e := engineError(502, string(bytes.ToValidUTF8(data, nil)), "", "")
		e.Cause = apierr.EngineSaid(errors.New("openai: engine sent an error line in its stream"))
		return e
	}
	if legacyIsNull(c.Error) {
		c.Object = "error"
	}
	return legacyChunkError(&c)
}

// eof ends a stream that closed without [DONE].
func (rd *legacyReader) eof() error {
	if !rd.finished {
		return apierr.Wrap(apierr.BadGateway, ErrTruncated, "engine stream ended before the response was complete")
	}
	if err := rd.end(); err != nil {
		return err
	}
	return rd.sink.Flush()
}
