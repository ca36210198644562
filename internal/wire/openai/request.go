package openai

import (
	"encoding/json"
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

// MaxStop is the most stop sequences a request may give, as the OpenAI API allows.
const MaxStop = 4

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
//
// The body is read once (Decoder). Strings in the returned request share one copy of body, which
// is not retained: the caller may reuse its buffer, as the server does with its pooled body
// buffers. Model and UserID are copies of their own, since they outlive the request as metric
// labels and limiter keys.
func DecodeRequestExtras(body []byte) (*llm.Request, Extras, error) {
	return DecodeRequestText(string(body))
}

// DecodeRequestText is DecodeRequestExtras of a body given as text: the strings of the returned
// request are substrings of text (Model, UserID and Ignored are still copies of their own). A
// caller that makes text from a buffer it reuses (unsafe.String, to skip the copy of the body)
// must not change the buffer while the request or any string of it is in use, and must see that
// whatever keeps a string of the request past its end copies it.
func DecodeRequestText(text string) (*llm.Request, Extras, error) {
	var x Extras
	d := NewDecoderText(text)
	var cr chatRequest
	// A field given twice would be read last-wins here and first-wins by other parsers of the
	// same body (an engine reached by pass-through, a filter in front of it): Finish refuses it,
	// at any depth.
	if err := d.Finish(d.request(&cr)); err != nil {
		return nil, x, err
	}
	ignored := d.Ignored()
	r := &llm.Request{Format: llm.FormatOpenAI, Ignored: ignored}
	if !cr.Model.OK || cr.Model.V == "" {
		return nil, x, apierr.Invalid("model", "required")
	}
	// The model and the user outlive the request (metric labels, limiter keys): their own copies.
	r.Model = strings.Clone(cr.Model.V)
	if cr.N.OK && cr.N.V != 1 {
		return nil, x, apierr.Invalid("n", "only n=1 is supported, got %d", cr.N.V)
	}
	if cr.Functions {
		return nil, x, apierr.Invalid("functions", "the deprecated functions API is not supported; use tools")
	}
	if err := CheckMetadata(cr.Metadata); err != nil {
		return nil, x, err
	}
	switch {
	case cr.MaxCompletionTokens.OK:
		if err := tokenCount("max_completion_tokens", cr.MaxCompletionTokens.V, 1); err != nil {
			return nil, x, err
		}
		r.MaxTokens = cr.MaxCompletionTokens.V
	case cr.MaxTokens.OK:
		if err := tokenCount("max_tokens", cr.MaxTokens.V, 1); err != nil {
			return nil, x, err
		}
		r.MaxTokens = cr.MaxTokens.V
	}
	if err := sampling(cr.Temperature, cr.TopP); err != nil {
		return nil, x, err
	}
	r.Temperature, r.TopP = cr.Temperature, cr.TopP
	if k := cr.TopK; k.OK && k.V != -1 { // vLLM spells "disabled" as -1
		if err := tokenCount("top_k", k.V, 0); err != nil {
			return nil, x, err
		}
		r.TopK = &k.V
	}
	r.Stream = cr.Stream.V
	if r.Stream && cr.IncludeUsage.OK {
		x.IncludeUsage = cr.IncludeUsage.V
	}
	if cr.User.OK {
		r.UserID = strings.Clone(cr.User.V)
	}
	var err error
	if r.StopSequences, err = decodeStop(&cr.Stop); err != nil {
		return nil, x, err
	}
	if err := decodeTools(r, cr.Tools); err != nil {
		return nil, x, err
	}
	if err := decodeToolChoice(r, &cr.ToolChoice, cr.ParallelToolCalls); err != nil {
		return nil, x, err
	}
	if err := decodeResponseFormat(r, &cr.ResponseFormat); err != nil {
		return nil, x, err
	}
	if err := decodeMessages(r, cr.Messages); err != nil {
		return nil, x, err
	}
	if err := checkToolPairs(cr.Messages); err != nil {
		return nil, x, err
	}
	for i := range cr.Messages {
		if rf := cr.Messages[i].Refusal; r.Ignored == "" && rf != "" && rf != "null" && rf != `""` {
			r.Ignored = "refusal"
		}
	}
	if err := llm.ValidateDecoded(r, true); err != nil { // its strings were checked as UTF-8 as they were read
		return nil, x, err
	}
	return r, x, nil
}

// decodeResponseFormat reads response_format: {"type":"text"}, {"type":"json_object"} or
// {"type":"json_schema","json_schema":{"name":…,"schema":{…},"strict":…}}.
func decodeResponseFormat(r *llm.Request, l *Lenient[responseFormatJSON]) error {
	if !l.Given {
		return nil
	}
	if l.Bad {
		return apierr.Invalid("response_format", "must be an object with a type")
	}
	f := &l.V
	typ, err := FormatType("response_format.type", f.Type)
	if err != nil || typ != llm.ResponseJSONSchema {
		r.ResponseFormat.Type = typ
		return err
	}
	if !f.HasSchema {
		return apierr.Invalid("response_format.json_schema", "required when type is json_schema")
	}
	js := &f.Schema
	if js.Name == "" {
		return apierr.Invalid("response_format.json_schema.name", "required")
	}
	if js.Schema != "" && js.Schema[0] != '{' {
		return apierr.Invalid("response_format.json_schema.schema", "must be a JSON object")
	}
	r.ResponseFormat = js.Format()
	return nil
}

// FormatType returns the response format a format's type names (text, json_object or
// json_schema); p names the type's field in the error.
func FormatType(p, typ string) (llm.ResponseFormatType, error) {
	switch typ {
	case "text":
		return llm.ResponseText, nil
	case "json_object":
		return llm.ResponseJSONObject, nil
	case "json_schema":
		return llm.ResponseJSONSchema, nil
	case "":
		return 0, apierr.Invalid(p, "required")
	}
	return 0, apierr.Invalid(p, "must be text, json_object or json_schema, got %q", typ)
}

// Format returns the json_schema response format s declares (its schema, when given, checked
// already to be an object).
func (s *SchemaDecl) Format() llm.ResponseFormat {
	f := llm.ResponseFormat{Type: llm.ResponseJSONSchema, Name: s.Name, Strict: s.Strict.OK && s.Strict.V}
	if s.Schema != "" {
		f.Schema = json.RawMessage(s.Schema)
	}
	return f
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

func decodeStop(l *Lenient[[]string]) ([]string, error) {
	switch {
	case !l.Given:
		return nil, nil
	case l.IsStr:
		if l.Str == "" {
			return nil, nil
		}
		return []string{l.Str}, nil
	case l.Bad:
		return nil, apierr.Invalid("stop", "must be a string or a list of strings")
	}
	list := l.V
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
			text, err := decodeText(p+".content", &m.Content, true)
			if err != nil {
				return err
			}
			if text != "" {
				r.System = append(r.System, llm.Block{Type: llm.BlockText, Text: text})
			}
			continue
		case "user":
			blocks, err := decodeUserContent(p+".content", &m.Content)
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
			if !m.ToolCallID.OK || m.ToolCallID.V == "" {
				return apierr.Invalid(p+".tool_call_id", "required for role tool")
			}
			text, err := decodeText(p+".content", &m.Content, false)
			if err != nil {
				return err
			}
			b := llm.Block{Type: llm.BlockToolResult, ToolUseID: m.ToolCallID.V}
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
func decodeText(p string, c *Content, allowNull bool) (string, error) {
	switch {
	case !c.Given:
		if allowNull {
			return "", nil
		}
		return "", apierr.Invalid(p, "required")
	case c.IsStr:
		return c.Str, nil
	case c.Bad:
		return "", apierr.Invalid(p, "must be a string or an array of text parts")
	}
	if len(c.Parts) == 1 && c.Parts[0].Type == "text" && c.Parts[0].Text.OK {
		return c.Parts[0].Text.V, nil // one part: its text as it is, no copy
	}
	var sb strings.Builder
	for j, part := range c.Parts {
		if part.Type != "text" {
			return "", apierr.Invalid(fmt.Sprintf("%s[%d].type", p, j), "must be \"text\" here, got %q", part.Type)
		}
		if !part.Text.OK {
			return "", apierr.Invalid(fmt.Sprintf("%s[%d].text", p, j), "required")
		}
		sb.WriteString(part.Text.V)
	}
	return sb.String(), nil
}

func decodeUserContent(p string, c *Content) ([]llm.Block, error) {
	switch {
	case !c.Given:
		return nil, apierr.Invalid(p, "required")
	case c.IsStr:
		if c.Str == "" {
			return nil, nil
		}
		return []llm.Block{{Type: llm.BlockText, Text: c.Str}}, nil
	case c.Bad:
		return nil, apierr.Invalid(p, "must be a string or an array of content parts")
	}
	parts := c.Parts
	if len(parts) == 0 {
		return nil, apierr.Invalid(p, "must not be empty")
	}
	blocks := make([]llm.Block, 0, len(parts))
	for j, part := range parts {
		pp := fmt.Sprintf("%s[%d]", p, j)
		switch part.Type {
		case "text":
			if !part.Text.OK {
				return nil, apierr.Invalid(pp+".text", "required")
			}
			if part.Text.V != "" {
				blocks = append(blocks, llm.Block{Type: llm.BlockText, Text: part.Text.V})
			}
		case "image_url":
			if !part.ImageURL.OK || part.ImageURL.V == "" {
				return nil, apierr.Invalid(pp+".image_url.url", "required")
			}
			b, err := decodeImageURL(pp+".image_url.url", part.ImageURL.V)
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

// decodeImageURL accepts data:<media type>;base64,<data> and http(s) URLs, as the image rules
// every front applies (llm's image.go) allow them: the media type one of llm.ImageMediaTypes,
// the data padded standard base64. ValidateDecoded trusts this for them.
func decodeImageURL(p, u string) (llm.Block, error) {
	if rest, ok := strings.CutPrefix(u, "data:"); ok {
		meta, data, ok := strings.Cut(rest, ",")
		mediaType, isBase64 := strings.CutSuffix(meta, ";base64")
		switch {
		case !ok || !isBase64 || !strings.HasPrefix(mediaType, "image/") || data == "":
			return llm.Block{}, apierr.Invalid(p, "a data URL must be data:image/<type>;base64,<data>")
		case !llm.ImageMediaType(mediaType):
			return llm.Block{}, apierr.Invalid(p, "a data URL's media type must be one of %s, got %q", llm.ImageMediaTypes, llm.Clip(mediaType))
		case !llm.ImageBase64(data):
			return llm.Block{}, apierr.Invalid(p, "a data URL's data must be base64 (standard alphabet, padded)")
		}
		return llm.Block{Type: llm.BlockImage, MediaType: mediaType, Data: data}, nil
	}
	if llm.ImageURL(u) {
		return llm.Block{Type: llm.BlockImage, URL: u}, nil
	}
	return llm.Block{}, apierr.Invalid(p, "must be an http(s) URL or a base64 data URL")
}

func decodeAssistant(p string, m *chatMessage) ([]llm.Block, error) {
	var blocks []llm.Block
	switch c := &m.Content; {
	case !c.Given:
	case c.IsStr:
		if c.Str != "" {
			blocks = append(blocks, llm.Block{Type: llm.BlockText, Text: c.Str})
		}
	case c.Bad:
		return nil, apierr.Invalid(p+".content", "must be a string or an array of text parts")
	default:
		for j, part := range c.Parts {
			switch {
			case part.Type == "text" && part.Text.OK:
				if part.Text.V != "" {
					blocks = append(blocks, llm.Block{Type: llm.BlockText, Text: part.Text.V})
				}
			case part.Type == "refusal" && part.Refusal.OK:
				if part.Refusal.V != "" {
					blocks = append(blocks, llm.Block{Type: llm.BlockText, Text: part.Refusal.V})
				}
			default:
				return nil, apierr.Invalid(fmt.Sprintf("%s.content[%d]", p, j), "must be a text or refusal part")
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
		if tc.Name == "" {
			return nil, apierr.Invalid(pp+".function.name", "required")
		}
		input, err := toolInput(pp+".function.arguments", tc.Args)
		if err != nil {
			return nil, err
		}
		blocks = append(blocks, llm.Block{Type: llm.BlockToolUse, ID: tc.ID, Name: tc.Name, Input: input})
	}
	return blocks, nil
}
