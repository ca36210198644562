package anthropic

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
	"github.com/layer0ai/layer0/internal/wire/sse"
)

// This file is the client side: it reads what the hosted Messages API (or any compatible
// server) sends back. It is lenient where the API may grow (unknown members, event types, block
// types and deltas are skipped) and strict where a mistake would lose data silently (a stream that
// ends without message_stop is an error).

// scanner is the JSON scanner (jsontext.Scanner) with this package's nesting bound and the
// readers of the hosted API's answers (read.go).
type scanner struct{ jsontext.Scanner }

func newScanner(s string) scanner {
	return scanner{jsontext.Scanner{Text: s, MaxDepth: maxDepth}}
}

// errTruncated is the cause of the error for a stream that ends before message_stop.
var errTruncated = errors.New("anthropic: stream ended before message_stop")

// kindForType maps an Anthropic error type to a Kind. status is the HTTP status when known (0 in
// a stream); it decides the kind of types this package does not know.
func kindForType(typ string, status int) apierr.Kind {
	switch typ {
	case "invalid_request_error":
		return apierr.InvalidRequest
	case "authentication_error":
		return apierr.Authentication
	case "permission_error":
		return apierr.Permission
	case "not_found_error":
		return apierr.NotFound
	case "request_too_large":
		return apierr.RequestTooLarge
	case "rate_limit_error":
		return apierr.RateLimit
	case "timeout_error":
		return apierr.Timeout
	case "overloaded_error":
		return apierr.Overloaded
	}
	if status == 0 || typ == "api_error" && status < 500 {
		return apierr.BadGateway // the engine failed
	}
	return apierr.KindForStatus(status)
}

// upstreamError builds the error for an upstream error object.
func upstreamError(status int, typ, msg, requestID string) *apierr.Error {
	if msg == "" {
		msg = "the engine returned an error"
		if status != 0 {
			msg = fmt.Sprintf("the engine returned HTTP %d", status)
		}
	}
	cause := fmt.Errorf("anthropic: upstream error type %q status %d request_id %q", typ, status, requestID)
	return &apierr.Error{Kind: kindForType(typ, status), Message: msg, Cause: apierr.EngineSaid(cause)}
}

// DecodeError turns an upstream error response (status and body) into an *apierr.Error: the
// kind from the body's error type (or the status when the body is not an Anthropic error), the
// upstream message as the message. The engine decides what a client should see of it (an
// upstream authentication error is layer0's problem, not the client's).
func DecodeError(status int, body []byte) *apierr.Error {
	d := newScanner(string(body))
	var typ, msg, reqID string
	var e errorObject
	if d.Peek() == jsontext.KindObject && d.readTop(func(k string) error {
		switch k {
		case "error":
			return e.read(&d)
		case "request_id":
			return d.optString(&reqID)
		}
		return d.Skip(1)
	}) == nil {
		typ, msg = e.typ, e.msg
	}
	if typ == "" {
		return &apierr.Error{Kind: apierr.KindForStatus(status),
			Message: fmt.Sprintf("the engine returned HTTP %d", status),
			Cause:   fmt.Errorf("anthropic: upstream HTTP %d: %.200q", status, body)}
	}
	return upstreamError(status, typ, msg, reqID)
}

// errorObject is {"type":…,"message":…}.
type errorObject struct{ typ, msg string }

func (e *errorObject) read(d *scanner) error {
	return d.object(func(k string) error {
		switch k {
		case "type":
			return d.optString(&e.typ)
		case "message":
			return d.optString(&e.msg)
		}
		return d.Skip(1)
	})
}

// readTop reads the members of the object at the position, calling member for each value.
func (d *scanner) readTop(member func(k string) error) error {
	if d.Peek() != jsontext.KindObject {
		return d.Unexpected("an object")
	}
	d.Pos++
	return d.Members(member)
}

// object reads the members of an object at the position as readTop does; any other value is
// skipped, as a member of another type is ignored.
func (d *scanner) object(member func(k string) error) error {
	if d.Peek() != jsontext.KindObject {
		return d.Skip(1)
	}
	return d.readTop(member)
}

// optString reads a string into *s; any other value is skipped and leaves *s alone.
func (d *scanner) optString(s *string) error {
	if d.Peek() != jsontext.KindString {
		return d.Skip(1)
	}
	v, err := d.Str()
	*s = v
	return err
}

