package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

// Extras are the request fields that only the OpenAI encoders need, not the canonical request.
type Extras struct {
	// IncludeUsage is stream_options.include_usage: send a final usage-only chunk.
	IncludeUsage bool
}

// chatRequest is the subset of the Chat Completions request layer0 understands. Fields with
// several JSON shapes are kept raw and decoded by hand so that errors name the field. Unknown
// fields (seed, logprobs, penalties, …) are accepted and ignored: the SDKs send
// new ones faster than any gateway learns them, and docs/engines.md lists what is not kept.
// The first one is named in llm.Request.Ignored (the pass-through path sends it, so the answer
// is not cached); the fields below that are read and dropped cannot change the answer.
type chatRequest struct {
	Model               *string          `json:"model"`
	Messages            []chatMessage    `json:"messages"`
	MaxTokens           *int             `json:"max_tokens"`
	MaxCompletionTokens *int             `json:"max_completion_tokens"`
	Temperature         *float64         `json:"temperature"`
	TopP                *float64         `json:"top_p"`
	TopK                *int             `json:"top_k"`
	N                   *int             `json:"n"`
	Stop                json.RawMessage  `json:"stop"`
	Stream              *bool            `json:"stream"`
	StreamOptions       *streamOptions   `json:"stream_options"`
	Tools               []chatTool       `json:"tools"`
	ToolChoice          json.RawMessage  `json:"tool_choice"`
	ParallelToolCalls   *bool            `json:"parallel_tool_calls"`
	User                *string          `json:"user"`
	Functions           json.RawMessage  `json:"functions"`
	FunctionCall        json.RawMessage  `json:"function_call"`
	Metadata            *json.RawMessage `json:"metadata"`
	ResponseFormat      json.RawMessage  `json:"response_format"`

	// Read and dropped: billing, storage and prompt-caching hints.
	Store            json.RawMessage `json:"store"`
	ServiceTier      json.RawMessage `json:"service_tier"`
	PromptCacheKey   json.RawMessage `json:"prompt_cache_key"`
	SafetyIdentifier json.RawMessage `json:"safety_identifier"`
}

type streamOptions struct {
	IncludeUsage *bool `json:"include_usage"`
}

type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []chatToolCall  `json:"tool_calls"`
	ToolCallID *string         `json:"tool_call_id"`
	// Refusal is an assistant turn's refusal text, which the SDKs send back as null or "": any
	// other value is content the canonical request does not carry (llm.Request.Ignored).
	Refusal json.RawMessage `json:"refusal"`
}

type chatToolCall struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatTool struct {
	Type     string `json:"type"`
	Function *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

type contentPart struct {
	Type     string  `json:"type"`
	Text     *string `json:"text"`
	Refusal  *string `json:"refusal"`
	ImageURL *struct {
		URL string `json:"url"`
	} `json:"image_url"`
}

// MaxStop is the most stop sequences a request may give, as the OpenAI API allows.
const MaxStop = 4

var jsonNull = []byte("null")

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || bytes.Equal(raw, jsonNull)
}

// DecodeRequest decodes a Chat Completions request body. Its errors are *apierr.Error (400)
// naming the offending field.
func DecodeRequest(body []byte) (*llm.Request, error) {
	r, _, err := DecodeRequestExtras(body)
	return r, err
}

