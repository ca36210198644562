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
func DecodeRequestExtras(body []byte) (*llm.Request, Extras, error) {
	var x Extras
	d := NewDecoder(body)
	var cr chatRequest
	// A field given twice would be read last-wins here and first-wins by other parsers of the
	// same body (an engine reached by pass-through, a filter in front of it): Finish refuses it,
	// at any depth.
	if err := d.Finish(d.request(&cr)); err != nil {
		return nil, x, err
	}
	ignored := d.Ignored()
	r := &llm.Request{Format: llm.FormatOpenAI, Ignored: ignored}
	if !cr.Model.ok || cr.Model.v == "" {
		return nil, x, apierr.Invalid("model", "required")
	}
	// The model and the user outlive the request (metric labels, limiter keys): their own copies.
	r.Model = strings.Clone(cr.Model.v)
	if cr.N.ok && cr.N.v != 1 {
		return nil, x, apierr.Invalid("n", "only n=1 is supported, got %d", cr.N.v)
	}
	if cr.Functions {
		return nil, x, apierr.Invalid("functions", "the deprecated functions API is not supported; use tools")
	}
	switch {
	case cr.MaxCompletionTokens.ok:
		if err := tokenCount("max_completion_tokens", cr.MaxCompletionTokens.v, 1); err != nil {
			return nil, x, err
		}
		r.MaxTokens = cr.MaxCompletionTokens.v
	case cr.MaxTokens.ok:
		if err := tokenCount("max_tokens", cr.MaxTokens.v, 1); err != nil {
			return nil, x, err
		}
		r.MaxTokens = cr.MaxTokens.v
	}
	if err := sampling(cr.Temperature, cr.TopP); err != nil {
		return nil, x, err
	}
	r.Temperature, r.TopP = cr.Temperature, cr.TopP
	if k := cr.TopK; k.ok && k.v != -1 { // vLLM spells "disabled" as -1
		if err := tokenCount("top_k", k.v, 0); err != nil {
			return nil, x, err
		}
		r.TopK = &k.v
	}
	r.Stream = cr.Stream.v
	if r.Stream && cr.IncludeUsage.ok {
		x.IncludeUsage = cr.IncludeUsage.v
	}
	if cr.User.ok {
		r.UserID = strings.Clone(cr.User.v)
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
	if err := r.Validate(); err != nil {
		return nil, x, err
	}
	return r, x, nil
}

// decodeResponseFormat reads response_format: {"type":"text"}, {"type":"json_object"} or
// {"type":"json_schema","json_schema":{"name":…,"schema":{…},"strict":…}}.
func decodeResponseFormat(r *llm.Request, l *lenient[responseFormatJSON]) error {
	if !l.given {
		return nil
	}
	if l.bad {
		return apierr.Invalid("response_format", "must be an object with a type")
	}
	f := &l.v
	switch f.Type {
	case "text":
	case "json_object":
		r.ResponseFormat.Type = llm.ResponseJSONObject
	case "json_schema":
		if !f.HasSchema {
			return apierr.Invalid("response_format.json_schema", "required when type is json_schema")
		}
		if f.Name == "" {
			return apierr.Invalid("response_format.json_schema.name", "required")
		}
		if f.Schema != "" && f.Schema[0] != '{' {
			return apierr.Invalid("response_format.json_schema.schema", "must be a JSON object")
		}
		r.ResponseFormat = llm.ResponseFormat{Type: llm.ResponseJSONSchema, Name: f.Name, Strict: f.Strict.ok && f.Strict.v}
		if f.Schema != "" {
			r.ResponseFormat.Schema = json.RawMessage(f.Schema)
		}
	case "":
		return apierr.Invalid("response_format.type", "required")
	default:
		return apierr.Invalid("response_format.type", "must be text, json_object or json_schema, got %q", f.Type)
	}
	return nil
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

func decodeStop(l *lenient[[]string]) ([]string, error) {
	switch {
	case !l.given:
		return nil, nil
	case l.isStr:
		if l.str == "" {
			return nil, nil
		}
		return []string{l.str}, nil
	case l.bad:
		return nil, apierr.Invalid("stop", "must be a string or a list of strings")
	}
	list := l.v
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
			if !m.ToolCallID.ok || m.ToolCallID.v == "" {
				return apierr.Invalid(p+".tool_call_id", "required for role tool")
			}
			text, err := decodeText(p+".content", &m.Content, false)
			if err != nil {
				return err
			}
			b := llm.Block{Type: llm.BlockToolResult, ToolUseID: m.ToolCallID.v}
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
func decodeText(p string, c *content, allowNull bool) (string, error) {
	switch {
	case !c.given:
		if allowNull {
			return "", nil
		}
		return "", apierr.Invalid(p, "required")
	case c.isStr:
		return c.str, nil
	case c.bad:
		return "", apierr.Invalid(p, "must be a string or an array of text parts")
	}
	if len(c.parts) == 1 && c.parts[0].Type == "text" && c.parts[0].Text.ok {
		return c.parts[0].Text.v, nil // one part: its text as it is, no copy
	}
	var sb strings.Builder
	for j, part := range c.parts {
		if part.Type != "text" {
			return "", apierr.Invalid(fmt.Sprintf("%s[%d].type", p, j), "must be \"text\" here, got %q", part.Type)
		}
		if !part.Text.ok {
			return "", apierr.Invalid(fmt.Sprintf("%s[%d].text", p, j), "required")
		}
		sb.WriteString(part.Text.v)
	}
	return sb.String(), nil
}

func decodeUserContent(p string, c *content) ([]llm.Block, error) {
	switch {
	case !c.given:
		return nil, apierr.Invalid(p, "required")
	case c.isStr:
		if c.str == "" {
			return nil, nil
		}
		return []llm.Block{{Type: llm.BlockText, Text: c.str}}, nil
	case c.bad:
		return nil, apierr.Invalid(p, "must be a string or an array of content parts")
	}
	parts := c.parts
	if len(parts) == 0 {
		return nil, apierr.Invalid(p, "must not be empty")
	}
	blocks := make([]llm.Block, 0, len(parts))
	for j, part := range parts {
		pp := fmt.Sprintf("%s[%d]", p, j)
		switch part.Type {
		case "text":
			if !part.Text.ok {
				return nil, apierr.Invalid(pp+".text", "required")
			}
			if part.Text.v != "" {
				blocks = append(blocks, llm.Block{Type: llm.BlockText, Text: part.Text.v})
			}
		case "image_url":
			if !part.ImageURL.ok || part.ImageURL.v == "" {
				return nil, apierr.Invalid(pp+".image_url.url", "required")
			}
			b, err := decodeImageURL(pp+".image_url.url", part.ImageURL.v)
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
	switch c := &m.Content; {
	case !c.given:
	case c.isStr:
		if c.str != "" {
			blocks = append(blocks, llm.Block{Type: llm.BlockText, Text: c.str})
		}
	case c.bad:
		return nil, apierr.Invalid(p+".content", "must be a string or an array of text parts")
	default:
		for j, part := range c.parts {
			switch {
			case part.Type == "text" && part.Text.ok:
				if part.Text.v != "" {
					blocks = append(blocks, llm.Block{Type: llm.BlockText, Text: part.Text.v})
				}
			case part.Type == "refusal" && part.Refusal.ok:
				if part.Refusal.v != "" {
					blocks = append(blocks, llm.Block{Type: llm.BlockText, Text: part.Refusal.v})
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
