// Package responses is the OpenAI Responses API wire format, server side: it decodes a client's
// POST /v1/responses into an llm.Request (with previous_response_id's stored conversation put
// before the input) and encodes llm events as a response object or as the Responses SSE event
// sequence. It is pure encoding with no policy: storing responses is the caller's (the server's).
//
// The answer's items: each text block is a message item with one output_text part, each
// tool_use block a function_call item whose call_id is the tool-use id as OpenAI spells it
// (openai.CallID). Errors have the OpenAI shape ({"error":{message,type,param,code}}), and a
// stream that fails after it began ends with an error event and response.failed.
package responses

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/ids"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
	"github.com/layer0ai/layer0/internal/wire/openai"
)

// Meta is what a response object says beyond the answer: its id, time, the model the client
// asked for, and the request's fields it echoes.
type Meta struct {
	// ID is the response id ("resp_…", NewID).
	ID string
	// CreatedAt is the Unix time in seconds.
	CreatedAt int64
	// Model is the model the client asked for.
	Model string
	// Extras are the echoed request fields; nil echoes defaults.
	Extras *Extras
}

// NewID returns a new response id, "resp_" and 24 base-62 characters.
func NewID() string { return ids.Response() }

// AppendError appends the error body for e, in the OpenAI shape the Responses API shares, its
// param in the Responses API's terms (ClientParam).
func AppendError(dst []byte, e *apierr.Error) []byte {
	if p := ClientParam(e.Param); p != e.Param {
		c := *e
		c.Param = p
		e = &c
	}
	return openai.AppendError(dst, e)
}

// ClientParam names a param of the canonical request in the Responses API's terms: the
// conversation's turns (messages, messages.2.content.0, as the rules shared by every format and
// the router name them) are the client's input.
func ClientParam(p string) string {
	if p == "messages" || strings.HasPrefix(p, "messages.") || strings.HasPrefix(p, "messages[") {
		return "input"
	}
	return p
}

// Status is the HTTP status of e for an OpenAI client (529 becomes 503).
func Status(e *apierr.Error) int { return openai.Status(e) }

// AppendDeleted appends the body of DELETE /v1/responses/{id}.
func AppendDeleted(dst []byte, id string) []byte {
	dst = append(dst, `{"id":`...)
	dst = jsontext.AppendString(dst, id)
	return append(dst, `,"object":"response.deleted","deleted":true}`...)
}

// status is a response object's status.
type status uint8

const (
	statusInProgress status = iota
	statusCompleted
	statusIncomplete
	statusFailed
)

func (s status) String() string {
	switch s {
	case statusCompleted:
		return "completed"
	case statusIncomplete:
		return "incomplete"
	case statusFailed:
		return "failed"
	}
	return "in_progress"
}

// statusOf is the status of a response that stopped for reason stop.
func statusOf(stop llm.StopReason) status {
	if stop == llm.StopMaxTokens {
		return statusIncomplete
	}
	return statusCompleted
}

// outItem is one output item: a message (text) or a function call.
type outItem struct {
	call     bool
	id       string // msg_… or fc_…
	callID   string // call_…, for a call
	name     string
	text     string // the message's text, or the call's arguments
	complete bool
}

// items returns the output items of the content blocks, with fresh ids.
func items(content []llm.Block) []outItem {
	out := make([]outItem, 0, len(content))
	for i := range content {
		b := &content[i]
		switch b.Type {
		case llm.BlockText:
			out = append(out, outItem{id: ids.Message(), text: b.Text, complete: true})
		case llm.BlockToolUse:
			args := string(b.Input)
			if args == "" {
				args = "{}"
			}
			out = append(out, outItem{call: true, id: ids.FunctionCall(), callID: openai.CallID(b.ID), name: b.Name, text: args, complete: true})
		}
	}
	return out
}

// appendItem appends one output item object.
func appendItem(dst []byte, it *outItem, ns map[string]string) []byte {
	st := `"in_progress"`
	if it.complete {
		st = `"completed"`
	}
	if it.call {
		dst = append(dst, `{"type":"function_call","id":`...)
		dst = jsontext.AppendString(dst, it.id)
		dst = append(dst, `,"call_id":`...)
		dst = jsontext.AppendString(dst, it.callID)
		dst = append(dst, `,"name":`...)
		dst = jsontext.AppendString(dst, it.name)
		if n, ok := ns[it.name]; ok {
			dst = append(dst, `,"namespace":`...)
			dst = jsontext.AppendString(dst, n)
		}
		dst = append(dst, `,"arguments":`...)
		if it.complete {
			dst = jsontext.AppendString(dst, it.text)
		} else {
			dst = append(dst, `""`...)
		}
		dst = append(dst, `,"status":`...)
		dst = append(dst, st...)
		return append(dst, '}')
	}
	dst = append(dst, `{"type":"message","id":`...)
	dst = jsontext.AppendString(dst, it.id)
	dst = append(dst, `,"status":`...)
	dst = append(dst, st...)
	dst = append(dst, `,"role":"assistant","content":[`...)
	if it.complete {
		dst = appendTextPart(dst, it.text)
	}
	return append(dst, "]}"...)
}

func appendTextPart(dst []byte, text string) []byte {
	dst = append(dst, `{"type":"output_text","text":`...)
	dst = jsontext.AppendString(dst, text)
	return append(dst, `,"annotations":[],"logprobs":[]}`...)
}