// DecodeRequestExtras is DecodeRequest that also returns the OpenAI-only fields.
//
// The mapping: system and developer messages join llm.Request.System in order; user content is
// text and image parts (data URLs become base64 blocks, http(s) URLs stay URLs); assistant
// tool_calls become tool_use blocks whose input is the parsed arguments object; a run of tool
// messages becomes one user message of tool_result blocks, followed in the same message by the
// next user turn's content; empty text is dropped. n other than 1 is refused: layer0 generates
// one choice.
//
// The request then meets the rules every front shares (llm.Request.Validate): the decoder checks
// those an OpenAI client can break with the field named as OpenAI spells it, and Validate is the
// backstop. The differences are the OpenAI API's own: max_tokens is optional and temperature goes
// up to 2.
func DecodeRequestExtras(body []byte) (*llm.Request, Extras, error) {
	var x Extras
	if err := utf8Error(body); err != nil {
		return nil, x, err
	}
	var cr chatRequest
	ignored, err := decodeChat(body, &cr)
	if err != nil {
		return nil, x, jsonError(err)
	}
	// A field given twice is read last-wins here and first-wins by other parsers of the same
	// body (an engine reached by pass-through, a filter in front of it): refuse it, at any depth.
	if path, ok := duplicateKey(body, shapeRequest); ok {
		return nil, x, apierr.Invalid(path, "%s", dupMessage)
	}
	r := &llm.Request{Format: llm.FormatOpenAI, Ignored: ignored}
	if cr.Model == nil || *cr.Model == "" {
		return nil, x, apierr.Invalid("model", "required")
	}
	r.Model = *cr.Model
	if cr.N != nil && *cr.N != 1 {
		return nil, x, apierr.Invalid("n", "only n=1 is supported, got %d", *cr.N)
	}
	if !isNull(cr.Functions) || !isNull(cr.FunctionCall) {
		return nil, x, apierr.Invalid("functions", "the deprecated functions API is not supported; use tools")
	}
	switch {
	case cr.MaxCompletionTokens != nil:
		if err := tokenCount("max_completion_tokens", *cr.MaxCompletionTokens, 1); err != nil {
			return nil, x, err
		}
		r.MaxTokens = *cr.MaxCompletionTokens
	case cr.MaxTokens != nil:
		if err := tokenCount("max_tokens", *cr.MaxTokens, 1); err != nil {
			return nil, x, err
		}
		r.MaxTokens = *cr.MaxTokens
	}
	if err := sampling(cr.Temperature, cr.TopP); err != nil {
		return nil, x, err
	}
	r.Temperature, r.TopP = cr.Temperature, cr.TopP
	if k := cr.TopK; k != nil && *k != -1 { // vLLM spells "disabled" as -1
		if err := tokenCount("top_k", *k, 0); err != nil {
			return nil, x, err
		}
		r.TopK = k
	}
	if cr.Stream != nil {
		r.Stream = *cr.Stream
	}
	if r.Stream && cr.StreamOptions != nil && cr.StreamOptions.IncludeUsage != nil {
		x.IncludeUsage = *cr.StreamOptions.IncludeUsage
	}
	if cr.User != nil {
		r.UserID = *cr.User
	}
	if r.StopSequences, err = decodeStop(cr.Stop); err != nil {
		return nil, x, err
	}
	if err := decodeTools(r, cr.Tools); err != nil {
		return nil, x, err
	}
	if err := decodeToolChoice(r, cr.ToolChoice, cr.ParallelToolCalls); err != nil {
		return nil, x, err
	}
	if err := decodeResponseFormat(r, cr.ResponseFormat); err != nil {
		return nil, x, err
	}
	if err := decodeMessages(r, cr.Messages); err != nil {
		return nil, x, err
	}
	if err := checkToolPairs(cr.Messages); err != nil {
		return nil, x, err
	}
	for i := range cr.Messages {
		if rf := cr.Messages[i].Refusal; r.Ignored == "" && !isNull(rf) && string(rf) != `""` {
			r.Ignored = "refusal"
		}
	}
	if err := r.Validate(); err != nil {
		return nil, x, err
	}
	return r, x, nil
}

// unknownField starts encoding/json's error for a field a struct lacks.
const unknownField = `json: unknown field "`

// decodeChat decodes body into cr as json.Unmarshal does, and names the first field of body that
// cr has no place for ("" for none): a field layer0 does not carry. It sees the fields of the
// request, its messages, their tool calls and the tools; content parts are decoded apart, and
// leniently.
func decodeChat(body []byte, cr *chatRequest) (ignored string, err error) {
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	err = d.Decode(cr)
	if err == nil && len(bytes.TrimLeft(body[d.InputOffset():], " \t\r\n")) == 0 {
		return "", nil
	}
	if err != nil {
		if msg := err.Error(); strings.HasPrefix(msg, unknownField) {
			ignored, _, _ = strings.Cut(msg[len(unknownField):], `"`)
		}
	}
	// An unknown field, trailing data or another error: decoded again as json.Unmarshal does
	// (it reads past unknown fields and reports the error it would), rare enough to cost twice.
	*cr = chatRequest{}
	return ignored, json.Unmarshal(body, cr)
}

