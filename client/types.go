package client

import (
	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

// Canonical types, re-exported so that a program builds requests and reads events with this
// package alone: it needs no other package of layer0, and links none of the gateway.
type (
	// Request is a request in layer0's canonical form.
	Request = llm.Request
	// Message is one turn of a conversation.
	Message = llm.Message
	// Block is one piece of message content.
	Block = llm.Block
	// Event is one step of a response stream.
	Event = llm.Event
	// Response is a complete answer.
	Response = llm.Response
	// Error is every failure the server reports: Kind (and Status()) says which, Code is the
	// X-Error-Code (INVALID_BINARY for a malformed binary request), Message is the server's text.
	Error = apierr.Error
	// ErrorKind says which failure an Error is (Error.Kind), one per Anthropic error type.
	ErrorKind = apierr.Kind
	// Role is the author of a message: RoleUser, RoleAssistant or RoleSystem.
	Role = llm.Role
	// BlockType says which fields of a Block are meaningful.
	BlockType = llm.BlockType
	// EventKind says which fields of an Event are meaningful.
	EventKind = llm.EventKind
	// StopReason says why generation ended.
	StopReason = llm.StopReason
	// Usage counts tokens.
	Usage = llm.Usage
	// Tool is a function the model may call.
	Tool = llm.Tool
	// ToolChoice constrains tool use.
	ToolChoice = llm.ToolChoice
	// ToolChoiceType says how the model must use the tools.
	ToolChoiceType = llm.ToolChoiceType
	// ResponseFormat constrains the answer's shape (Request.ResponseFormat).
	ResponseFormat = llm.ResponseFormat
	// ResponseFormatType is the shape an answer must take.
	ResponseFormatType = llm.ResponseFormatType
)

// Roles of a conversation. The system prompt is Request.System; RoleSystem is a system message
// inside the conversation, kept at its place (the binary protocol refuses it).
const (
	RoleUser      = llm.RoleUser
	RoleAssistant = llm.RoleAssistant
	RoleSystem    = llm.RoleSystem
)

// Content block types.
const (
	BlockText       = llm.BlockText
	BlockImage      = llm.BlockImage
	BlockToolUse    = llm.BlockToolUse
	BlockToolResult = llm.BlockToolResult
)

// Event kinds, in the order a stream sends them: EventStart, then for each content block
// EventBlockStart, EventTextDelta or EventToolDelta…, EventBlockStop; then EventStop.
const (
	EventStart      = llm.EventStart
	EventBlockStart = llm.EventBlockStart
	EventTextDelta  = llm.EventTextDelta
	EventToolDelta  = llm.EventToolDelta
	EventBlockStop  = llm.EventBlockStop
	EventStop       = llm.EventStop
)

// Stop reasons.
const (
	StopEndTurn   = llm.StopEndTurn
	StopMaxTokens = llm.StopMaxTokens
	StopSequence  = llm.StopSequence
	StopToolUse   = llm.StopToolUse
	StopRefusal   = llm.StopRefusal
)

// Tool choice types; the zero value is ToolAuto.
const (
	ToolAuto  = llm.ToolAuto
	ToolAny   = llm.ToolAny
	ToolNamed = llm.ToolNamed
	ToolNone  = llm.ToolNone
)

// Response format types; the zero value is ResponseText (free text).
const (
	ResponseText       = llm.ResponseText
	ResponseJSONObject = llm.ResponseJSONObject
	ResponseJSONSchema = llm.ResponseJSONSchema
)

// Error kinds, with the HTTP status each is answered with.
const (
	ErrorAPI                  = apierr.API                  // 500 api_error: anything unclassified
	ErrorInvalidRequest       = apierr.InvalidRequest       // 400 invalid_request_error
	ErrorAuthentication       = apierr.Authentication       // 401 authentication_error
	ErrorPermission           = apierr.Permission           // 403 permission_error
	ErrorNotFound             = apierr.NotFound             // 404 not_found_error
	ErrorRequestTooLarge      = apierr.RequestTooLarge      // 413 request_too_large
	ErrorRateLimit            = apierr.RateLimit            // 429 rate_limit_error
	ErrorTimeout              = apierr.Timeout              // 504 timeout_error
	ErrorOverloaded           = apierr.Overloaded           // 529 overloaded_error
	ErrorBadGateway           = apierr.BadGateway           // 502 api_error: the engine failed
	ErrorUnavailable          = apierr.Unavailable          // 503 api_error: no engine can serve
	ErrorMethodNotAllowed     = apierr.MethodNotAllowed     // 405 invalid_request_error
	ErrorRequestTimeout       = apierr.RequestTimeout       // 408 timeout_error: the request was sent too slowly
	ErrorUnsupportedMediaType = apierr.UnsupportedMediaType // 415 invalid_request_error
)

// TextMessage is a turn of role holding one text block: client.TextMessage(client.RoleUser, "Hi").
func TextMessage(role Role, text string) Message { return llm.TextMessage(role, text) }
