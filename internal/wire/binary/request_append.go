package binary

import (
	"bytes"
	ebin "encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/layer0ai/layer0/internal/llm"
)

// AppendRequest appends req encoded in mode's version to dst. For version 1 it refuses what
// version 1 cannot carry (tools, sampling parameters, stop sequences, non-text blocks, more than
// one block per message, or any field beyond its width) with an error naming it. System blocks
// go first, as role-2 messages in version 1 and as system params in version 2. Neither version
// carries a system message inside the conversation (llm.RoleSystem): a request with one is
// refused (ErrSystemMessage), and the caller sends it in a format that does.
func AppendRequest(dst []byte, req *llm.Request, mode Mode) ([]byte, error) {
	if req.HasSystemMessages() {
		return dst, ErrSystemMessage
	}
	switch mode.Version {
	case V1:
		return appendV1(dst, req)
	case V2:
		return appendV2(dst, req, mode), nil
	}
	return dst, fmt.Errorf("binary: unsupported version %d", mode.Version)
}

// ErrSystemMessage is AppendRequest's refusal of a request with a system message inside the
// conversation, which no version of the protocol can place there.
var ErrSystemMessage = errors.New("binary: a system message inside the conversation cannot be carried")

func appendV1(dst []byte, req *llm.Request) ([]byte, error) {
	v1err := func(format string, args ...any) ([]byte, error) {
		return dst, fmt.Errorf("binary: version 1 cannot carry "+format+"; use version 2", args...)
	}
	switch {
	case len(req.Model) == 0 || len(req.Model) > MaxModelLen:
		return v1err("a model name of %d bytes (1 to %d)", len(req.Model), MaxModelLen)
	case req.MaxTokens < 1 || req.MaxTokens > MaxTokensV1:
		return v1err("max_tokens %d (1 to %d)", req.MaxTokens, MaxTokensV1)
	case len(req.System)+len(req.Messages) > MaxMessagesV1:
		return v1err("%d messages (system blocks included; at most %d)", len(req.System)+len(req.Messages), MaxMessagesV1)
	case req.Temperature != nil:
		return v1err("temperature")
	case req.TopP != nil:
		return v1err("top_p")
	case req.TopK != nil:
		return v1err("top_k")
	case len(req.StopSequences) > 0:
		return v1err("stop sequences")
	case len(req.Tools) > 0 || req.ToolChoice != (llm.ToolChoice{}):
		return v1err("tools")
	case req.UserID != "":
		return v1err("metadata.user_id")
	}
	out := append(dst, Magic...)
	out = append(out, byte(len(req.Model)))
	out = append(out, req.Model...)
	out = append(out, byte(len(req.System)+len(req.Messages)))
	for i, b := range req.System {
		if b.Type != llm.BlockText || len(b.Text) > MaxContentV1 {
			return v1err("system block %d (text of at most %d bytes)", i, MaxContentV1)
		}
		out = append(out, 2)
		out = ebin.BigEndian.AppendUint16(out, uint16(len(b.Text)))
		out = append(out, b.Text...)
	}
	for i, m := range req.Messages {
		if len(m.Content) != 1 || m.Content[0].Type != llm.BlockText || len(m.Content[0].Text) > MaxContentV1 {
			return v1err("message %d (one text block of at most %d bytes)", i, MaxContentV1)
		}
		out = append(out, byte(m.Role))
		out = ebin.BigEndian.AppendUint16(out, uint16(len(m.Content[0].Text)))
		out = append(out, m.Content[0].Text...)
	}
	return ebin.BigEndian.AppendUint16(out, uint16(req.MaxTokens)), nil
}

func appendStr(b []byte, s string) []byte {
	b = ebin.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendV2(b []byte, req *llm.Request, mode Mode) []byte {
	b = append(b, Magic...)
	b = append(b, byte(V2))
	b = appendStr(b, req.Model)
	b = ebin.AppendUvarint(b, uint64(req.MaxTokens))
	b = ebin.AppendUvarint(b, uint64(len(req.Messages)))
	for _, m := range req.Messages {
		b = append(b, byte(m.Role))
		b = ebin.AppendUvarint(b, uint64(len(m.Content)))
		for i := range m.Content {
			b = appendBlock(b, &m.Content[i])
		}
	}
	param := func(b []byte, tag paramTag, val func([]byte) []byte) []byte {
		b = append(b, byte(tag), 0)
		start := len(b)
		return patchUvarintLen(val(b), start)
	}
	for _, s := range req.System {
		b = param(b, paramSystem, func(b []byte) []byte { return append(b, s.Text...) })
	}
	if req.Temperature != nil {
		b = param(b, paramTemperature, func(b []byte) []byte {
			return ebin.BigEndian.AppendUint64(b, math.Float64bits(*req.Temperature))
		})
	}
	if req.TopP != nil {
		b = param(b, paramTopP, func(b []byte) []byte { return ebin.BigEndian.AppendUint64(b, math.Float64bits(*req.TopP)) })
	}
	if req.TopK != nil {
		b = param(b, paramTopK, func(b []byte) []byte { return ebin.AppendUvarint(b, uint64(*req.TopK)) })
	}
	for _, s := range req.StopSequences {
		b = param(b, paramStopSequence, func(b []byte) []byte { return append(b, s...) })
	}
	for _, t := range req.Tools {
		b = param(b, paramTool, func(b []byte) []byte {
			b = appendStr(b, t.Name)
			b = appendStr(b, t.Description)
			return appendStr(b, string(t.InputSchema))
		})
	}
	if tc := req.ToolChoice; tc != (llm.ToolChoice{}) {
		b = param(b, paramToolChoice, func(b []byte) []byte {
			b = append(b, byte(tc.Type))
			if tc.Type == llm.ToolNamed {
				b = appendStr(b, tc.Name)
			}
			if tc.DisableParallelToolUse {
				return append(b, 1)
			}
			return append(b, 0)
		})
	}
	if req.UserID != "" {
		b = param(b, paramUserID, func(b []byte) []byte { return append(b, req.UserID...) })
	}
	if mode.Text {
		b = param(b, paramOutput, func(b []byte) []byte { return append(b, 1) })
	}
	return b
}

func appendBlock(b []byte, bl *llm.Block) []byte {
	switch bl.Type {
	case llm.BlockImage:
		b = append(b, blockImage)
		if bl.URL != "" {
			b = append(b, 1)
			return appendStr(b, bl.URL)
		}
		b = append(b, 0)
		b = appendStr(b, bl.MediaType)
		return appendStr(b, bl.Data)
	case llm.BlockToolUse:
		b = append(b, blockToolUse)
		b = appendStr(b, bl.ID)
		b = appendStr(b, bl.Name)
		in := bl.Input
		if len(bytes.TrimSpace(in)) == 0 {
			in = json.RawMessage("{}")
		}
		return appendStr(b, string(in))
	case llm.BlockToolResult:
		b = append(b, blockToolResult)
		b = appendStr(b, bl.ToolUseID)
		if bl.IsError {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		b = ebin.AppendUvarint(b, uint64(len(bl.Content)))
		for i := range bl.Content {
			b = appendBlock(b, &bl.Content[i])
		}
		return b
	}
	b = append(b, blockText)
	return appendStr(b, bl.Text)
}
