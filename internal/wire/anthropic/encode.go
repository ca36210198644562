package anthropic

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// appendString appends s as a JSON string (see jsontext).
func appendString(dst []byte, s string) []byte { return jsontext.AppendString(dst, s) }

func appendInt(dst []byte, n int) []byte { return strconv.AppendInt(dst, int64(n), 10) }

// appendFloat appends a finite float as a JSON number (callers skip non-finite values).
func appendFloat(dst []byte, f float64) []byte { return strconv.AppendFloat(dst, f, 'g', -1, 64) }

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// appendInput appends a tool input, which must be a JSON object. Engines build inputs from
// model output, so one that is not a valid object is written as {} rather than breaking the
// JSON around it.
func appendInput(dst []byte, in json.RawMessage) []byte {
	if !validObject(in) {
		return append(dst, '{', '}')
	}
	return append(dst, in...)
}

// validObject reports whether b is exactly one valid JSON object, its strings UTF-8.
func validObject(b []byte) bool { return jsontext.ValidObject(b) }

// appendUsage appends the usage object of a message.
func appendUsage(dst []byte, u *llm.Usage, outputTokens int) []byte {
	dst = append(dst, `{"input_tokens":`...)
	dst = appendInt(dst, u.InputTokens)
	dst = append(dst, `,"cache_creation_input_tokens":`...)
	dst = appendInt(dst, u.CacheCreationInputTokens)
	dst = append(dst, `,"cache_read_input_tokens":`...)
	dst = appendInt(dst, u.CacheReadInputTokens)
	dst = append(dst, `,"output_tokens":`...)
	dst = appendInt(dst, outputTokens)
	return append(dst, '}')
}

// appendStopSequence appends the stop_sequence value: the sequence when there is one, else null.
func appendStopSequence(dst []byte, seq string) []byte {
	if seq == "" {
		return append(dst, "null"...)
	}
	return appendString(dst, seq)
}

// appendToolUse appends tool_use block b, in a request's message or an answer's content.
func appendToolUse(dst []byte, b *llm.Block) []byte {
	dst = append(dst, `{"type":"tool_use","id":`...)
	dst = appendString(dst, b.ID)
	dst = append(dst, `,"name":`...)
	dst = appendString(dst, b.Name)
	dst = append(dst, `,"input":`...)
	dst = appendInput(dst, b.Input)
	return append(dst, '}')
}

// AppendResponse appends the non-streaming message JSON for r. id is the message id (msg_…);
// when empty, r.ID is used. Only text and tool_use blocks are written: a response holds no
// others.
func AppendResponse(dst []byte, r *llm.Response, id string) []byte {
	if id == "" {
		id = r.ID
	}
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, id)
	dst = append(dst, `,"type":"message","role":"assistant","model":`...)
	dst = appendString(dst, r.Model)
	dst = append(dst, `,"content":[`...)
	n := 0
	for i := range r.Content {
		b := &r.Content[i]
		if b.Type != llm.BlockText && b.Type != llm.BlockToolUse {
			continue
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		if b.Type == llm.BlockText {
			dst = append(dst, `{"type":"text","text":`...)
			dst = appendString(dst, b.Text)
			dst = append(dst, '}')
		} else {
			dst = appendToolUse(dst, b)
		}
	}
	dst = append(dst, `],"stop_reason":"`...)
	dst = append(dst, r.Stop.String()...)
	dst = append(dst, `","stop_sequence":`...)
	dst = appendStopSequence(dst, r.StopSequence)
	dst = append(dst, `,"usage":`...)
	dst = appendUsage(dst, &r.Usage, r.Usage.OutputTokens)
	return append(dst, '}')
}

// appendErrorObject appends {"type":"error","error":{"type":…,"message":…} without the closing
// brace, so AppendError can add the request id. A nil e is an internal error.
func appendErrorObject(dst []byte, e *apierr.Error) []byte {
	kind, msg := apierr.API, "internal error"
	if e != nil {
		kind, msg = e.Kind, e.Message
	}
	dst = append(dst, `{"type":"error","error":{"type":"`...)
	dst = append(dst, kind.AnthropicType()...)
	dst = append(dst, `","message":`...)
	dst = appendString(dst, msg)
	return append(dst, '}')
}

// AppendError appends the error body {"type":"error","error":{"type":…,"message":…},
// "request_id":…}. The HTTP status is e.Status(); the request id is left out when empty.
func AppendError(dst []byte, e *apierr.Error, requestID string) []byte {
	dst = appendErrorObject(dst, e)
	if requestID != "" {
		dst = append(dst, `,"request_id":`...)
		dst = appendString(dst, requestID)
	}
	return append(dst, '}')
}

// AppendCountTokens appends the count_tokens response {"input_tokens":n}.
func AppendCountTokens(dst []byte, n int) []byte {
	dst = append(dst, `{"input_tokens":`...)
	dst = appendInt(dst, n)
	return append(dst, '}')
}