// optInt reads a non-negative integer into *v and sets *set; other values are skipped.
func (d *scanner) optInt(v *int, set *bool) error {
	if d.Peek() != jsontext.KindNumber {
		return d.Skip(1)
	}
	lit, err := d.Number()
	if err != nil {
		return err
	}
	if n, ok := parseInt(lit); ok && n >= 0 && n <= maxInt32 {
		*v, *set = int(n), true
	}
	return nil
}

// usageFields is a usage object with which counts were present.
type usageFields struct {
	u                                       llm.Usage
	hasInput, hasOutput, hasCreate, hasRead bool
}

func (u *usageFields) read(d *scanner) error {
	return d.object(func(k string) error {
		switch k {
		case "input_tokens":
			return d.optInt(&u.u.InputTokens, &u.hasInput)
		case "output_tokens":
			return d.optInt(&u.u.OutputTokens, &u.hasOutput)
		case "cache_creation_input_tokens":
			return d.optInt(&u.u.CacheCreationInputTokens, &u.hasCreate)
		case "cache_read_input_tokens":
			return d.optInt(&u.u.CacheReadInputTokens, &u.hasRead)
		}
		return d.Skip(1)
	})
}

// mergeInto overwrites the counts of dst that u has (message_delta counts are cumulative).
func (u *usageFields) mergeInto(dst *llm.Usage) {
	if u.hasInput {
		dst.InputTokens = u.u.InputTokens
	}
	if u.hasOutput {
		dst.OutputTokens = u.u.OutputTokens
	}
	if u.hasCreate {
		dst.CacheCreationInputTokens = u.u.CacheCreationInputTokens
	}
	if u.hasRead {
		dst.CacheReadInputTokens = u.u.CacheReadInputTokens
	}
}

// blockFields is a content block as a response or content_block_start carries it.
type blockFields struct {
	typ, text, id, name string
	input               string // raw JSON
}

func (b *blockFields) read(d *scanner) error {
	return d.object(func(k string) error {
		switch k {
		case "type":
			return d.optString(&b.typ)
		case "text":
			return d.optString(&b.text)
		case "id":
			return d.optString(&b.id)
		case "name":
			return d.optString(&b.name)
		case "input":
			d.WS()
			start := d.Pos
			if err := d.Skip(1); err != nil {
				return err
			}
			b.input = d.Text[start:d.Pos]
			return nil
		}
		return d.Skip(1)
	})
}

// parseStop maps a stop_reason; the reasons the canonical model lacks map to the nearest one.
func parseStop(s string) llm.StopReason {
	switch s {
	case "max_tokens", "model_context_window_exceeded":
		return llm.StopMaxTokens
	case "stop_sequence":
		return llm.StopSequence
	case "tool_use":
		return llm.StopToolUse
	case "refusal":
		return llm.StopRefusal
	}
	return llm.StopEndTurn // end_turn, pause_turn and anything new
}

// sseEvent holds the members of one stream event's data, read in one pass.
type sseEvent struct {
	typ      string
	index    int
	hasIndex bool
	// message_start
	msgID, msgModel string
	msgUsage        usageFields
	// content_block_start
	block blockFields
	// content_block_delta and message_delta
	deltaType, text, partialJSON string
	stopReason, stopSequence     string
	hasStop                      bool
	// message_delta
	usage usageFields
	// error
	err errorObject
}

func (e *sseEvent) read(d *scanner) error {
	return d.readTop(func(k string) error {
		switch k {
		case "type":
			return d.optString(&e.typ)
		case "index":
			return d.optInt(&e.index, &e.hasIndex)
		case "message":
			return d.object(func(k string) error {
				switch k {
				case "id":
					return d.optString(&e.msgID)
				case "model":
					return d.optString(&e.msgModel)
				case "usage":
					return e.msgUsage.read(d)
				}
				return d.Skip(1)
			})
		case "content_block":
			return e.block.read(d)
		case "delta":
			return d.object(func(k string) error {
				switch k {
				case "type":
					return d.optString(&e.deltaType)
				case "text":
					return d.optString(&e.text)
				case "partial_json":
					return d.optString(&e.partialJSON)
				case "stop_reason":
					e.hasStop = true
					return d.optString(&e.stopReason)
				case "stop_sequence":
					return d.optString(&e.stopSequence)
				}
				return d.Skip(1)
			})
		case "usage":
			return e.usage.read(d)
		case "error":
			return e.err.read(d)
		}
		return d.Skip(1)
	})
}

