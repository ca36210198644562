package bench

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/layer0ai/layer0/internal/llm"
)

// ParseFormat returns the client format named anthropic, openai or binary.
func ParseFormat(s string) (llm.Format, error) {
	switch strings.ToLower(s) {
	case "anthropic":
		return llm.FormatAnthropic, nil
	case "openai":
		return llm.FormatOpenAI, nil
	case "binary":
		return llm.FormatBinary, nil
	}
	return 0, fmt.Errorf("bench: unknown format %q (want anthropic, openai or binary)", s)
}

// binaryContentType is the content type of binary protocol requests and responses.
const binaryContentType = "application/x-anthropic-binary"

// pathFor is the request path of a format.
func pathFor(f llm.Format) string {
	if f == llm.FormatOpenAI {
		return "/v1/chat/completions"
	}
	return "/v1/messages"
}

// requestBody builds the one request body every request of a run sends, and its content type.
func requestBody(f llm.Format, model, prompt string, maxTokens int, stream bool) ([]byte, string, error) {
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	msgs := []message{{Role: "user", Content: prompt}}
	switch f {
	case llm.FormatAnthropic:
		b, err := json.Marshal(struct {
			Model     string    `json:"model"`
			MaxTokens int       `json:"max_tokens"`
			Stream    bool      `json:"stream,omitempty"`
			Messages  []message `json:"messages"`
		}{model, maxTokens, stream, msgs})
		return b, "application/json", err
	case llm.FormatOpenAI:
		type streamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		}
		var so *streamOptions
		if stream {
			so = &streamOptions{IncludeUsage: true}
		}
		b, err := json.Marshal(struct {
			Model         string         `json:"model"`
			MaxTokens     int            `json:"max_tokens"`
			Stream        bool           `json:"stream,omitempty"`
			StreamOptions *streamOptions `json:"stream_options,omitempty"`
			Messages      []message      `json:"messages"`
		}{model, maxTokens, stream, so, msgs})
		return b, "application/json", err
	case llm.FormatBinary:
		b, err := binaryRequest(model, prompt, maxTokens)
		return b, binaryContentType, err
	}
	return nil, "", fmt.Errorf("bench: unknown format %d", f)
}

// binaryRequest encodes a binary protocol v1 request: magic, model, one user message, max_tokens.
// Clients of the protocol strip dashes from model names; the server matches either spelling.
func binaryRequest(model, prompt string, maxTokens int) ([]byte, error) {
	switch {
	case len(model) > 255:
		return nil, fmt.Errorf("bench: binary v1: model name is %d bytes, at most 255", len(model))
	case len(prompt) > 65535:
		return nil, fmt.Errorf("bench: binary v1: prompt is %d bytes, at most 65535", len(prompt))
	case maxTokens < 0 || maxTokens > 65535:
		return nil, fmt.Errorf("bench: binary v1: max_tokens %d out of range 0..65535", maxTokens)
	}
	b := make([]byte, 0, 4+1+len(model)+1+3+len(prompt)+2)
	b = append(b, binaryMagic[:]...)
	b = append(b, byte(len(model)))
	b = append(b, model...)
	b = append(b, 1, 0) // one message, role user
	b = binary.BigEndian.AppendUint16(b, uint16(len(prompt)))
	b = append(b, prompt...)
	b = binary.BigEndian.AppendUint16(b, uint16(maxTokens))
	return b, nil
}

// requestHeader is the header every request of a run sends (besides Host and Content-Length).
func requestHeader(f llm.Format, contentType, apiKey string, extra http.Header) http.Header {
	h := http.Header{}
	h.Set("Content-Type", contentType)
	if f == llm.FormatBinary {
		h.Set("Accept", binaryContentType)
	}
	if f != llm.FormatOpenAI {
		h.Set("Anthropic-Version", "2023-06-01")
	}
	if apiKey != "" {
		if f == llm.FormatOpenAI {
			h.Set("Authorization", "Bearer "+apiKey)
		} else {
			h.Set("X-Api-Key", apiKey)
		}
	}
	for k, vs := range extra {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	return h
}
