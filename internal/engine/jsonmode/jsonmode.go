// Package jsonmode gives engines whose API has no JSON mode (the Anthropic Messages API, and a
// layer0 peer reached through it) the equivalent of OpenAI's response_format: an instruction
// appended to the system prompt — answer with one JSON value and nothing else, matching the
// schema when there is one — and, when the answer is an object, the assistant's turn prefilled
// with "{" so that the model can only continue a JSON object. The "{" is put back in front of
// the answer's first text on the way back, so the client sees the whole object.
package jsonmode

import (
	"encoding/json"
	"strings"

	"github.com/layer0ai/layer0/internal/directive"
	"github.com/layer0ai/layer0/internal/llm"
)

// Instruction is the system text that asks for JSON without a schema.
const Instruction = "Respond with exactly one valid JSON object and nothing else: no prose before or after it, no Markdown code fence."

// schemaInstruction precedes the schema in the instruction for a json_schema answer.
const schemaInstruction = "Respond with exactly one valid JSON value that matches the following JSON Schema, and nothing else: no prose before or after it, no Markdown code fence.\n\nJSON Schema:\n"

// Prepare returns the request to send for req: req itself when it does not ask for JSON,
// else a copy with the instruction as a last system block and, when the answer is an object
// and the conversation ends with a user message, a final assistant message "{". prefilled
// tells whether the answer's text must be preceded by "{" (Sink does it).
func Prepare(req *llm.Request) (up llm.Request, prefilled bool) {
	up = *req
	f := &req.ResponseFormat
	if !f.JSON() {
		return up, false
	}
	up.ResponseFormat = llm.ResponseFormat{}
	text := Instruction
	object := true
	if f.Type == llm.ResponseJSONSchema && len(f.Schema) > 0 {
		text = schemaInstruction + quoteSchema(f.Schema)
		object = isObjectSchema(f.Schema)
	}
	up.System = append(append(make([]llm.Block, 0, len(req.System)+1), req.System...), llm.Block{Type: llm.BlockText, Text: text})
	n := len(req.Messages)
	if !object || n == 0 || req.Messages[n-1].Role != llm.RoleUser {
		return up, false
	}
	up.Messages = append(append(make([]llm.Message, 0, n+1), req.Messages...),
		llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockText, Text: "{"}}})
	return up, true
}

// quoteSchema returns the schema's text for the system prompt. The system prompt is where
// directives are read, by a layer0 peer among others, and no engine is ever sent one: a `<|`
// (which valid JSON holds only inside a string) is written `<\u007c` when the schema holds a
// directive — the same JSON value.
func quoteSchema(raw json.RawMessage) string {
	s := string(raw)
	if directive.Contains(s) {
		s = strings.ReplaceAll(s, "<|", `<\u007c`)
	}
	return s
}

// isObjectSchema reports whether a schema's root is an object: its type is "object", or it
// gives properties without a type.
func isObjectSchema(raw json.RawMessage) bool {
	var s struct {
		Type       json.RawMessage `json:"type"`
		Properties json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return false
	}
	var t string
	if json.Unmarshal(s.Type, &t) == nil {
		return t == "object"
	}
	return len(s.Type) == 0 && len(s.Properties) > 0
}

// Sink puts the prefilled "{" back in front of the first text of the answer it passes on.
type Sink struct {
	inner llm.Sink
	done  bool
	ev    llm.Event
}

// NewSink returns a Sink passing events on to inner.
func NewSink(inner llm.Sink) *Sink { return &Sink{inner: inner} }

// Send implements llm.Sink.
func (s *Sink) Send(ev *llm.Event) error {
	if !s.done && ev.Kind == llm.EventTextDelta {
		s.done = true
		s.ev = *ev
		s.ev.Text = "{" + ev.Text
		return s.inner.Send(&s.ev)
	}
	return s.inner.Send(ev)
}

// Flush implements llm.Sink.
func (s *Sink) Flush() error { return s.inner.Flush() }
