package openai

import (
	"slices"

	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// The reading of a Chat Completions body into chatRequest, one member at a time. The fields
// with several JSON shapes (content, stop, tool_choice, response_format) are read leniently: a
// shape they cannot have is noted, and the rules report it with the field's own message, as
// they did when those fields were kept raw and decoded apart.

// Opt is a value a request may leave out: OK is false when it is absent or null.
type Opt[T any] struct {
	V  T
	OK bool
}

// chatRequest is the subset of the Chat Completions request layer0 understands. Unknown fields
// (seed, logprobs, penalties, …) are accepted and ignored: the SDKs send new ones faster than
// any gateway learns them, and docs/engines.md lists what is not kept. The first one is named in
// llm.Request.Ignored (the pass-through path sends it, so the answer is not cached); the fields
// read and dropped (store, service_tier, prompt_cache_key, safety_identifier, metadata) cannot
// change the answer.
type chatRequest struct {
	Common
	Messages                          []chatMessage
	MaxTokens, MaxCompletionTokens, N Opt[int]
	TopK                              Opt[int]
	Stop                              Lenient[[]string]
	IncludeUsage                      Opt[bool]
	Tools                             []chatTool
	ToolChoice                        Lenient[toolChoiceJSON]
	Functions                         bool // functions or function_call given, not null
	ResponseFormat                    Lenient[responseFormatJSON]
	// Metadata is metadata's raw JSON, "" when absent or null: checked (CheckMetadata), then
	// dropped.
	Metadata string
}

// Lenient is a field read leniently: absent or null (Given false), of a shape it cannot have
// (Bad), a string (IsStr, in Str), or V.
type Lenient[T any] struct {
	V                 T
	Given, Bad, IsStr bool
	Str               string
}

type chatMessage struct {
	Role       string
	Content    Content
	ToolCalls  []chatToolCall
	ToolCallID Opt[string]
	// Refusal is an assistant turn's refusal text, which the SDKs send back as null or "": any
	// other value is content the canonical request does not carry (llm.Request.Ignored).
	Refusal string // raw JSON, "" when absent
}

// Content is a message's content: absent or null (Given false), a string (IsStr), or parts
// (Bad when they are not an array of part objects of the right types).
type Content struct {
	Given, IsStr, Bad bool
	Str               string
	Parts             []ContentPart
}

type chatToolCall struct {
	Index       Opt[int]
	ID, Type    string
	Name, Args  string
	hasFunction bool
}

type chatTool struct {
	Type        string
	HasFunction bool
	Function    FuncDecl
}

// FuncDecl is a function tool's declaration. Parameters is raw JSON, "" when absent or null.
type FuncDecl struct {
	Name, Description, Parameters string
}

// ContentPart is one part of a message's content. ImageURL is Chat Completions' image_url
// object (OK when given, V its url) or the Responses API's image_url string.
type ContentPart struct {
	Type                            string
	Text, Refusal, ImageURL, FileID Opt[string]
}

type toolChoiceJSON struct {
	Type, Name string
}

// responseFormatJSON is OpenAI's response_format.
type responseFormatJSON struct {
	Type      string
	HasSchema bool // json_schema given, not null
	Schema    SchemaDecl
}

// SchemaDecl is a json_schema response format's name, schema (raw JSON, "" when absent or
// null) and strict flag.
type SchemaDecl struct {
	Name, Schema string
	Strict       Opt[bool]
}

// Common is what a Chat Completions request and a Responses request have alike, read alike (the
// same types, errors naming the same fields).
type Common struct {
	Model, User               Opt[string]
	Temperature, TopP         *float64
	Stream, ParallelToolCalls Opt[bool]
}

// CommonFields are the members of Common, by index. A request's fields list them first, so that
// a member whose index is below len(CommonFields) is read by CommonMember.
var CommonFields = [...]string{"model", "temperature", "top_p", "stream", "parallel_tool_calls", "user"}

// CommonMember reads the value of member i of CommonFields into c.
func (d *Decoder) CommonMember(c *Common, i int) (err error) {
	switch i {
	case 0:
		c.Model.V, c.Model.OK, err = d.String("model")
	case 1:
		c.Temperature, err = d.Float("temperature")
	case 2:
		c.TopP, err = d.Float("top_p")
	case 3:
		c.Stream.V, c.Stream.OK, err = d.Bool("stream")
	case 4:
		c.ParallelToolCalls.V, c.ParallelToolCalls.OK, err = d.Bool("parallel_tool_calls")
	case 5:
		c.User.V, c.User.OK, err = d.String("user")
	}
	return err
}

// request reads the body into cr (Finish reports what stops it).
func (d *Decoder) request(cr *chatRequest) error {
	return d.ObjectMembers("", requestFields, func(k string, i int) error { return d.requestMember(cr, i, k) })
}

// requestFields are the members of a request, by index: CommonFields, then the request's own;
// metadata is read as JSON, checked and dropped, the ones after it read as JSON and dropped.
var requestFields = slices.Concat(CommonFields[:], []string{"messages", "max_tokens", "max_completion_tokens",
	"top_k", "n", "stop", "stream_options", "tools", "tool_choice", "functions", "function_call", "response_format",
	"metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier"})

// fieldIndex returns the index of the field of fields that k names (ignoring case), or -1.
func fieldIndex(fields []string, k string) int {
	for i, f := range fields {
		if Is(k, f) {
			return i
		}
	}
	return -1
}

// requestMember reads the value of member k, field i of requestFields (-1 for none). This is a
// dispatch on the field, one case each; it is longer than a function should be for that.
func (d *Decoder) requestMember(cr *chatRequest, i int, k string) (err error) {
	switch i {
	case 0, 1, 2, 3, 4, 5:
		err = d.CommonMember(&cr.Common, i)
	case 6:
		cr.Messages, err = d.messages()
	case 7:
		cr.MaxTokens.V, cr.MaxTokens.OK, err = d.Int("max_tokens")
	case 8:
		cr.MaxCompletionTokens.V, cr.MaxCompletionTokens.OK, err = d.Int("max_completion_tokens")
	case 9:
		cr.TopK.V, cr.TopK.OK, err = d.Int("top_k")
	case 10:
		cr.N.V, cr.N.OK, err = d.Int("n")
	case 11:
		err = d.stop(&cr.Stop)
	case 12:
		err = d.streamOptions(cr)
	case 13:
		cr.Tools, err = d.tools()
	case 14:
		err = d.toolChoice(&cr.ToolChoice)
	case 15, 16:
		var null bool
		if null, err = d.Null(); err == nil && !null {
			cr.Functions = true
			err = d.Skip(ShapeRaw)
		}
	case 17:
		err = d.responseFormat(&cr.ResponseFormat)
	case 18:
		cr.Metadata, err = d.RawOrNull()
	default:
		if i < 0 {
			d.Unknown(k)
		}
		err = d.Skip(ShapeRaw)
	}
	return err
}

var streamOptionsFields = [...]string{"include_usage"}

func (d *Decoder) streamOptions(cr *chatRequest) error {
	return d.ObjectMembers("stream_options", streamOptionsFields[:], func(k string, i int) (err error) {
		if i == 0 {
			cr.IncludeUsage.V, cr.IncludeUsage.OK, err = d.Bool("stream_options.include_usage")
			return err
		}
		d.Unknown(k)
		return d.Skip(ShapeRaw)
	})
}

// stop reads stop: a string, or a list of strings (null ones read as "").
func (d *Decoder) stop(l *Lenient[[]string]) error {
	if more, err := Leniently(d, l, jsontext.KindArray, ShapeRaw); !more {
		return err
	}
	return d.Elems(func() error {
		s, _, err := d.LenientString(&l.Bad)
		l.V = append(l.V, s)
		return err
	})
}