// responseFormatJSON is OpenAI's response_format.
type responseFormatJSON struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	} `json:"json_schema"`
}

// decodeResponseFormat reads response_format: {"type":"text"}, {"type":"json_object"} or
// {"type":"json_schema","json_schema":{"name":…,"schema":{…},"strict":…}}.
func decodeResponseFormat(r *llm.Request, raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var f responseFormatJSON
	if err := json.Unmarshal(raw, &f); err != nil {
		return apierr.Invalid("response_format", "must be an object with a type")
	}
	switch f.Type {
	case "text":
	case "json_object":
		r.ResponseFormat.Type = llm.ResponseJSONObject
	case "json_schema":
		js := f.JSONSchema
		if js == nil {
			return apierr.Invalid("response_format.json_schema", "required when type is json_schema")
		}
		if js.Name == "" {
			return apierr.Invalid("response_format.json_schema.name", "required")
		}
		if !isNull(js.Schema) && !jsonObjectRaw(js.Schema) {
			return apierr.Invalid("response_format.json_schema.schema", "must be a JSON object")
		}
		r.ResponseFormat = llm.ResponseFormat{Type: llm.ResponseJSONSchema, Name: js.Name, Strict: js.Strict != nil && *js.Strict}
		if !isNull(js.Schema) {
			r.ResponseFormat.Schema = js.Schema
		}
	case "":
		return apierr.Invalid("response_format.type", "required")
	default:
		return apierr.Invalid("response_format.type", "must be text, json_object or json_schema, got %q", f.Type)
	}
	return nil
}

// jsonObjectRaw reports whether raw (valid JSON) is an object.
func jsonObjectRaw(raw json.RawMessage) bool {
	t := bytes.TrimLeft(raw, " \t\r\n")
	return len(t) > 0 && t[0] == '{'
}

// tokenCount checks an integer parameter against [lo, llm.MaxMaxTokens].
func tokenCount(field string, v, lo int) error {
	switch {
	case v < lo:
		return apierr.Invalid(field, "must be at least %d, got %d", lo, v)
	case v > llm.MaxMaxTokens:
		return apierr.Invalid(field, "must be at most %d, got %d", llm.MaxMaxTokens, v)
	}
	return nil
}

// jsonError turns an encoding/json error into a 400 naming the field where it can.
func jsonError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			return apierr.Wrap(apierr.InvalidRequest, err, "request body must be a JSON object")
		}
		e := apierr.Invalid(field, "has the wrong type (%s)", te.Value)
		e.Cause = err
		return e
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return apierr.Wrap(apierr.InvalidRequest, err, "request body is not valid JSON (offset %d)", se.Offset)
	}
	return apierr.Wrap(apierr.InvalidRequest, err, "request body is not valid JSON")
}

