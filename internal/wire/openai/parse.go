package openai

import (
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// The reading of a Chat Completions body into chatRequest, one member at a time. The fields
// with several JSON shapes (content, stop, tool_choice, response_format) are read leniently: a
// shape they cannot have is noted, and the rules report it with the field's own message, as
// they did when those fields were kept raw and decoded apart.

// opt is a value a request may leave out: ok is false when it is absent or null.
type opt[T any] struct {
	v  T
	ok bool
}

// chatRequest is the subset of the Chat Completions request layer0 understands. Unknown fields
// (seed, logprobs, penalties, …) are accepted and ignored: the SDKs send new ones faster than
// any gateway learns them, and docs/engines.md lists what is not kept. The first one is named in
// llm.Request.Ignored (the pass-through path sends it, so the answer is not cached); the fields
// read and dropped (store, service_tier, prompt_cache_key, safety_identifier, metadata) cannot
// change the answer.
type chatRequest struct {
	Model, User                       opt[string]
	Messages                          []chatMessage
	MaxTokens, MaxCompletionTokens, N opt[int]
	TopK                              opt[int]
	Temperature, TopP                 *float64
	Stop                              lenient[[]string]
	Stream, ParallelToolCalls         opt[bool]
	IncludeUsage                      opt[bool]
	Tools                             []chatTool
	ToolChoice                        lenient[toolChoiceJSON]
	Functions                         bool // functions or function_call given, not null
	ResponseFormat                    lenient[responseFormatJSON]
}

// lenient is a field read leniently: absent or null, of a shape it cannot have (bad), or v.
type lenient[T any] struct {
	v       T
	given   bool // present and not null
	bad     bool
	isStr   bool // a string, in str
	str     string
	isArray bool
}

type chatMessage struct {
	Role       string
	Content    content
	ToolCalls  []chatToolCall
	ToolCallID opt[string]
	// Refusal is an assistant turn's refusal text, which the SDKs send back as null or "": any
	// other value is content the canonical request does not carry (llm.Request.Ignored).
	Refusal string // raw JSON, "" when absent
}

// content is a message's content: absent or null, a string, or parts (bad when they are not an
// array of part objects of the right types).
type content struct {
	given bool
	isStr bool
	str   string
	parts []contentPart
	bad   bool
}

type chatToolCall struct {
	Index       opt[int]
	ID, Type    string
	Name, Args  string
	hasFunction bool
}

type chatTool struct {
	Type              string
	HasFunction       bool
	Name, Description string
	Parameters        string // raw JSON, "" when absent
}

type contentPart struct {
	Type     string
	Text     opt[string]
	Refusal  opt[string]
	ImageURL opt[string] // ok when image_url is an object, v its url
}

type toolChoiceJSON struct {
	Type, Name string
}

// responseFormatJSON is OpenAI's response_format.
type responseFormatJSON struct {
	Type      string
	HasSchema bool // json_schema given, not null
	Name      string
	Schema    string // raw JSON, "" when absent
	Strict    opt[bool]
}

// request reads the body into cr (Finish reports what stops it).
func (d *Decoder) request(cr *chatRequest) error {
	ok, err := d.Object("")
	if err != nil || !ok {
		return err
	}
	var f Fields
	for n := 0; ; {
		k, ok, err := d.Key(&n)
		if err != nil || !ok {
			return err
		}
		i := requestField(k)
		if f.Seen(d, k, i) {
			d.noteDup()
		}
		if err := d.requestMember(cr, i, k); err != nil {
			return err
		}
		d.Leave()
	}
}

// requestFields are the members of a request, by index; the ones after firstRaw are read as
// JSON and dropped.
var requestFields = [...]string{"model", "messages", "max_tokens", "max_completion_tokens", "temperature",
	"top_p", "top_k", "n", "stop", "stream", "stream_options", "tools", "tool_choice", "parallel_tool_calls",
	"user", "functions", "function_call", "response_format",
	"metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier"}

const firstRaw = 18 // metadata

func requestField(k string) int { return fieldIndex(requestFields[:], k) }

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
	case 0:
		cr.Model.v, cr.Model.ok, err = d.String("model")
	case 1:
		cr.Messages, err = d.messages()
	case 2:
		cr.MaxTokens.v, cr.MaxTokens.ok, err = d.Int("max_tokens")
	case 3:
		cr.MaxCompletionTokens.v, cr.MaxCompletionTokens.ok, err = d.Int("max_completion_tokens")
	case 4:
		cr.Temperature, err = d.Float("temperature")
	case 5:
		cr.TopP, err = d.Float("top_p")
	case 6:
		cr.TopK.v, cr.TopK.ok, err = d.Int("top_k")
	case 7:
		cr.N.v, cr.N.ok, err = d.Int("n")
	case 8:
		err = d.stop(&cr.Stop)
	case 9:
		cr.Stream.v, cr.Stream.ok, err = d.Bool("stream")
	case 10:
		err = d.streamOptions(cr)
	case 11:
		cr.Tools, err = d.tools()
	case 12:
		err = d.toolChoice(&cr.ToolChoice)
	case 13:
		cr.ParallelToolCalls.v, cr.ParallelToolCalls.ok, err = d.Bool("parallel_tool_calls")
	case 14:
		cr.User.v, cr.User.ok, err = d.String("user")
	case 15, 16:
		var null bool
		if null, err = d.Null(); err == nil && !null {
			cr.Functions = true
			err = d.Skip(ShapeRaw)
		}
	case 17:
		err = d.responseFormat(&cr.ResponseFormat)
	default:
		if i < 0 {
			d.Unknown(k)
		}
		err = d.Skip(ShapeRaw)
	}
	return err
}

func (d *Decoder) streamOptions(cr *chatRequest) error {
	ok, err := d.Object("stream_options")
	if err != nil || !ok {
		return err
	}
	var f Fields
	for n := 0; ; {
		k, ok, err := d.Key(&n)
		if err != nil || !ok {
			return err
		}
		i := -1
		if Is(k, "include_usage") {
			i = 0
		}
		if f.Seen(d, k, i) {
			d.noteDup()
		}
		if i == 0 {
			cr.IncludeUsage.v, cr.IncludeUsage.ok, err = d.Bool("stream_options.include_usage")
		} else {
			d.Unknown(k)
			err = d.Skip(ShapeRaw)
		}
		if err != nil {
			return err
		}
		d.Leave()
	}
}

// stop reads stop: a string, or a list of strings (null ones read as "").
func (d *Decoder) stop(l *lenient[[]string]) error {
	switch d.Peek() {
	case jsontext.KindNull:
		_, err := d.Literal()
		return err
	case jsontext.KindString:
		l.given, l.isStr = true, true
		var err error
		l.str, err = d.Str()
		return err
	case jsontext.KindArray:
	default:
		l.given, l.bad = true, true
		return d.Skip(ShapeRaw)
	}
	l.given, l.isArray = true, true
	d.Pos++
	for n := 0; ; {
		ok, err := d.Elem(&n)
		if err != nil || !ok {
			return err
		}
		switch d.Peek() {
		case jsontext.KindString:
			var s string
			if s, err = d.Str(); err == nil {
				l.v = append(l.v, s)
			}
		case jsontext.KindNull:
			_, err = d.Literal()
			l.v = append(l.v, "")
		default:
			l.bad = true
			err = d.Skip(ShapeRaw)
		}
		if err != nil {
			return err
		}
		d.Leave()
	}
}
