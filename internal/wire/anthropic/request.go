package anthropic

import (
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// AppendRequest appends r as a Messages API request body, the inverse of DecodeRequest: model
// is r.Model and stream is r.Stream (both set by the caller for the upstream). Fields at their
// zero value are left out; a single text block is written as a plain string. max_tokens is left
// out when zero, as count_tokens wants.
func AppendRequest(dst []byte, r *llm.Request) []byte {
	dst = append(dst, `{"model":`...)
	dst = appendString(dst, r.Model)
	if r.MaxTokens > 0 {
		dst = append(dst, `,"max_tokens":`...)
		dst = appendInt(dst, r.MaxTokens)
	}
	dst = append(dst, `,"messages":[`...)
	for i := range r.Messages {
		m := &r.Messages[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"role":"`...)
		dst = append(dst, m.Role.String()...)
		dst = append(dst, `","content":`...)
		dst = appendContent(dst, m.Content)
		dst = append(dst, '}')
	}
	dst = append(dst, ']')
	if len(r.System) > 0 {
		dst = append(dst, `,"system":`...)
		dst = appendContent(dst, r.System)
	}
	if r.Temperature != nil && finite(*r.Temperature) {
		dst = append(dst, `,"temperature":`...)
		dst = appendFloat(dst, *r.Temperature)
	}
	if r.TopP != nil && finite(*r.TopP) {
		dst = append(dst, `,"top_p":`...)
		dst = appendFloat(dst, *r.TopP)
	}
	if r.TopK != nil {
		dst = append(dst, `,"top_k":`...)
		dst = appendInt(dst, *r.TopK)
	}
	if len(r.StopSequences) > 0 {
		dst = append(dst, `,"stop_sequences":`...)
		dst = jsontext.AppendStrings(dst, r.StopSequences)
	}
	if len(r.Tools) > 0 {
		dst = appendTools(dst, r.Tools)
	}
	if r.ToolChoice != (llm.ToolChoice{}) {
		dst = appendToolChoice(dst, &r.ToolChoice)
	}
	if r.UserID != "" {
		dst = append(dst, `,"metadata":{"user_id":`...)
		dst = appendString(dst, r.UserID)
		dst = append(dst, '}')
	}
	if r.Stream {
		dst = append(dst, `,"stream":true`...)
	}
	return append(dst, '}')
}

// appendTools appends the "tools" member; a tool whose input schema is not a JSON object is
// sent the empty object schema.
func appendTools(dst []byte, tools []llm.Tool) []byte {
	dst = append(dst, `,"tools":[`...)
	for i := range tools {
		t := &tools[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"name":`...)
		dst = appendString(dst, t.Name)
		if t.Description != "" {
			dst = append(dst, `,"description":`...)
			dst = appendString(dst, t.Description)
		}
		dst = append(dst, `,"input_schema":`...)
		if validObject(t.InputSchema) {
			dst = append(dst, t.InputSchema...)
		} else {
			dst = append(dst, `{"type":"object"}`...)
		}
		dst = append(dst, '}')
	}
	dst = append(dst, ']')
	return dst
}

// appendToolChoice appends the "tool_choice" member: the type, the tool's name for a named
// choice, and disable_parallel_tool_use where it is set and tools may be used at all.
func appendToolChoice(dst []byte, tc *llm.ToolChoice) []byte {
	dst = append(dst, `,"tool_choice":{"type":"`...)
	switch tc.Type {
	case llm.ToolAny:
		dst = append(dst, "any"...)
	case llm.ToolNamed:
		dst = append(dst, "tool"...)
	case llm.ToolNone:
		dst = append(dst, "none"...)
	default:
		dst = append(dst, "auto"...)
	}
	dst = append(dst, '"')
	if tc.Type == llm.ToolNamed {
		dst = append(dst, `,"name":`...)
		dst = appendString(dst, tc.Name)
	}
	if tc.DisableParallelToolUse && tc.Type != llm.ToolNone {
		dst = append(dst, `,"disable_parallel_tool_use":true`...)
	}
	dst = append(dst, '}')
	return dst
}

// appendContent appends message content: "" when empty, a string for one text block, else an
// array of blocks.
func appendContent(dst []byte, blocks []llm.Block) []byte {
	switch {
	case len(blocks) == 0:
		return append(dst, `""`...)
	case len(blocks) == 1 && blocks[0].Type == llm.BlockText:
		return appendString(dst, blocks[0].Text)
	}
	dst = append(dst, '[')
	for i := range blocks {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendBlock(dst, &blocks[i])
	}
	return append(dst, ']')
}

func appendBlock(dst []byte, b *llm.Block) []byte {
	switch b.Type {
	case llm.BlockImage:
		if b.URL != "" {
			dst = append(dst, `{"type":"image","source":{"type":"url","url":`...)
			dst = appendString(dst, b.URL)
		} else {
			dst = append(dst, `{"type":"image","source":{"type":"base64","media_type":`...)
			dst = appendString(dst, b.MediaType)
			dst = append(dst, `,"data":`...)
			dst = appendString(dst, b.Data)
		}
		return append(dst, '}', '}')
	case llm.BlockToolUse:
		return appendToolUse(dst, b)
	case llm.BlockToolResult:
		dst = append(dst, `{"type":"tool_result","tool_use_id":`...)
		dst = appendString(dst, b.ToolUseID)
		if len(b.Content) > 0 {
			dst = append(dst, `,"content":`...)
			dst = appendContent(dst, b.Content)
		}
		if b.IsError {
			dst = append(dst, `,"is_error":true`...)
		}
		return append(dst, '}')
	}
	dst = append(dst, `{"type":"text","text":`...)
	dst = appendString(dst, b.Text)
	return append(dst, '}')
}