// streamReader turns SSE events into canonical events, renumbering content blocks so that the
// ones it skips (thinking, server tools) leave no gaps.
type streamReader struct {
	sink    llm.Sink
	ev      llm.Event
	blocks  []int // upstream block index → canonical index, -1 for a skipped block
	next    int   // next canonical block index
	started bool
	stop    llm.StopReason
	stopSeq string
	usage   llm.Usage
	pending bool      // events sent since the last flush
	strs    llm.Arena // the deltas' text
}

// ReadStream reads an Anthropic SSE response from r and pushes its events into sink, calling
// sink.Flush whenever events were sent and no whole event is buffered (sse.Reader.Buffered), so
// the sink coalesces what arrived together and holds nothing back. It returns nil after
// message_stop. An error event returns its *apierr.Error (mapped from its type), a stream that
// ends without message_stop returns a 502 *apierr.Error (never a silent truncation), as does a
// line that is no SSE field or an event over sse.MaxEvent; read and sink errors are returned
// wrapped.
func ReadStream(r io.Reader, sink llm.Sink) error {
	er := sse.NewReader(r)
	sr := streamReader{sink: sink}
	for {
		if sr.pending && !er.Buffered() {
			sr.pending = false
			if err := sink.Flush(); err != nil {
				return err
			}
		}
		_, name, data, err := er.Next()
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			// The SSE spec drops an event not ended by a blank line; one whose data is complete
			// JSON is taken anyway, so a final message_stop without it ends the stream cleanly.
			if len(data) > 0 {
				if done, err := sr.dispatch(name, data); err != nil || done {
					return err
				}
			}
			if sr.pending {
				if err := sink.Flush(); err != nil {
					return err
				}
			}
			return apierr.Wrap(apierr.BadGateway, errTruncated, "the engine's stream ended early")
		case errors.Is(err, sse.ErrNotSSE), errors.Is(err, sse.ErrEventTooLarge):
			return invalidStream(fmt.Errorf("anthropic: %w", err))
		default:
			return fmt.Errorf("anthropic: read stream: %w", err)
		}
		if len(data) > 0 || len(name) > 0 {
			if done, err := sr.dispatch(name, data); err != nil || done {
				return err
			}
		}
	}
}

// The bytes of a text delta as the Messages API writes it:
// {"type":"content_block_delta","index":N,"delta":{"type":"text_delta","text":"…"}}
var (
	textDeltaStart = []byte(`{"type":"content_block_delta","index":`)
	textDeltaMid   = []byte(`,"delta":{"type":"text_delta","text":"`)
	textDeltaEnd   = []byte(`"}}`)
)

// plainTextDelta recognizes a text delta written exactly as the Messages API writes it, whose
// text needs no unescaping (no quote, backslash or control character; valid UTF-8), and returns
// its index and text. It reports false for anything else, which dispatch decodes in full: what
// it accepts, the scanner accepts with the same meaning. Most of a stream is such deltas, and
// the scanner spent 290 ns and an allocation on each (BenchmarkReadStreamTextDelta).
func plainTextDelta(data []byte) (index int, text []byte, ok bool) {
	if !bytes.HasPrefix(data, textDeltaStart) || !bytes.HasSuffix(data, textDeltaEnd) {
		return 0, nil, false
	}
	rest := data[len(textDeltaStart) : len(data)-len(textDeltaEnd)]
	i := 0
	for ; i < len(rest) && i < 6 && '0' <= rest[i] && rest[i] <= '9'; i++ {
		index = index*10 + int(rest[i]-'0')
	}
	if i == 0 || i > 1 && rest[0] == '0' || index >= 1<<16 || !bytes.HasPrefix(rest[i:], textDeltaMid) {
		return 0, nil, false
	}
	text = rest[i+len(textDeltaMid):]
	for _, c := range text {
		if c == '"' || c == '\\' || c < 0x20 {
			return 0, nil, false
		}
	}
	if !utf8.Valid(text) {
		return 0, nil, false
	}
	return index, text, true
}

