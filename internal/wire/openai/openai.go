// Package openai is the OpenAI Chat Completions wire format, both sides of it: the server side
// decodes a client's POST /v1/chat/completions into an llm.Request and encodes llm events as a
// JSON body or `data:` SSE chunks; the client side encodes an llm.Request for an OpenAI-compatible
// engine (vLLM, SGLang, llama.cpp, Ollama, TGI, hosted) and turns its JSON or SSE answer back into
// llm events. It is pure encoding with no policy; encoders append to caller-owned buffers and
// allocate nothing per streamed token.
//
// Usage follows the canonical (Anthropic) meaning: llm.Usage.InputTokens excludes cached tokens,
// while OpenAI's prompt_tokens includes them and reports prompt_tokens_details.cached_tokens.
// Ids are translated by prefix so that either client sees its own kind and tool ids survive a
// round trip across turns. Canonical ids are Anthropic's: reading an engine's stream turns
// chatcmpl-X into msg_X and call_X into toolu_X; encoding for an OpenAI client or engine turns
// them back. Ids of any other shape (vLLM's chatcmpl-tool-X) pass unchanged both ways, since some
// chat templates check them.
package openai

import (
	"strings"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/ids"
)

// ChatID returns id as an OpenAI chat completion id: an Anthropic msg_X becomes chatcmpl-X, a
// chatcmpl- id is kept, anything else gets the chatcmpl- prefix. An empty id gets a fresh one.
func ChatID(id string) string {
	switch {
	case id == "":
		return ids.Completion()
	case strings.HasPrefix(id, "chatcmpl-"):
		return id
	case strings.HasPrefix(id, "msg_"):
		return "chatcmpl-" + id[len("msg_"):]
	}
	return "chatcmpl-" + id
}

// CallID returns a tool-use id as an OpenAI tool call id: toolu_X becomes call_X; any other id
// (call_X, vLLM's chatcmpl-tool-X) is kept, so a client that sends it back in the next turn
// reaches the engine with an id that still pairs its tool call with its result.
func CallID(id string) string {
	if strings.HasPrefix(id, "toolu_") {
		return "call_" + id[len("toolu_"):]
	}
	if id == "" {
		return ids.ToolCall()
	}
	return id
}

// MessageID returns an engine's completion id in canonical form: chatcmpl-X becomes msg_X.
func MessageID(id string) string {
	if rest, ok := strings.CutPrefix(id, "chatcmpl-"); ok && rest != "" {
		return "msg_" + rest
	}
	return id
}

// ToolUseID returns an engine's tool call id in canonical form: call_X becomes toolu_X; other
// ids are kept.
func ToolUseID(id string) string {
	if rest, ok := strings.CutPrefix(id, "call_"); ok && rest != "" {
		return "toolu_" + rest
	}
	return id
}

// Status is the HTTP status an OpenAI client gets for e: as e.Status(), except that Anthropic's
// 529 overloaded becomes 503, which OpenAI clients know and retry.
func Status(e *apierr.Error) int {
	if e.Kind == apierr.Overloaded {
		return 503
	}
	return e.Status()
}

// errorTypeCode returns the OpenAI error type and code for e, as the OpenAI API spells them.
// Every client error but a 429 is type invalid_request_error; a 429 is type requests or tokens,
// what the limit counts, with code rate_limit_exceeded; a server error is type server_error. The
// code is the OpenAI API's where it has one for the case (invalid_api_key, model_not_found,
// rate_limit_exceeded, context_length_exceeded, server_is_overloaded), else e.Code in lower
// case, else the kind's own (method_not_allowed, unsupported_media_type, request_too_large, timeout, bad_gateway,
// service_unavailable), else none (null). docs/errors.md lists them all.
func errorTypeCode(e *apierr.Error) (typ, code string) {
	code = strings.ToLower(e.Code)
	orKind := func(c string) string {
		if code == "" {
			return c
		}
		return code
	}
	switch e.Kind {
	case apierr.InvalidRequest:
		return "invalid_request_error", code
	case apierr.MethodNotAllowed:
		return "invalid_request_error", orKind("method_not_allowed")
	case apierr.UnsupportedMediaType:
		return "invalid_request_error", orKind("unsupported_media_type")
	case apierr.Authentication:
		// A missing key and a wrong key alike: the API's code for a key it cannot use.
		return "invalid_request_error", "invalid_api_key"
	case apierr.Permission:
		if code == "model_not_allowed" {
			// The OpenAI API answers a model the project may not use with model_not_found.
			code = "model_not_found"
		}
		return "invalid_request_error", code
	case apierr.NotFound:
		if code == "" && e.Param == "model" {
			code = "model_not_found"
		}
		return "invalid_request_error", code
	case apierr.RequestTooLarge:
		return "invalid_request_error", orKind("request_too_large")
	case apierr.RateLimit:
		typ = e.Limit
		if typ == "" {
			typ = apierr.LimitRequests
		}
		return typ, "rate_limit_exceeded"
	case apierr.Timeout:
		return "server_error", orKind("timeout")
	case apierr.RequestTimeout:
		// The client was too slow: its request is at fault, as with any other 4xx.
		return "invalid_request_error", orKind("request_timeout")
	case apierr.Overloaded:
		return "server_error", orKind("server_is_overloaded")
	case apierr.BadGateway:
		return "server_error", orKind("bad_gateway")
	case apierr.Unavailable:
		return "server_error", orKind("service_unavailable")
	}
	return "server_error", code
}

// AppendError appends the OpenAI error body for e:
//
//	{"error":{"message":"…","type":"invalid_request_error","param":"messages","code":"…"}}
//
// The type and code are as errorTypeCode says; param is null when e names no field. The cause
// is never written.
func AppendError(dst []byte, e *apierr.Error) []byte {
	dst = append(dst, `{"error":`...)
	dst = appendErrorObject(dst, e)
	return append(dst, '}')
}

func appendErrorObject(dst []byte, e *apierr.Error) []byte {
	typ, code := errorTypeCode(e)
	dst = append(dst, `{"message":`...)
	dst = appendString(dst, e.Message)
	dst = append(dst, `,"type":`...)
	dst = appendString(dst, typ)
	dst = append(dst, `,"param":`...)
	if e.Param != "" {
		dst = appendString(dst, e.Param)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"code":`...)
	if code != "" {
		dst = appendString(dst, code)
	} else {
		dst = append(dst, "null"...)
	}
	return append(dst, '}')
}

// Model is one entry of the OpenAI models list.
type Model struct {
	ID      string
	Created int64 // Unix seconds
	OwnedBy string
}

// AppendModelList appends the OpenAI GET /v1/models body:
//
//	{"object":"list","data":[{"id":"…","object":"model","created":1735689600,"owned_by":"…"}]}
func AppendModelList(dst []byte, models []Model) []byte {
	dst = append(dst, `{"object":"list","data":[`...)
	for i, m := range models {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendModel(dst, m)
	}
	return append(dst, "]}"...)
}

// AppendModel appends one model object, the body of GET /v1/models/{id}.
func AppendModel(dst []byte, m Model) []byte {
	owner := m.OwnedBy
	if owner == "" {
		owner = "layer0"
	}
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, m.ID)
	dst = append(dst, `,"object":"model","created":`...)
	dst = appendInt(dst, m.Created)
	dst = append(dst, `,"owned_by":`...)
	dst = appendString(dst, owner)
	return append(dst, '}')
}
