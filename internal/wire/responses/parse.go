package responses

import (
	"slices"

	"github.com/layer0ai/layer0/internal/wire/jsontext"
	"github.com/layer0ai/layer0/internal/wire/openai"
)

// The reading of a Responses body into request, one member at a time (openai.Decoder). Names
// match fields ignoring case and a field given in two cases is read last-wins, as encoding/json
// read them; names given twice exactly are refused. The fields with several JSON shapes are read
// leniently: a shape they cannot have is noted, and the rules report it with the field's own
// message.

// request is the subset of a Responses request layer0 reads. Unknown fields (reasoning,
// include, prompt_cache_key, service_tier, client_metadata, …) are accepted and ignored, as
// docs/responses.md lists. The raw fields are JSON text, "" when absent or null.
type request struct {
	openai.Common
	PreviousResponseID openai.Opt[string]
	MaxOutputTokens    openai.Opt[int]
	Store, Background  openai.Opt[bool]
	Input              openai.Lenient[[]item]
	Instructions       openai.Lenient[struct{}]
	Tools              openai.Lenient[[]tool]
	ToolChoice         openai.Lenient[toolChoice]
	Text               openai.Lenient[textConfig]
	// The raw text of the fields a response echoes.
	InstructionsRaw, ToolsRaw, ToolChoiceRaw, TextRaw, Metadata string
	Conversation, Prompt                                        string
	// Accepted and not carried, though an engine could answer differently for them
	// (llm.Request.Ignored).
	Reasoning, TopLogprobs string
}

type toolChoice struct{ Type, Name string }

type textConfig struct {
	Format    openai.Lenient[format]
	Verbosity string // raw
}

type format struct {
	Type   string
	Schema openai.SchemaDecl
}

// tool is a Responses tool: a function (name, description, parameters at the top level, unlike
// Chat Completions), a namespace of functions, or a hosted tool layer0 cannot run.
type tool struct {
	Type     string
	Function openai.FuncDecl
	Tools    []tool
}

// item is one input item: a message (type "message", or no type with a role), a function call
// or its output, a reasoning item, …
type item struct {
	Type, Role, CallID, Name string
	Content, Output          openai.Content
	Arguments                openai.Opt[string]
}

// requestFields are the members of a request, by index: openai.CommonFields, then the request's
// own.
var requestFields = slices.Concat(openai.CommonFields[:], []string{"input", "instructions", "tools", "tool_choice",
	"max_output_tokens", "text", "store", "previous_response_id", "metadata", "background", "conversation",
	"prompt", "reasoning", "top_logprobs"})

func readRequest(d *openai.Decoder, rr *request) error {
	return d.ObjectMembers("", requestFields, func(_ string, i int) error { return rr.member(d, i) })
}

// member reads the value of field i of requestFields (-1 for none). This is a dispatch on the
// field, one case each; it is longer than a function should be for that.
func (rr *request) member(d *openai.Decoder, i int) (err error) {
	switch i {
	case 0, 1, 2, 3, 4, 5:
		err = d.CommonMember(&rr.Common, i)
	case 6:
		err = readInput(d, &rr.Input)
	case 7:
		rr.InstructionsRaw, err = leniently(d, &rr.Instructions, jsontext.KindString, nil)
	case 8:
		rr.ToolsRaw, err = leniently(d, &rr.Tools, jsontext.KindArray, func() error { return readTools(d, &rr.Tools.V, &rr.Tools.Bad) })
	case 9:
		rr.ToolChoiceRaw, err = leniently(d, &rr.ToolChoice, jsontext.KindObject, func() error { return readToolChoice(d, &rr.ToolChoice) })
	case 10:
		rr.MaxOutputTokens.V, rr.MaxOutputTokens.OK, err = d.Int("max_output_tokens")
	case 11:
		rr.TextRaw, err = leniently(d, &rr.Text, jsontext.KindObject, func() error { return readText(d, &rr.Text) })
	case 12:
		rr.Store.V, rr.Store.OK, err = d.Bool("store")
	case 13:
		rr.PreviousResponseID.V, rr.PreviousResponseID.OK, err = d.String("previous_response_id")
	case 14:
		rr.Metadata, err = d.RawOrNull()
	case 15:
		rr.Background.V, rr.Background.OK, err = d.Bool("background")
	case 16:
		rr.Conversation, err = d.RawOrNull()
	case 17:
		rr.Prompt, err = d.RawOrNull()
	case 18:
		rr.Reasoning, err = d.RawOrNull()
	case 19:
		rr.TopLogprobs, err = d.RawOrNull()
	default:
		err = d.Skip(openai.ShapeRaw)
	}
	return err
}

