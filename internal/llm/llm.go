// Package llm is the canonical model every client format and every engine meet in: one Request
// decoded from Anthropic JSON, OpenAI JSON or the binary protocol, and one stream of Events that
// engines push into a Sink and encoders turn back into the client's format. N fronts and M engines
// translate to and from this package, never to each other.
package llm

import (
	"encoding/json"
)

// Role is the author of a message.
type Role uint8

// Roles of a conversation. The system prompt at the head of a request lives in Request.System;
// RoleSystem is a system message inside the conversation (the Messages API's role "system", which
// current clients place between turns), kept at its place: the engines that can carry it there
// get it there, and each engine package documents what it does with one.
const (
	RoleUser Role = iota
	RoleAssistant
	RoleSystem
)

// String returns the role as the Anthropic and OpenAI APIs spell it.
func (r Role) String() string {
	switch r {
	case RoleAssistant:
		return "assistant"
	case RoleSystem:
		return "system"
	}
	return "user"
}

// BlockType says which fields of a Block are meaningful.
type BlockType uint8

// Content block types, as in the Anthropic Messages API.
const (
	BlockText BlockType = iota
	BlockImage
	BlockToolUse
	BlockToolResult
)

// String returns the block type as the Anthropic API spells it.
func (t BlockType) String() string {
	switch t {
	case BlockImage:
		return "image"
	case BlockToolUse:
		return "tool_use"
	case BlockToolResult:
		return "tool_result"
	}
	return "text"
}

// Block is one piece of message content. Which fields are set depends on Type:
//   - BlockText: Text.
//   - BlockImage: MediaType and Data (base64), or URL.
//   - BlockToolUse: ID, Name and Input (a JSON object).
//   - BlockToolResult: ToolUseID, Content (text or image blocks) and IsError.
type Block struct {
	Type      BlockType
	Text      string
	MediaType string
	Data      string
	URL       string
	ID        string
	Name      string
	Input     json.RawMessage
	ToolUseID string
	Content   []Block
	IsError   bool
}

// Message is one turn of the conversation.
type Message struct {
	Role    Role
	Content []Block
}

// TextMessage is a turn of role holding one text block.
func TextMessage(role Role, text string) Message {
	return Message{Role: role, Content: []Block{{Type: BlockText, Text: text}}}
}

// Tool is a function the model may call; InputSchema is a JSON Schema object.
type Tool struct {
	Name        string
	Description string
	InputSchema json.RawMessage
}

// ToolChoiceType says how the model must use the tools.
type ToolChoiceType uint8

// Tool choice types, as in the Anthropic API. The zero value is ToolAuto.
const (
	ToolAuto ToolChoiceType = iota
	ToolAny
	ToolNamed
	ToolNone
)

// ToolChoice constrains tool use. Name is set for ToolNamed.
type ToolChoice struct {
	Type                   ToolChoiceType
	Name                   string
	DisableParallelToolUse bool
}

// Format is the wire format a request arrived in or an engine speaks.
type Format uint8

// Wire formats.
const (
	FormatAnthropic Format = iota
	FormatOpenAI
	FormatBinary
	// FormatResponses is the OpenAI Responses API (POST /v1/responses): OpenAI's ranges and
	// defaults, its own shapes on the wire.
	FormatResponses
)

// String names the format for logs and metrics.
func (f Format) String() string {
	switch f {
	case FormatOpenAI:
		return "openai"
	case FormatBinary:
		return "binary"
	case FormatResponses:
		return "responses"
	}
	return "anthropic"
}

// OpenAIRanges reports whether requests in the format follow the OpenAI API's ranges: max_tokens
// optional, temperature up to 2.
func (f Format) OpenAIRanges() bool { return f == FormatOpenAI || f == FormatResponses }

// Request is the canonical request. A zero pointer parameter means "not given".
type Request struct {
	Model         string
	System        []Block // text blocks only
	Messages      []Message
	MaxTokens     int
	Temperature   *float64
	TopP          *float64
	TopK          *int
	StopSequences []string
	Tools         []Tool
	ToolChoice    ToolChoice
	Stream        bool
	UserID        string // metadata.user_id
	// ResponseFormat asks for the answer's shape: free text (the zero value), a JSON object, or
	// JSON matching a schema (OpenAI's response_format, the json_mode directive).
	ResponseFormat ResponseFormat

	// Ignored names the first field of the client's body that the decoder accepted without
	// carrying it here (OpenAI's seed or logprobs, a vendor's sampling parameter, Anthropic's
	// thinking); "" when there is none. The pass-through path sends it to an engine of the
	// client's format, a translated request loses it: the response cache does not store such a
	// request's answer, whose key could not tell it from the same request without the field.
	Ignored string

	// Format is the client's wire format; encoders and the pass-through path read it.
	Format Format
}

// ResponseFormatType is the shape an answer must take.
type ResponseFormatType uint8