func decodeStop(raw json.RawMessage) ([]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, apierr.Invalid("stop", "must be a string or a list of strings")
		}
		if s == "" {
			return nil, nil
		}
		return []string{s}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, apierr.Invalid("stop", "must be a string or a list of strings")
	}
	if len(list) > MaxStop {
		return nil, apierr.Invalid("stop", "at most %d stop sequences are allowed, got %d", MaxStop, len(list))
	}
	out := list[:0]
	for _, s := range list {
		if s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// sampling checks temperature (0 to llm.MaxTemperatureOpenAI) and top_p (0 to 1), each nil
// when not given.
func sampling(t, p *float64) error {
	if t != nil && !(*t >= 0 && *t <= llm.MaxTemperatureOpenAI) {
		return apierr.Invalid("temperature", "must be between 0 and %g, got %g", llm.MaxTemperatureOpenAI, *t)
	}
	if p != nil && !(*p >= 0 && *p <= 1) {
		return apierr.Invalid("top_p", "must be between 0 and 1, got %g", *p)
	}
	return nil
}

func decodeMessages(r *llm.Request, msgs []chatMessage) error {
	if len(msgs) == 0 {
		return apierr.Invalid("messages", "at least one message is required")
	}
	toolRun := false // the last canonical message holds tool results and may take more
	emptyAt := -1    // the index of an assistant message without content, allowed only last
	for i := range msgs {
		m := &msgs[i]
		p := fmt.Sprintf("messages[%d]", i)
		if emptyAt >= 0 && m.Role != "system" && m.Role != "developer" {
			return emptyContent(emptyAt)
		}
		switch m.Role {
		case "system", "developer":
			text, err := decodeText(p+".content", m.Content, true)
			if err != nil {
				return err
			}
			if text != "" {
				r.System = append(r.System, llm.Block{Type: llm.BlockText, Text: text})
			}
			continue
		case "user":
			blocks, err := decodeUserContent(p+".content", m.Content)
			if err != nil {
				return err
			}
			switch {
			case toolRun:
				last := &r.Messages[len(r.Messages)-1]
				last.Content = append(last.Content, blocks...)
			case len(blocks) == 0:
				return emptyContent(i)
			default:
				r.Messages = append(r.Messages, llm.Message{Role: llm.RoleUser, Content: blocks})
			}
			toolRun = false
		case "assistant":
			blocks, err := decodeAssistant(p, m)
			if err != nil {
				return err
			}
			if len(blocks) == 0 {
				emptyAt = i
			}
			r.Messages = append(r.Messages, llm.Message{Role: llm.RoleAssistant, Content: blocks})
			toolRun = false
		case "tool":
			if m.ToolCallID == nil || *m.ToolCallID == "" {
				return apierr.Invalid(p+".tool_call_id", "required for role tool")
			}
			text, err := decodeText(p+".content", m.Content, false)
			if err != nil {
				return err
			}
			b := llm.Block{Type: llm.BlockToolResult, ToolUseID: *m.ToolCallID}
			if text != "" {
				b.Content = []llm.Block{{Type: llm.BlockText, Text: text}}
			}
			if toolRun {
				last := &r.Messages[len(r.Messages)-1]
				last.Content = append(last.Content, b)
			} else {
				r.Messages = append(r.Messages, llm.Message{Role: llm.RoleUser, Content: []llm.Block{b}})
			}
			toolRun = true
		case "function":
			return apierr.Invalid(p+".role", "the deprecated function role is not supported; use tool")
		case "":
			return apierr.Invalid(p+".role", "required")
		default:
			return apierr.Invalid(p+".role", "must be system, developer, user, assistant or tool, got %q", m.Role)
		}
	}
	if len(r.Messages) == 0 {
		return apierr.Invalid("messages", "at least one user or assistant message is required")
	}
	return nil
}

func emptyContent(i int) error {
	return apierr.Invalid(fmt.Sprintf("messages[%d].content", i),
		"all messages must have non-empty content except for the optional final assistant message")
}

// decodeText decodes content that must be text: a string or an array of text parts, joined.
func decodeText(p string, raw json.RawMessage, allowNull bool) (string, error) {
	if isNull(raw) {
		if allowNull {
			return "", nil
		}
		return "", apierr.Invalid(p, "required")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", apierr.Invalid(p, "must be a string or an array of text parts")
		}
		return s, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", apierr.Invalid(p, "must be a string or an array of text parts")
	}
	var sb strings.Builder
	for j, part := range parts {
		if part.Type != "text" {
			return "", apierr.Invalid(fmt.Sprintf("%s[%d].type", p, j), "must be \"text\" here, got %q", part.Type)
		}
		if part.Text == nil {
			return "", apierr.Invalid(fmt.Sprintf("%s[%d].text", p, j), "required")
		}
		sb.WriteString(*part.Text)
	}
	return sb.String(), nil
}

