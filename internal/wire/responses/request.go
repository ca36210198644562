package responses

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/openai"
)

// Extras are the request fields a Responses answer echoes or the server acts on, beyond the
// canonical request.
type Extras struct {
	// Store keeps the response for GET and previous_response_id (the API's default, true).
	Store bool
	// PreviousResponseID is the response this one continues; "" for none.
	PreviousResponseID string
	// Instructions is the instructions string as given (raw JSON), for the echo; nil for null.
	Instructions json.RawMessage
	// MaxOutputTokens is max_output_tokens; 0 when not given.
	MaxOutputTokens int
	// Temperature and TopP as given; nil when not given.
	Temperature, TopP *float64
	// ParallelToolCalls is parallel_tool_calls (default true).
	ParallelToolCalls bool
	// ToolChoice, Tools, Text and Metadata are the request's raw JSON for the echo; nil when not
	// given.
	ToolChoice, Tools, Text, Metadata json.RawMessage
	// User is the user field.
	User string
	// Namespaces maps the name of a function declared inside a namespace tool to its namespace,
	// which a call of it names.
	Namespaces map[string]string
	// System is the system prompt the input's system and developer messages gave (not the
	// instructions): a stored response keeps it, for a response that continues it.
	System []llm.Block
}

// History is a stored conversation a request continues with previous_response_id: its system
// blocks (from input messages, not instructions) and its turns, the stored response's output
// last.
type History struct {
	System   []llm.Block
	Messages []llm.Message
}

// Lookup returns the conversation a previous_response_id names, or an error (a 404 for an id
// unknown to the caller).
type Lookup func(id string) (*History, error)

// DecodeRequest decodes a POST /v1/responses body into the canonical request. lookup resolves
// previous_response_id; nil refuses it. Errors are *apierr.Error naming the field.
//
// The mapping: instructions, then the system and developer messages of the input, make
// llm.Request.System; user and assistant messages become turns (consecutive items of one role
// join one turn); function_call items become tool_use blocks of the assistant turn, and
// function_call_output items tool_result blocks of the next user turn; reasoning items and the
// calls of hosted tools are dropped. A previous response's conversation goes before the input.
//
// The body is read once (openai.Decoder); strings in the result share one copy of body, which is
// not retained, and the model, user and previous_response_id are copies of their own.
func DecodeRequest(body []byte, lookup Lookup) (*llm.Request, *Extras, error) {
	return DecodeRequestText(string(body), lookup)
}

// DecodeRequestText is DecodeRequest of a body given as text: the strings of the request and of
// its Extras are substrings of text (the model, the user and previous_response_id are still
// copies of their own), but for a previous response's conversation, which is lookup's. A caller
// that makes text from a buffer it reuses (unsafe.String, to skip the copy of the body) must not
// change the buffer while the request or any string of it is in use, and must see that whatever
// keeps a string of the request past its end copies it: a stored response above all.
func DecodeRequestText(text string, lookup Lookup) (*llm.Request, *Extras, error) {
	d := openai.NewDecoderText(text)
	d.Fold = false
	var rr request
	if err := d.Finish(readRequest(d, &rr)); err != nil {
		return nil, nil, err
	}
	r := &llm.Request{Format: llm.FormatResponses}
	x := &Extras{Store: true, ParallelToolCalls: true}
	if !rr.Model.OK || rr.Model.V == "" {
		return nil, nil, apierr.Invalid("model", "required")
	}
	// The model and the user outlive the request (metric labels, limiter keys, a stored
	// response): their own copies.
	r.Model = strings.Clone(rr.Model.V)
	if rr.Background.OK && rr.Background.V {
		return nil, nil, apierr.Invalid("background", "background responses are not supported")
	}
	if rr.Conversation != "" {
		return nil, nil, apierr.Invalid("conversation", "conversations are not supported; use previous_response_id")
	}
	if rr.Prompt != "" {
		return nil, nil, apierr.Invalid("prompt", "prompt templates are not supported; send instructions and input")
	}
	if err := decodeScalars(r, x, &rr); err != nil {
		return nil, nil, err
	}
	if err := decodeInstructions(r, x, &rr); err != nil {
		return nil, nil, err
	}
	if err := decodeTools(r, x, &rr); err != nil {
		return nil, nil, err
	}
	if err := decodeToolChoice(r, x, &rr); err != nil {
		return nil, nil, err
	}
	if tc := &rr.Text; tc.Given {
		if tc.Bad {
			return nil, nil, apierr.Invalid("text", "must be an object")
		}
		x.Text = json.RawMessage(rr.TextRaw)
		if err := decodeFormat(r, &tc.V.Format); err != nil {
			return nil, nil, err
		}
		if tc.V.Verbosity != "" && r.Ignored == "" {
			r.Ignored = "text.verbosity"
		}
	}
	switch {
	case r.Ignored != "":
	case rr.Reasoning != "":
		r.Ignored = "reasoning"
	case rr.TopLogprobs != "":
		r.Ignored = "top_logprobs"
	}
	if rr.PreviousResponseID.OK && rr.PreviousResponseID.V != "" {
		x.PreviousResponseID = strings.Clone(rr.PreviousResponseID.V)
		if lookup == nil {
			return nil, nil, apierr.Invalid("previous_response_id", "stored responses are not available here")
		}
		h, err := lookup(x.PreviousResponseID)
		if err != nil {
			return nil, nil, err
		}
		r.System = append(r.System, h.System...)
		x.System = append(x.System, h.System...)
		r.Messages = append(r.Messages, h.Messages...)
	}
	if err := decodeInput(r, x, &rr.Input); err != nil {
		return nil, nil, err
	}
	if err := r.Validate(); err != nil {
		// The shared rules name canonical turns (messages.2.content.0), which are not the
		// client's items: the error names the input.
		var e *apierr.Error
		if errors.As(err, &e) {
			e.Param = ClientParam(e.Param)
		}
		return nil, nil, err
	}
	return r, x, nil
}