// Response format types, as OpenAI's response_format names them. The zero value is free text.
const (
	ResponseText ResponseFormatType = iota
	// ResponseJSONObject asks for one valid JSON object.
	ResponseJSONObject
	// ResponseJSONSchema asks for one JSON value matching ResponseFormat.Schema.
	ResponseJSONSchema
)

// String returns the type as OpenAI's response_format spells it.
func (t ResponseFormatType) String() string {
	switch t {
	case ResponseJSONObject:
		return "json_object"
	case ResponseJSONSchema:
		return "json_schema"
	}
	return "text"
}

// ResponseFormat constrains the answer's shape. Name, Schema and Strict are set for
// ResponseJSONSchema only: Schema is a JSON Schema object.
type ResponseFormat struct {
	Type   ResponseFormatType
	Name   string
	Schema json.RawMessage
	Strict bool
}

// JSON reports whether the answer must be JSON (an object, or a schema's value).
func (f *ResponseFormat) JSON() bool { return f.Type != ResponseText }

// HasSystemMessages reports whether a message of the conversation has RoleSystem.
func (r *Request) HasSystemMessages() bool {
	for i := range r.Messages {
		if r.Messages[i].Role == RoleSystem {
			return true
		}
	}
	return false
}

// SystemText joins the system blocks' text with blank lines.
func (r *Request) SystemText() string { return JoinText(r.System) }

// JoinText joins the text of the text blocks of bs with blank lines.
func JoinText(bs []Block) string {
	if len(bs) == 1 && bs[0].Type == BlockText {
		return bs[0].Text
	}
	n, k := 0, 0
	for i := range bs {
		if bs[i].Type == BlockText {
			n += len(bs[i].Text) + 2
			k++
		}
	}
	if k == 0 {
		return ""
	}
	buf := make([]byte, 0, n)
	for i := range bs {
		if bs[i].Type != BlockText {
			continue
		}
		if len(buf) > 0 {
			buf = append(buf, '\n', '\n')
		}
		buf = append(buf, bs[i].Text...)
	}
	return string(buf)
}

// StopReason says why generation ended.
type StopReason uint8

// Stop reasons, as in the Anthropic API.
const (
	StopEndTurn StopReason = iota
	StopMaxTokens
	StopSequence
	StopToolUse
	// StopRefusal is an answer the engine stopped for its content: Anthropic's refusal, OpenAI's
	// content_filter. It is never cached.
	StopRefusal
)

// String returns the Anthropic spelling.
func (s StopReason) String() string {
	switch s {
	case StopRefusal:
		return "refusal"
	case StopMaxTokens:
		return "max_tokens"
	case StopSequence:
		return "stop_sequence"
	case StopToolUse:
		return "tool_use"
	}
	return "end_turn"
}

// Usage counts tokens in the engine's (model's) tokenizer.
type Usage struct {
	InputTokens              int
	OutputTokens             int
	CacheCreationInputTokens int
	CacheReadInputTokens     int
}

// EventKind says which fields of an Event are meaningful.
type EventKind uint8

// Event kinds, in the order an engine sends them:
// Start, then for each content block BlockStart, TextDelta or ToolDelta…, BlockStop; then Stop.
const (
	// EventStart opens the message: ID, Model, Usage (input and cache counts).
	EventStart EventKind = iota
	// EventBlockStart opens content block Index of type Block (text or tool_use: ID, Name).
	EventBlockStart
	// EventTextDelta appends Text to block Index.
	EventTextDelta
	// EventToolDelta appends the JSON fragment Text to the input of tool_use block Index.
	EventToolDelta
	// EventBlockStop closes block Index.
	EventBlockStop
	// EventStop ends the message: Stop, StopSequence (when Stop is StopSequence) and the final,
	// complete Usage (input, output and cache counts).
	EventStop
)

// Event is one step of a response stream. Events are passed by pointer and must not be retained
// by a Sink after Send returns: engines reuse them.
type Event struct {
	Kind         EventKind
	Index        int
	Block        BlockType
	ID           string
	Name         string
	Model        string
	Text         string
	Stop         StopReason
	StopSequence string
	Usage        Usage
}

// Sink receives a response stream. Send may buffer; Flush tells the sink the engine has nothing
// more ready right now and is about to wait, so everything buffered must reach the client. That is
// how encoders coalesce ready tokens into one write without ever holding one back.
type Sink interface {
	Send(ev *Event) error
	Flush() error
}

// WriteThreshold is how many bytes a stream encoder (a Sink that writes a wire format) collects
// before it writes them to its writer unasked. Writing is not flushing: the server's response
// writer keeps the bytes, in a pooled buffer, until the next Flush. So an engine that hands over
// a hundred events at once costs the encoder no more than its first buffer, and one that never
// flushes cannot grow that buffer without bound.
const WriteThreshold = 2 << 10
