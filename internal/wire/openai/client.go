package openai

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// AppendRequest appends the Chat Completions request an OpenAI-compatible engine gets for r,
// with r.Model as the model. A streaming request asks for stream_options.include_usage so that
// the engine reports usage in a final chunk.
//
// The system blocks become one system message, and each system message of the conversation
// (llm.RoleSystem) a system message at its place, its text blocks joined; tool_result blocks become tool messages placed
// before the rest of their user turn (images inside tool results cannot be carried and are
// dropped, is_error is lost); tool ids toolu_X are sent as call_X, the same way in tool calls and
// in results, so pairs stay matched. top_k is sent when set (vLLM, SGLang, llama.cpp and Ollama
// read it; the hosted OpenAI API rejects it).
func AppendRequest(dst []byte, r *llm.Request) []byte {
	dst = append(dst, `{"model":`...)
	dst = appendString(dst, r.Model)
	dst = appendMessages(dst, r)
	if r.MaxTokens > 0 {
		dst = append(dst, `,"max_tokens":`...)
		dst = appendInt(dst, int64(r.MaxTokens))
	}
	if r.Temperature != nil {
		dst = append(dst, `,"temperature":`...)
		dst = appendFloat(dst, *r.Temperature)
	}
	if r.TopP != nil {
		dst = append(dst, `,"top_p":`...)
		dst = appendFloat(dst, *r.TopP)
	}
	if r.TopK != nil {
		dst = append(dst, `,"top_k":`...)
		dst = appendInt(dst, int64(*r.TopK))
	}
	if len(r.StopSequences) > 0 {
		dst = append(dst, `,"stop":`...)
		dst = jsontext.AppendStrings(dst, r.StopSequences)
	}
	if len(r.Tools) > 0 {
		dst = appendTools(dst, r.Tools, &r.ToolChoice)
	}
	dst = appendResponseFormat(dst, &r.ResponseFormat)
	if r.UserID != "" {
		dst = append(dst, `,"user":`...)
		dst = appendString(dst, r.UserID)
	}
	if r.Stream {
		dst = append(dst, `,"stream":true,"stream_options":{"include_usage":true}`...)
	}
	return append(dst, '}')
}

// appendMessages appends the "messages" member: the system prompt as the first system message,
// then the conversation, a user turn's tool results each a "tool" message of its own before the
// rest of its content.
func appendMessages(dst []byte, r *llm.Request) []byte {
	dst = append(dst, `,"messages":[`...)
	first := true
	sep := func() {
		if !first {
			dst = append(dst, ',')
		}
		first = false
	}
	if sys := r.SystemText(); sys != "" {
		sep()
		dst = append(dst, `{"role":"system","content":`...)
		dst = appendString(dst, sys)
		dst = append(dst, '}')
	}
	for i := range r.Messages {
		m := &r.Messages[i]
		switch m.Role {
		case llm.RoleAssistant:
			sep()
			dst = appendAssistant(dst, m.Content)
			continue
		case llm.RoleSystem:
			// A system message inside the conversation stays a system message at its place:
			// Chat Completions takes them anywhere.
			sep()
			dst = append(dst, `{"role":"system","content":`...)
			dst = appendString(dst, llm.JoinText(m.Content))
			dst = append(dst, '}')
			continue
		}
		rest := 0
		for _, b := range m.Content {
			if b.Type != llm.BlockToolResult {
				rest++
				continue
			}
			sep()
			dst = append(dst, `{"role":"tool","tool_call_id":`...)
			dst = appendString(dst, CallID(b.ToolUseID))
			dst = append(dst, `,"content":"`...)
			for _, c := range b.Content {
				if c.Type == llm.BlockText {
					dst = appendEscaped(dst, c.Text)
				}
			}
			dst = append(dst, `"}`...)
		}
		if rest > 0 {
			sep()
			dst = appendUser(dst, m.Content, rest)
		}
	}
	dst = append(dst, ']')
	return dst
}