func decodeScalars(r *llm.Request, x *Extras, rr *request) error {
	if rr.MaxOutputTokens.OK {
		if err := openai.TokenCount("max_output_tokens", rr.MaxOutputTokens.V, 1); err != nil {
			return err
		}
		r.MaxTokens, x.MaxOutputTokens = rr.MaxOutputTokens.V, rr.MaxOutputTokens.V
	}
	if err := openai.Sampling(rr.Temperature, rr.TopP); err != nil {
		return err
	}
	r.Temperature, x.Temperature = rr.Temperature, rr.Temperature
	r.TopP, x.TopP = rr.TopP, rr.TopP
	r.Stream = rr.Stream.V
	if rr.Store.OK {
		x.Store = rr.Store.V
	}
	if rr.User.OK {
		r.UserID = strings.Clone(rr.User.V)
		x.User = r.UserID
	}
	if rr.ParallelToolCalls.OK {
		x.ParallelToolCalls = rr.ParallelToolCalls.V
		r.ToolChoice.DisableParallelToolUse = !rr.ParallelToolCalls.V
	}
	if err := openai.CheckMetadata(rr.Metadata); err != nil {
		return err
	}
	if rr.Metadata != "" {
		x.Metadata = json.RawMessage(rr.Metadata)
	}
	return nil
}

func decodeInstructions(r *llm.Request, x *Extras, rr *request) error {
	l := &rr.Instructions
	if !l.Given {
		return nil
	}
	if l.Bad {
		return apierr.Invalid("instructions", "must be a string")
	}
	x.Instructions = json.RawMessage(rr.InstructionsRaw)
	if s := l.Str; s != "" {
		r.System = append(r.System, llm.Block{Type: llm.BlockText, Text: s})
	}
	return nil
}

// decodeTools reads function tools and the functions of namespace tools; hosted tools
// (web_search, file_search, …) are dropped: no engine behind layer0 runs them.
func decodeTools(r *llm.Request, x *Extras, rr *request) error {
	if !rr.Tools.Given {
		return nil
	}
	if rr.Tools.Bad {
		return apierr.Invalid("tools", "must be a list of tools")
	}
	x.Tools = json.RawMessage(rr.ToolsRaw)
	tools := rr.Tools.V
	for i := range tools {
		t := &tools[i]
		p := fmt.Sprintf("tools[%d]", i)
		switch t.Type {
		case "function":
			if err := addFunction(r, p, t); err != nil {
				return err
			}
		case "namespace":
			for j := range t.Tools {
				f := &t.Tools[j]
				pp := fmt.Sprintf("%s.tools[%d]", p, j)
				if f.Type != "function" {
					if r.Ignored == "" {
						r.Ignored = fmt.Sprintf("%s.tools[%d]", p, j)
					}
					continue // a hosted tool inside a namespace: dropped as at the top level
				}
				if err := addFunction(r, pp, f); err != nil {
					return err
				}
				if x.Namespaces == nil {
					x.Namespaces = map[string]string{}
				}
				x.Namespaces[f.Function.Name] = t.Function.Name
			}
		case "":
			return apierr.Invalid(p+".type", "required")
		default:
			// A hosted tool, dropped: the answer could differ where it ran.
			if r.Ignored == "" {
				r.Ignored = p
			}
		}
	}
	return nil
}