// dispatch handles one event; done is true after message_stop.
func (sr *streamReader) dispatch(name, data []byte) (done bool, err error) {
	if index, text, ok := plainTextDelta(data); ok && sr.started && string(name) != "error" {
		idx, err := sr.block(index)
		if err != nil || idx < 0 {
			return false, err
		}
		sr.ev = llm.Event{Kind: llm.EventTextDelta, Index: idx, Text: sr.strs.String(text)}
		return false, sr.send()
	}
	var e sseEvent
	if len(data) > 0 {
		d := newScanner(string(data))
		err := e.read(&d)
		if err == nil {
			err = d.End()
		}
		if err != nil {
			return false, invalidStream(err)
		}
	}
	if string(name) == "error" || e.typ == "error" {
		return false, upstreamError(0, e.err.typ, e.err.msg, "")
	}
	switch e.typ {
	case "message_start":
		sr.started = true
		sr.usage = e.msgUsage.u
		sr.ev = llm.Event{Kind: llm.EventStart, ID: e.msgID, Model: e.msgModel, Usage: sr.usage}
		return false, sr.send()
	case "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop":
		if !sr.started {
			return false, invalidStream(fmt.Errorf("anthropic: %s before message_start", e.typ))
		}
	default:
		return false, nil // ping, and event types added after this was written
	}
	if e.typ != "message_delta" && e.typ != "message_stop" && (!e.hasIndex || e.index >= 1<<16) {
		return false, invalidStream(fmt.Errorf("anthropic: %s without a valid index", e.typ))
	}
	switch e.typ {
	case "content_block_start":
		return false, sr.blockStart(&e)
	case "content_block_delta":
		idx, err := sr.block(e.index)
		if err != nil || idx < 0 {
			return false, err
		}
		switch e.deltaType {
		case "text_delta":
			sr.ev = llm.Event{Kind: llm.EventTextDelta, Index: idx, Text: e.text}
		case "input_json_delta":
			sr.ev = llm.Event{Kind: llm.EventToolDelta, Index: idx, Text: e.partialJSON}
		default:
			return false, nil // thinking, signature and citation deltas
		}
		return false, sr.send()
	case "content_block_stop":
		idx, err := sr.block(e.index)
		if err != nil || idx < 0 {
			return false, err
		}
		sr.ev = llm.Event{Kind: llm.EventBlockStop, Index: idx}
		return false, sr.send()
	case "message_delta":
		if e.hasStop {
			sr.stop, sr.stopSeq = parseStop(e.stopReason), e.stopSequence
		}
		e.usage.mergeInto(&sr.usage)
	case "message_stop":
		sr.ev = llm.Event{Kind: llm.EventStop, Stop: sr.stop, StopSequence: sr.stopSeq, Usage: sr.usage}
		if err := sr.send(); err != nil {
			return false, err
		}
		sr.pending = false
		return true, sr.sink.Flush()
	}
	return false, nil
}

// blockStart passes on a content_block_start event: a text or tool-use block gets the next
// index of the stream's blocks, and any text or input the start carries follows as a delta;
// other blocks (thinking, server tools) are mapped to -1 and skipped with their events.
func (sr *streamReader) blockStart(e *sseEvent) error {
	for len(sr.blocks) <= e.index {
		sr.blocks = append(sr.blocks, -1)
	}
	var bt llm.BlockType
	switch e.block.typ {
	case "text":
		bt = llm.BlockText
	case "tool_use":
		bt = llm.BlockToolUse
	default:
		sr.blocks[e.index] = -1 // thinking, server tools: nothing an llm.Event can carry
		return nil
	}
	idx := sr.next
	sr.next++
	sr.blocks[e.index] = idx
	sr.ev = llm.Event{Kind: llm.EventBlockStart, Index: idx, Block: bt, ID: e.block.id, Name: e.block.name}
	if err := sr.send(); err != nil {
		return err
	}
	// A start normally carries an empty text or input; pass on anything it does carry.
	if bt == llm.BlockText && e.block.text != "" {
		sr.ev = llm.Event{Kind: llm.EventTextDelta, Index: idx, Text: e.block.text}
		return sr.send()
	}
	if bt == llm.BlockToolUse && e.block.input != "" && e.block.input != "{}" {
		sr.ev = llm.Event{Kind: llm.EventToolDelta, Index: idx, Text: e.block.input}
		return sr.send()
	}
	return nil
}