// appendUsage appends a Responses usage object: input_tokens includes cached tokens, as OpenAI
// counts them.
func appendUsage(dst []byte, u llm.Usage) []byte {
	in := int64(u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens)
	out := int64(u.OutputTokens)
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendInt(dst, in, 10)
	dst = append(dst, `,"input_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, int64(u.CacheReadInputTokens), 10)
	dst = append(dst, `},"output_tokens":`...)
	dst = strconv.AppendInt(dst, out, 10)
	dst = append(dst, `,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":`...)
	dst = strconv.AppendInt(dst, in+out, 10)
	return append(dst, '}')
}

// object is a response object to encode.
type object struct {
	m     *Meta
	st    status
	out   []outItem
	usage *llm.Usage // nil writes null
	err   *apierr.Error
}

// appendObject appends the response object.
func appendObject(dst []byte, o *object) []byte {
	m := o.m
	x := m.Extras
	if x == nil {
		x = &Extras{Store: true, ParallelToolCalls: true}
	}
	dst = append(dst, `{"id":`...)
	dst = jsontext.AppendString(dst, m.ID)
	dst = append(dst, `,"object":"response","created_at":`...)
	dst = strconv.AppendInt(dst, m.CreatedAt, 10)
	dst = append(dst, `,"status":"`...)
	dst = append(dst, o.st.String()...)
	dst = append(dst, `","background":false,"error":`...)
	if o.err != nil {
		_, code := openai.ErrorTypeCode(o.err)
		if code == "" {
			code = "server_error"
		}
		dst = append(dst, `{"code":`...)
		dst = jsontext.AppendString(dst, code)
		dst = append(dst, `,"message":`...)
		dst = jsontext.AppendString(dst, o.err.Message)
		dst = append(dst, '}')
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"incomplete_details":`...)
	if o.st == statusIncomplete {
		dst = append(dst, `{"reason":"max_output_tokens"}`...)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"instructions":`...)
	dst = appendRaw(dst, x.Instructions, "null")
	dst = append(dst, `,"max_output_tokens":`...)
	if x.MaxOutputTokens > 0 {
		dst = strconv.AppendInt(dst, int64(x.MaxOutputTokens), 10)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"metadata":`...)
	dst = appendRaw(dst, x.Metadata, "{}")
	dst = append(dst, `,"model":`...)
	dst = jsontext.AppendString(dst, m.Model)
	dst = append(dst, `,"output":[`...)
	for i := range o.out {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendItem(dst, &o.out[i], x.Namespaces)
	}
	dst = append(dst, `],"parallel_tool_calls":`...)
	dst = strconv.AppendBool(dst, x.ParallelToolCalls)
	dst = append(dst, `,"previous_response_id":`...)
	if x.PreviousResponseID != "" {
		dst = jsontext.AppendString(dst, x.PreviousResponseID)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"reasoning":{"effort":null,"summary":null},"store":`...)
	dst = strconv.AppendBool(dst, x.Store)
	dst = append(dst, `,"temperature":`...)
	dst = appendFloat(dst, x.Temperature, 1)
	dst = append(dst, `,"text":`...)
	dst = appendRaw(dst, x.Text, `{"format":{"type":"text"}}`)
	dst = append(dst, `,"tool_choice":`...)
	dst = appendRaw(dst, x.ToolChoice, `"auto"`)
	dst = append(dst, `,"tools":`...)
	dst = appendRaw(dst, x.Tools, "[]")
	dst = append(dst, `,"top_p":`...)
	dst = appendFloat(dst, x.TopP, 1)
	dst = append(dst, `,"truncation":"disabled","usage":`...)
	if o.usage != nil {
		dst = appendUsage(dst, *o.usage)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"user":`...)
	if x.User != "" {
		dst = jsontext.AppendString(dst, x.User)
	} else {
		dst = append(dst, "null"...)
	}
	return append(dst, '}')
}

func appendRaw(dst, raw []byte, def string) []byte {
	if len(raw) == 0 {
		return append(dst, def...)
	}
	return append(dst, raw...)
}

func appendFloat(dst []byte, f *float64, def float64) []byte {
	v := def
	if f != nil {
		v = *f
	}
	return strconv.AppendFloat(dst, v, 'g', -1, 64)
}

// AppendResponse appends the response object of a complete answer r.
func AppendResponse(dst []byte, r *llm.Response, m *Meta) []byte {
	u := r.Usage
	return appendObject(dst, &object{m: m, st: statusOf(r.Stop), out: items(r.Content), usage: &u})
}

// ParseUsage reads a Responses usage object in canonical terms: input_tokens less its
// input_tokens_details.cached_tokens, which are cache reads. ok is false when obj is not one.
func ParseUsage(obj []byte) (u llm.Usage, ok bool) {
	var v struct {
		Input   *int `json:"input_tokens"`
		Output  int  `json:"output_tokens"`
		Details struct {
			Cached int `json:"cached_tokens"`
		} `json:"input_tokens_details"`
	}
	if json.Unmarshal(obj, &v) != nil || v.Input == nil {
		return u, false
	}
	cached := min(v.Details.Cached, *v.Input)
	return llm.Usage{InputTokens: *v.Input - cached, CacheReadInputTokens: cached, OutputTokens: v.Output}, true
}