func addFunction(r *llm.Request, p string, t *tool) error {
	tl, err := t.Function.Tool(p)
	if err != nil {
		return err
	}
	for j := range r.Tools {
		if r.Tools[j].Name == tl.Name {
			return apierr.Invalid(p+".name", "tool names must be unique; %q is given twice", tl.Name)
		}
	}
	r.Tools = append(r.Tools, tl)
	return nil
}

// decodeToolChoice reads "none", "auto", "required" or {"type":"function","name":…}; a choice
// of a hosted tool or of allowed_tools is read as auto.
func decodeToolChoice(r *llm.Request, x *Extras, rr *request) error {
	l := &rr.ToolChoice
	if !l.Given {
		return nil
	}
	x.ToolChoice = json.RawMessage(rr.ToolChoiceRaw)
	if l.IsStr {
		return openai.ToolChoiceMode(r, l.Str, "an object")
	}
	if l.Bad {
		return apierr.Invalid("tool_choice", "must be a string or an object with a type")
	}
	obj := &l.V
	if obj.Type != "function" {
		return nil
	}
	return openai.NamedToolChoice(r, "tool_choice.name", obj.Name, "function")
}

// decodeFormat reads text.format: {"type":"text"}, {"type":"json_object"} or
// {"type":"json_schema","name":…,"schema":{…},"strict":…} (flat, unlike Chat Completions).
func decodeFormat(r *llm.Request, l *openai.Lenient[format]) error {
	if !l.Given {
		return nil
	}
	if l.Bad {
		return apierr.Invalid("text.format", "must be an object with a type")
	}
	f := &l.V
	typ, err := openai.FormatType("text.format.type", f.Type)
	if err != nil || typ != llm.ResponseJSONSchema {
		r.ResponseFormat.Type = typ
		return err
	}
	if f.Schema.Name == "" {
		return apierr.Invalid("text.format.name", "required")
	}
	if f.Schema.Schema == "" || f.Schema.Schema[0] != '{' {
		return apierr.Invalid("text.format.schema", "must be a JSON Schema object")
	}
	r.ResponseFormat = f.Schema.Format()
	return nil
}

// decodeInput reads input: a string (one user message) or a list of items.
func decodeInput(r *llm.Request, x *Extras, l *openai.Lenient[[]item]) error {
	if !l.Given {
		if len(r.Messages) == 0 {
			return apierr.Invalid("input", "required")
		}
		return nil
	}
	if l.IsStr {
		s := l.Str
		if s == "" {
			return apierr.Invalid("input", "must not be empty")
		}
		addBlocks(r, llm.RoleUser, llm.Block{Type: llm.BlockText, Text: s})
		return nil
	}
	if l.Bad {
		return apierr.Invalid("input", "must be a string or a list of items")
	}
	items := l.V
	for i := range items {
		if err := decodeItem(r, x, fmt.Sprintf("input[%d]", i), &items[i]); err != nil {
			return err
		}
	}
	if len(r.Messages) == 0 {
		return apierr.Invalid("input", "at least one user or assistant message is required")
	}
	return nil
}

// droppedItems are input item types layer0 accepts and does not send to engines: reasoning
// (engines keep their own), and the calls of hosted tools no engine behind layer0 runs.
var droppedItems = map[string]bool{
	"reasoning": true, "web_search_call": true, "file_search_call": true, "image_generation_call": true,
	"code_interpreter_call": true, "computer_call": true, "computer_call_output": true,
}

func decodeItem(r *llm.Request, x *Extras, p string, it *item) error {
	typ := it.Type
	if typ == "" && it.Role != "" {
		typ = "message"
	}
	switch typ {
	case "message":
		return decodeMessage(r, x, p, it)
	case "function_call":
		if it.CallID == "" {
			return apierr.Invalid(p+".call_id", "required")
		}
		if it.Name == "" {
			return apierr.Invalid(p+".name", "required")
		}
		input, err := openai.ToolArguments(p+".arguments", it.Arguments.V)
		if err != nil {
			return err
		}
		addBlocks(r, llm.RoleAssistant, llm.Block{Type: llm.BlockToolUse, ID: it.CallID, Name: it.Name, Input: input})
	case "function_call_output":
		if it.CallID == "" {
			return apierr.Invalid(p+".call_id", "required")
		}
		text, err := decodeText(p+".output", &it.Output)
		if err != nil {
			return err
		}
		b := llm.Block{Type: llm.BlockToolResult, ToolUseID: it.CallID}
		if text != "" {
			b.Content = []llm.Block{{Type: llm.BlockText, Text: text}}
		}
		addBlocks(r, llm.RoleUser, b)
	case "":
		return apierr.Invalid(p+".type", "required")
	default:
		if !droppedItems[typ] {
			return apierr.Invalid(p+".type", "unsupported input item type %q", typ)
		}
	}
	return nil
}