// invalidStream is the error for a stream from the engine that breaks the protocol.
func invalidStream(err error) error {
	return apierr.Wrap(apierr.BadGateway, err, "the engine sent an invalid stream")
}

// block maps an upstream block index to the canonical one.
func (sr *streamReader) block(i int) (int, error) {
	if i >= len(sr.blocks) {
		return 0, invalidStream(fmt.Errorf("anthropic: event for content block %d before its start", i))
	}
	return sr.blocks[i], nil
}

func (sr *streamReader) send() error {
	sr.pending = true
	return sr.sink.Send(&sr.ev)
}

// ReadResponse reads a non-streaming Messages API response and pushes it into sink as the
// events of a stream (so one Collector or encoder serves both), then flushes. An error body
// ({"type":"error",…}) returns its *apierr.Error.
func ReadResponse(body []byte, sink llm.Sink) error {
	d := newScanner(string(body))
	var typ, id, model, stopReason, stopSeq string
	var usage usageFields
	var blocks []blockFields
	var eo errorObject
	err := d.readTop(func(k string) error {
		switch k {
		case "type":
			return d.optString(&typ)
		case "id":
			return d.optString(&id)
		case "model":
			return d.optString(&model)
		case "stop_reason":
			return d.optString(&stopReason)
		case "stop_sequence":
			return d.optString(&stopSeq)
		case "usage":
			return usage.read(&d)
		case "error":
			return eo.read(&d)
		case "content":
			if d.Peek() != jsontext.KindArray {
				return d.Skip(1)
			}
			d.Pos++
			for n := 0; ; {
				ok, err := d.NextElem(&n)
				if err != nil || !ok {
					return err
				}
				var b blockFields
				if err := b.read(&d); err != nil {
					return err
				}
				blocks = append(blocks, b)
			}
		}
		return d.Skip(1)
	})
	if err == nil {
		err = d.End()
	}
	if err != nil {
		return apierr.Wrap(apierr.BadGateway, err, "the engine sent an invalid response")
	}
	if typ == "error" {
		return upstreamError(0, eo.typ, eo.msg, "")
	}
	if typ != "message" {
		return apierr.Wrap(apierr.BadGateway, fmt.Errorf("anthropic: response type %q, want message", typ),
			"the engine sent an invalid response")
	}
	ev := llm.Event{Kind: llm.EventStart, ID: id, Model: model, Usage: usage.u}
	ev.Usage.OutputTokens = 0
	if err := sink.Send(&ev); err != nil {
		return err
	}
	idx := 0
	for i := range blocks {
		b := &blocks[i]
		switch b.typ {
		case "text":
			ev = llm.Event{Kind: llm.EventBlockStart, Index: idx, Block: llm.BlockText}
			if err := sink.Send(&ev); err != nil {
				return err
			}
			if b.text != "" {
				ev = llm.Event{Kind: llm.EventTextDelta, Index: idx, Text: b.text}
				if err := sink.Send(&ev); err != nil {
					return err
				}
			}
		case "tool_use":
			ev = llm.Event{Kind: llm.EventBlockStart, Index: idx, Block: llm.BlockToolUse, ID: b.id, Name: b.name}
			if err := sink.Send(&ev); err != nil {
				return err
			}
			if b.input != "" {
				ev = llm.Event{Kind: llm.EventToolDelta, Index: idx, Text: string(jsontext.Compact(b.input))}
				if err := sink.Send(&ev); err != nil {
					return err
				}
			}
		default:
			continue // thinking, server tool blocks
		}
		ev = llm.Event{Kind: llm.EventBlockStop, Index: idx}
		if err := sink.Send(&ev); err != nil {
			return err
		}
		idx++
	}
	ev = llm.Event{Kind: llm.EventStop, Stop: parseStop(stopReason), StopSequence: stopSeq, Usage: usage.u}
	if err := sink.Send(&ev); err != nil {
		return err
	}
	return sink.Flush()
}