// leniently reads a field of several shapes (openai.Leniently), read reading the rest of a value
// of kind want, and returns its raw text ("" for null). A value of another kind, a string
// included, is bad, but for a field that wants a string (KindString, and no read).
func leniently[T any](d *openai.Decoder, l *openai.Lenient[T], want jsontext.Kind, read func() error) (string, error) {
	d.WS()
	start := d.Pos
	more, err := openai.Leniently(d, l, want, openai.ShapeRaw)
	if more && read != nil {
		err = read()
	}
	l.Bad = l.Bad || l.IsStr && want != jsontext.KindString
	if !l.Given {
		return "", err
	}
	return d.Text[start:d.Pos], err
}

// readInput reads input: a string, or a list of items.
func readInput(d *openai.Decoder, l *openai.Lenient[[]item]) error {
	more, err := openai.Leniently(d, l, jsontext.KindArray, openai.ShapeRaw)
	if !more {
		return err
	}
	return d.Elems(func() error {
		l.V = append(l.V, item{})
		return readItem(d, &l.V[len(l.V)-1], &l.Bad)
	})
}

var itemFields = [...]string{"type", "role", "content", "call_id", "name", "arguments", "output"}

func readItem(d *openai.Decoder, it *item, bad *bool) error {
	if ok, err := d.LenientObject(openai.ShapeRaw, bad); err != nil || !ok {
		return err
	}
	return d.Members(itemFields[:], func(_ string, i int) (err error) {
		switch i {
		case 0:
			it.Type, _, err = d.LenientString(bad)
		case 1:
			it.Role, _, err = d.LenientString(bad)
		case 2:
			err = d.Content(&it.Content, true)
		case 3:
			it.CallID, _, err = d.LenientString(bad)
		case 4:
			it.Name, _, err = d.LenientString(bad)
		case 5:
			it.Arguments.V, it.Arguments.OK, err = d.LenientString(bad)
		case 6:
			err = d.Content(&it.Output, true)
		default:
			err = d.Skip(openai.ShapeRaw)
		}
		return err
	})
}

// readTools reads a list of tools leniently (a namespace's tools too), the '[' consumed.
func readTools(d *openai.Decoder, tools *[]tool, bad *bool) error {
	return d.Elems(func() error {
		*tools = append(*tools, tool{})
		return readTool(d, &(*tools)[len(*tools)-1], bad)
	})
}

var toolFields = [...]string{"type", "tools", "name", "description", "parameters"}

func readTool(d *openai.Decoder, t *tool, bad *bool) error {
	if ok, err := d.LenientObject(openai.ShapeRaw, bad); err != nil || !ok {
		return err
	}
	return d.Members(toolFields[:], func(k string, i int) (err error) {
		switch i {
		case 0:
			t.Type, _, err = d.LenientString(bad)
		case 1:
			var l openai.Lenient[struct{}]
			more, err := openai.Leniently(d, &l, jsontext.KindArray, openai.ShapeRaw)
			*bad = *bad || l.Bad || l.IsStr
			t.Tools = nil
			if more {
				err = readTools(d, &t.Tools, bad)
			}
			return err
		default:
			err = d.FuncMember(openai.FuncField(k), &t.Function, nil, bad)
		}
		return err
	})
}

var toolChoiceFields = [...]string{"type", "name"}

func readToolChoice(d *openai.Decoder, l *openai.Lenient[toolChoice]) error {
	return d.LenientStrings(toolChoiceFields[:], &l.Bad, &l.V.Type, &l.V.Name)
}

var textFields = [...]string{"format", "verbosity"}

func readText(d *openai.Decoder, l *openai.Lenient[textConfig]) error {
	return d.Members(textFields[:], func(_ string, i int) (err error) {
		switch i {
		case 0:
			f := &l.V.Format
			_, err = leniently(d, f, jsontext.KindObject, func() error { return readFormat(d, f) })
		case 1:
			l.V.Verbosity, err = d.RawOrNull()
		default:
			err = d.Skip(openai.ShapeRaw)
		}
		return err
	})
}

var formatFields = [...]string{"type"}

func readFormat(d *openai.Decoder, l *openai.Lenient[format]) error {
	return d.Members(formatFields[:], func(k string, i int) error {
		if i == 0 {
			var err error
			l.V.Type, _, err = d.LenientString(&l.Bad)
			return err
		}
		return d.SchemaMember(openai.SchemaField(k), &l.V.Schema, &l.Bad)
	})
}
