package openai

import (
	"github.com/layer0ai/layer0/internal/llm"
)

// FinishReason is the OpenAI finish_reason for a stop reason: stop sequences and natural ends are
// both "stop", max_tokens is "length", tool_use is "tool_calls", a refusal is "content_filter".
func FinishReason(s llm.StopReason) string {
	switch s {
	case llm.StopRefusal:
		return "content_filter"
	case llm.StopMaxTokens:
		return "length"
	case llm.StopToolUse:
		return "tool_calls"
	}
	return "stop"
}

// appendUsage appends an OpenAI usage object. prompt_tokens includes cached tokens, as OpenAI
// counts them; cached_tokens is the part read from the prompt cache.
func appendUsage(dst []byte, u llm.Usage) []byte {
	prompt := int64(u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens)
	out := int64(u.OutputTokens)
	dst = append(dst, `{"prompt_tokens":`...)
	dst = appendInt(dst, prompt)
	dst = append(dst, `,"completion_tokens":`...)
	dst = appendInt(dst, out)
	dst = append(dst, `,"total_tokens":`...)
	dst = appendInt(dst, prompt+out)
	dst = append(dst, `,"prompt_tokens_details":{"cached_tokens":`...)
	dst = appendInt(dst, int64(u.CacheReadInputTokens))
	return append(dst, "}}"...)
}

// AppendResponse appends a non-streamed chat.completion object for r. id is the completion id
// (ChatID(r.ID) when empty); created is the Unix time in seconds. Text blocks are joined into
// message.content (null when there is none); tool_use blocks become message.tool_calls.
func AppendResponse(dst []byte, r *llm.Response, id string, created int64) []byte {
	if id == "" {
		id = ChatID(r.ID)
	}
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, id)
	dst = append(dst, `,"object":"chat.completion","created":`...)
	dst = appendInt(dst, created)
	dst = append(dst, `,"model":`...)
	dst = appendString(dst, r.Model)
	dst = append(dst, `,"choices":[{"index":0,"message":{"role":"assistant",`...)
	dst = appendAssistantFields(dst, r.Content, true)
	dst = append(dst, `},"logprobs":null,"finish_reason":`...)
	dst = appendString(dst, FinishReason(r.Stop))
	dst = append(dst, `}],"usage":`...)
	dst = appendUsage(dst, r.Usage)
	return append(dst, '}')
}

func appendToolCall(dst []byte, id, name string, input []byte) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendString(dst, CallID(id))
	dst = append(dst, `,"type":"function","function":{"name":`...)
	dst = appendString(dst, name)
	dst = append(dst, `,"arguments":`...)
	if len(input) == 0 {
		input = []byte("{}")
	}
	dst = appendString(dst, string(input))
	return append(dst, "}}"...)
}