func decodeMessage(r *llm.Request, x *Extras, p string, it *item) error {
	switch it.Role {
	case "system", "developer":
		text, err := decodeText(p+".content", &it.Content)
		if err != nil {
			return err
		}
		if text != "" {
			b := llm.Block{Type: llm.BlockText, Text: text}
			r.System = append(r.System, b)
			x.System = append(x.System, b)
		}
		return nil
	case "user", "assistant":
	case "":
		return apierr.Invalid(p+".role", "required")
	default:
		return apierr.Invalid(p+".role", "must be user, assistant, system or developer, got %q", it.Role)
	}
	role := llm.RoleUser
	if it.Role == "assistant" {
		role = llm.RoleAssistant
	}
	c := &it.Content
	switch {
	case !c.Given:
		return apierr.Invalid(p+".content", "required")
	case c.IsStr:
		if c.Str != "" {
			addBlocks(r, role, llm.Block{Type: llm.BlockText, Text: c.Str})
		}
		return nil
	case c.Bad:
		return apierr.Invalid(p+".content", "must be a string or a list of content parts")
	}
	parts := c.Parts
	for j := range parts {
		pt := &parts[j]
		pp := fmt.Sprintf("%s.content[%d]", p, j)
		switch pt.Type {
		case "input_text", "output_text":
			if !pt.Text.OK {
				return apierr.Invalid(pp+".text", "required")
			}
			if pt.Text.V != "" {
				addBlocks(r, role, llm.Block{Type: llm.BlockText, Text: pt.Text.V})
			}
		case "refusal":
			if pt.Refusal.OK && pt.Refusal.V != "" {
				addBlocks(r, role, llm.Block{Type: llm.BlockText, Text: pt.Refusal.V})
			}
		case "input_image":
			if role != llm.RoleUser {
				return apierr.Invalid(pp+".type", "images are allowed in user messages only")
			}
			if !pt.ImageURL.OK || pt.ImageURL.V == "" {
				return apierr.Invalid(pp+".image_url", "required (file_id images are not supported)")
			}
			b, err := openai.ImageURL(pp+".image_url", pt.ImageURL.V)
			if err != nil {
				return err
			}
			addBlocks(r, role, b)
		case "":
			return apierr.Invalid(pp+".type", "required")
		default:
			return apierr.Invalid(pp+".type", "unsupported content part type %q (want input_text, output_text, refusal or input_image)", pt.Type)
		}
	}
	return nil
}

// addBlocks appends b to the last turn when it is of role, else starts a turn: consecutive
// items of one role are one canonical turn, so a function call joins the assistant's text and
// a tool result joins the user's next words.
func addBlocks(r *llm.Request, role llm.Role, b llm.Block) {
	if n := len(r.Messages); n > 0 && r.Messages[n-1].Role == role {
		r.Messages[n-1].Content = append(r.Messages[n-1].Content, b)
		return
	}
	r.Messages = append(r.Messages, llm.Message{Role: role, Content: []llm.Block{b}})
}

// decodeText reads content that must be text: a string, or a list of text parts, joined.
func decodeText(p string, c *openai.Content) (string, error) {
	switch {
	case !c.Given:
		return "", nil
	case c.IsStr:
		return c.Str, nil
	case c.Bad:
		return "", apierr.Invalid(p, "must be a string or a list of text parts")
	}
	var buf []byte
	for j := range c.Parts {
		switch pt := &c.Parts[j]; {
		case (pt.Type == "input_text" || pt.Type == "output_text" || pt.Type == "text") && pt.Text.OK:
			buf = append(buf, pt.Text.V...)
		default:
			return "", apierr.Invalid(fmt.Sprintf("%s[%d].type", p, j), "must be input_text here, got %q", pt.Type)
		}
	}
	return string(buf), nil
}