// appendTools appends the "tools" member, each tool a function, and how the model must use them
// (tc): "tool_choice" and "parallel_tool_calls" where they differ from the defaults.
func appendTools(dst []byte, tools []llm.Tool, tc *llm.ToolChoice) []byte {
	dst = append(dst, `,"tools":[`...)
	for i, t := range tools {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"type":"function","function":{"name":`...)
		dst = appendString(dst, t.Name)
		if t.Description != "" {
			dst = append(dst, `,"description":`...)
			dst = appendString(dst, t.Description)
		}
		dst = append(dst, `,"parameters":`...)
		dst = appendRaw(dst, t.InputSchema, `{"type":"object","properties":{}}`)
		dst = append(dst, "}}"...)
	}
	dst = append(dst, ']')
	switch tc.Type {
	case llm.ToolAny:
		dst = append(dst, `,"tool_choice":"required"`...)
	case llm.ToolNone:
		dst = append(dst, `,"tool_choice":"none"`...)
	case llm.ToolNamed:
		dst = append(dst, `,"tool_choice":{"type":"function","function":{"name":`...)
		dst = appendString(dst, tc.Name)
		dst = append(dst, "}}"...)
	}
	if tc.DisableParallelToolUse {
		dst = append(dst, `,"parallel_tool_calls":false`...)
	}
	return dst
}

// appendResponseFormat appends the "response_format" member, when the answer's shape is
// constrained (a JSON object, or one of a schema).
func appendResponseFormat(dst []byte, f *llm.ResponseFormat) []byte {
	switch f.Type {
	case llm.ResponseJSONObject:
		dst = append(dst, `,"response_format":{"type":"json_object"}`...)
	case llm.ResponseJSONSchema:
		dst = append(dst, `,"response_format":{"type":"json_schema","json_schema":{"name":`...)
		name := f.Name
		if name == "" {
			name = "response"
		}
		dst = appendString(dst, name)
		dst = append(dst, `,"schema":`...)
		dst = appendRaw(dst, f.Schema, `{"type":"object"}`)
		if f.Strict {
			dst = append(dst, `,"strict":true`...)
		}
		dst = append(dst, "}}"...)
	}
	return dst
}

func appendUser(dst []byte, blocks []llm.Block, n int) []byte {
	dst = append(dst, `{"role":"user","content":`...)
	if n == 1 {
		for _, b := range blocks {
			if b.Type == llm.BlockText {
				dst = appendString(dst, b.Text)
				return append(dst, '}')
			}
		}
	}
	dst = append(dst, '[')
	first := true
	for _, b := range blocks {
		switch b.Type {
		case llm.BlockText:
			if !first {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"type":"text","text":`...)
			dst = appendString(dst, b.Text)
			dst = append(dst, '}')
		case llm.BlockImage:
			if !first {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"type":"image_url","image_url":{"url":"`...)
			if b.URL != "" {
				dst = appendEscaped(dst, b.URL)
			} else {
				dst = append(dst, "data:"...)
				dst = appendEscaped(dst, b.MediaType)
				dst = append(dst, ";base64,"...)
				dst = appendEscaped(dst, b.Data)
			}
			dst = append(dst, `"}}`...)
		default:
			continue
		}
		first = false
	}
	return append(dst, "]}"...)
}

func appendAssistant(dst []byte, blocks []llm.Block) []byte {
	dst = append(dst, `{"role":"assistant",`...)
	return append(appendAssistantFields(dst, blocks, false), '}')
}

// appendAssistantFields appends an assistant message's "content" (its text blocks joined, or
// null), then "refusal":null when refusal is set (answers carry it, requests do not), then
// "tool_calls" when it has tool_use blocks.
func appendAssistantFields(dst []byte, blocks []llm.Block, refusal bool) []byte {
	dst = append(dst, `"content":`...)
	text := false
	for _, b := range blocks {
		if b.Type != llm.BlockText {
			continue
		}
		if !text {
			dst = append(dst, '"')
			text = true
		}
		dst = appendEscaped(dst, b.Text)
	}
	if text {
		dst = append(dst, '"')
	} else {
		dst = append(dst, "null"...)
	}
	if refusal {
		dst = append(dst, `,"refusal":null`...)
	}
	calls := 0
	for _, b := range blocks {
		if b.Type != llm.BlockToolUse {
			continue
		}
		if calls == 0 {
			dst = append(dst, `,"tool_calls":[`...)
		} else {
			dst = append(dst, ',')
		}
		calls++
		dst = appendToolCall(dst, b.ID, b.Name, b.Input)
	}
	if calls > 0 {
		dst = append(dst, ']')
	}
	return dst
}

// usageJSON is the OpenAI usage object.
type usageJSON struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// canonical converts OpenAI usage (prompt_tokens includes cached tokens) to llm.Usage
// (InputTokens excludes them).
func (u *usageJSON) canonical() llm.Usage {
	cached := 0
	if d := u.PromptTokensDetails; d != nil {
		cached = d.CachedTokens
	}
	return canonicalUsage(u.PromptTokens, u.CompletionTokens, cached)
}

// canonicalUsage is the llm.Usage of OpenAI counts: prompt tokens, of which cached were read
// from the cache, and completion tokens.
func canonicalUsage(prompt, completion, cached int) llm.Usage {
	out := llm.Usage{InputTokens: prompt, OutputTokens: completion}
	if cached > 0 && cached <= prompt {
		out.CacheReadInputTokens = cached
		out.InputTokens -= cached
	}
	return out
}

// errorJSON covers the error shapes OpenAI-compatible servers send: OpenAI's
// {"error":{"message","type","param","code"}}, vLLM's older top-level
// {"object":"error","message","type","code"}, Ollama's {"error":"text"}, llama.cpp's
// {"error":{"code":500,"message","type"}} and FastAPI's {"detail":"text"}.
type errorJSON struct {
	Error   json.RawMessage `json:"error"`
	Object  string          `json:"object"`
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
	Detail  json.RawMessage `json:"detail"`
}

type errorObject struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
}

const maxEngineMessage = 512

// DecodeError turns an engine's error response into an *apierr.Error of the kind its status
// calls for, with the engine's message (cut to 512 bytes) for the client. An engine's 401 or 403
// means layer0's own credential for it was refused: the client gets a 502 that says so and none
// of the engine's text, which may quote the credential.
func DecodeError(status int, body []byte) *apierr.Error {
	msg, typ, code := parseError(body)
	return engineError(status, msg, typ, code)
}

func engineError(status int, msg, typ, code string) *apierr.Error {
	kind := apierr.KindForStatus(status)
	if status == 401 || status == 403 {
		return &apierr.Error{Kind: apierr.BadGateway, Message: "engine refused layer0's credentials (status " + strconv.Itoa(status) + ")"}
	}
	if kind == apierr.API && status < 400 {
		kind = apierr.BadGateway
	}
	if msg == "" {
		msg = "engine error (status " + strconv.Itoa(status) + ")"
	}
	if len(msg) > maxEngineMessage {
		msg = strings.ToValidUTF8(msg[:maxEngineMessage], "") + "…"
	}
	e := &apierr.Error{Kind: kind, Message: msg, Cause: apierr.ErrEngineSaid}
	if kind == apierr.RateLimit && typ == apierr.LimitTokens {
		e.Limit = typ // a hosted engine's token limit stays a token limit for OpenAI clients
	}
	if code != "" && !isNumber(code) {
		e.Code = code
	} else if strings.Contains(typ, "context_length") || strings.Contains(msg, "maximum context length") {
		e.Code = "context_length_exceeded"
	}
	return e
}

func isNumber(s string) bool {
	_, err := strconv.Atoi(s)
	return err == nil
}

func parseError(body []byte) (msg, typ, code string) {
	var ej errorJSON
	if err := json.Unmarshal(body, &ej); err != nil {
		return strings.TrimSpace(string(bytes.ToValidUTF8(body, nil))), "", ""
	}
	switch {
	case len(ej.Error) > 0 && ej.Error[0] == '{':
		var eo errorObject
		_ = json.Unmarshal(ej.Error, &eo)
		return eo.Message, eo.Type, rawString(eo.Code)
	case len(ej.Error) > 0 && ej.Error[0] == '"':
		var s string
		_ = json.Unmarshal(ej.Error, &s)
		return s, "", ""
	case ej.Message != "":
		return ej.Message, ej.Type, rawString(ej.Code)
	case len(ej.Detail) > 0:
		if ej.Detail[0] == '"' {
			var s string
			_ = json.Unmarshal(ej.Detail, &s)
			return s, "", ""
		}
		return string(ej.Detail), "", ""
	}
	return "", "", ""
}

// rawString returns a JSON string's value or a number's text; "" for null or anything else.
func rawString(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	if raw[0] == '"' {
		var s string
		_ = json.Unmarshal(raw, &s)
		return s
	}
	if raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9') {
		return string(raw)
	}
	return ""
}
