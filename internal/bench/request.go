package bench

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/binary"
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
const binaryContentType = binary.MediaType

// pathFor is the request path of a format.
func pathFor(f llm.Format) string {
	if f == llm.FormatOpenAI {
		return "/v1/chat/completions"
	}
	return "/v1/messages"
}

// requestBody builds the one request body every request of a run sends, and its content type.
// mode is the binary protocol's version and output (binary format only).
func requestBody(f llm.Format, model, prompt string, maxTokens int, stream bool, mode binary.Mode) ([]byte, string, error) {
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
		// Clients of version 1 strip dashes from model names; the server matches
		// either spelling.
		b, err := binary.AppendRequest(nil, &llm.Request{
			Model: model, MaxTokens: maxTokens,
			Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: prompt}}}},
		}, mode)
		if err != nil {
			return nil, "", fmt.Errorf("bench: %w", err)
		}
		return b, mode.ContentType(), nil
	}
	return nil, "", fmt.Errorf("bench: unknown format %d", f)
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