func decodeUserContent(p string, raw json.RawMessage) ([]llm.Block, error) {
	if isNull(raw) {
		return nil, apierr.Invalid(p, "required")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, apierr.Invalid(p, "must be a string or an array of content parts")
		}
		if s == "" {
			return nil, nil
		}
		return []llm.Block{{Type: llm.BlockText, Text: s}}, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return nil, apierr.Invalid(p, "must be a string or an array of content parts")
	}
	if len(parts) == 0 {
		return nil, apierr.Invalid(p, "must not be empty")
	}
	blocks := make([]llm.Block, 0, len(parts))
	for j, part := range parts {
		pp := fmt.Sprintf("%s[%d]", p, j)
		switch part.Type {
		case "text":
			if part.Text == nil {
				return nil, apierr.Invalid(pp+".text", "required")
			}
			if *part.Text != "" {
				blocks = append(blocks, llm.Block{Type: llm.BlockText, Text: *part.Text})
			}
		case "image_url":
			if part.ImageURL == nil || part.ImageURL.URL == "" {
				return nil, apierr.Invalid(pp+".image_url.url", "required")
			}
			b, err := decodeImageURL(pp+".image_url.url", part.ImageURL.URL)
			if err != nil {
				return nil, err
			}
			blocks = append(blocks, b)
		case "":
			return nil, apierr.Invalid(pp+".type", "required")
		default:
			return nil, apierr.Invalid(pp+".type", "unsupported content part type %q (want text or image_url)", part.Type)
		}
	}
	return blocks, nil
}

// decodeImageURL accepts data:<media type>;base64,<data> and http(s) URLs.
func decodeImageURL(p, u string) (llm.Block, error) {
	if rest, ok := strings.CutPrefix(u, "data:"); ok {
		meta, data, ok := strings.Cut(rest, ",")
		mediaType, isBase64 := strings.CutSuffix(meta, ";base64")
		if !ok || !isBase64 || !strings.HasPrefix(mediaType, "image/") || data == "" {
			return llm.Block{}, apierr.Invalid(p, "a data URL must be data:image/<type>;base64,<data>")
		}
		return llm.Block{Type: llm.BlockImage, MediaType: mediaType, Data: data}, nil
	}
	if strings.HasPrefix(u, "https://") || strings.HasPrefix(u, "http://") {
		return llm.Block{Type: llm.BlockImage, URL: u}, nil
	}
	return llm.Block{}, apierr.Invalid(p, "must be an http(s) URL or a base64 data URL")
}

func decodeAssistant(p string, m *chatMessage) ([]llm.Block, error) {
	var blocks []llm.Block
	if !isNull(m.Content) {
		if m.Content[0] == '"' {
			var s string
			if err := json.Unmarshal(m.Content, &s); err != nil {
				return nil, apierr.Invalid(p+".content", "must be a string or an array of text parts")
			}
			if s != "" {
				blocks = append(blocks, llm.Block{Type: llm.BlockText, Text: s})
			}
		} else {
			var parts []contentPart
			if err := json.Unmarshal(m.Content, &parts); err != nil {
				return nil, apierr.Invalid(p+".content", "must be a string or an array of text parts")
			}
			for j, part := range parts {
				switch {
				case part.Type == "text" && part.Text != nil:
					if *part.Text != "" {
						blocks = append(blocks, llm.Block{Type: llm.BlockText, Text: *part.Text})
					}
				case part.Type == "refusal" && part.Refusal != nil:
					if *part.Refusal != "" {
						blocks = append(blocks, llm.Block{Type: llm.BlockText, Text: *part.Refusal})
					}
				default:
					return nil, apierr.Invalid(fmt.Sprintf("%s.content[%d]", p, j), "must be a text or refusal part")
				}
			}
		}
	}
	for j := range m.ToolCalls {
		tc := &m.ToolCalls[j]
		pp := fmt.Sprintf("%s.tool_calls[%d]", p, j)
		if tc.ID == "" {
			return nil, apierr.Invalid(pp+".id", "required")
		}
		if tc.Type != "" && tc.Type != "function" {
			return nil, apierr.Invalid(pp+".type", "must be \"function\", got %q", tc.Type)
		}
		if tc.Function.Name == "" {
			return nil, apierr.Invalid(pp+".function.name", "required")
		}
		input, err := toolInput(pp+".function.arguments", tc.Function.Arguments)
		if err != nil {
			return nil, err
		}
		blocks = append(blocks, llm.Block{Type: llm.BlockToolUse, ID: tc.ID, Name: tc.Function.Name, Input: input})
	}
	return blocks, nil
}
