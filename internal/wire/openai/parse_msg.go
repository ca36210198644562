package openai

import (
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// messages reads messages: an array of message objects (null ones read as empty messages).
func (d *Decoder) messages() ([]chatMessage, error) {
	return arrayOf(d, "messages", 4, d.message)
}

var messageFields = [...]string{"role", "content", "tool_calls", "tool_call_id", "refusal"}

func (d *Decoder) message(m *chatMessage) error {
	return d.ObjectMembers("messages", messageFields[:], func(k string, i int) (err error) {
		switch i {
		case 0:
			m.Role, _, err = d.String("messages.role")
		case 1:
			err = d.Content(&m.Content, false)
		case 2:
			m.ToolCalls, err = d.toolCalls()
		case 3:
			m.ToolCallID.V, m.ToolCallID.OK, err = d.String("messages.tool_call_id")
		case 4:
			m.Refusal, err = d.Raw()
		default:
			d.Unknown(k)
			err = d.Skip(shapeMessage.child(k))
		}
		return err
	})
}

// Content reads a message's content leniently: a string, an array of parts, or null. flat
// reads parts as the Responses API has them (image_url a string, file_id), else as Chat
// Completions has them (image_url an object with a url).
func (d *Decoder) Content(c *Content, flat bool) error {
	var l Lenient[struct{}]
	more, err := Leniently(d, &l, jsontext.KindArray, shapePart)
	*c = Content{Given: l.Given, IsStr: l.IsStr, Str: l.Str, Bad: l.Bad}
	if !more {
		return err
	}
	return d.Elems(func() error {
		var p ContentPart
		ok, err := d.LenientObject(shapePart, &c.Bad)
		if ok {
			err = d.part(&p, &c.Bad, flat)
		}
		c.Parts = append(c.Parts, p)
		return err
	})
}

var partFields = [...]string{"type", "text", "refusal", "image_url", "file_id"}

// part reads the members of one content part object; a field of a type it cannot have sets bad.
func (d *Decoder) part(p *ContentPart, bad *bool, flat bool) error {
	return d.Members(partFields[:], func(k string, i int) (err error) {
		switch {
		case i == 0:
			p.Type, _, err = d.LenientString(bad)
		case i == 1:
			p.Text.V, p.Text.OK, err = d.LenientString(bad)
		case i == 2:
			p.Refusal.V, p.Refusal.OK, err = d.LenientString(bad)
		case i == 3 && flat:
			p.ImageURL.V, p.ImageURL.OK, err = d.LenientString(bad)
		case i == 3:
			var ok bool
			if ok, err = d.LenientObject(shapeStruct, bad); ok {
				p.ImageURL.OK = true
				err = d.LenientStrings([]string{"url"}, bad, &p.ImageURL.V)
			}
		case i == 4 && flat:
			p.FileID.V, p.FileID.OK, err = d.LenientString(bad)
		default:
			err = d.Skip(shapePart.child(k))
		}
		return err
	})
}

// LenientString reads a string or null (ok false); any other value sets bad.
func (d *Decoder) LenientString(bad *bool) (string, bool, error) {
	if ok, err := d.lenientGiven(jsontext.KindString, ShapeRaw, bad); !ok {
		return "", false, err
	}
	s, err := d.Str()
	return s, err == nil, err
}

// LenientObject consumes the '{' of an object; null is consumed (ok false); any other value is
// skipped as of shape s and sets bad.
func (d *Decoder) LenientObject(s Shape, bad *bool) (ok bool, err error) {
	if ok, err = d.lenientGiven(jsontext.KindObject, s, bad); ok {
		d.Pos++
	}
	return ok, err
}

// lenientGiven reports whether a value of kind want is at the position: null is consumed
// (false), and a value of another kind is skipped as of shape s and sets bad (false).
func (d *Decoder) lenientGiven(want jsontext.Kind, s Shape, bad *bool) (bool, error) {
	switch d.Peek() {
	case want:
		return true, nil
	case jsontext.KindNull:
		_, err := d.Literal()
		return false, err
	}
	*bad = true
	return false, d.Skip(s)
}

// toolCalls reads an assistant message's tool_calls.
func (d *Decoder) toolCalls() ([]chatToolCall, error) {
	return arrayOf(d, "messages.tool_calls", 0, d.toolCall)
}

var toolCallFields = [...]string{"index", "id", "type", "function"}

func (d *Decoder) toolCall(tc *chatToolCall) error {
	return d.ObjectMembers("messages.tool_calls", toolCallFields[:], func(k string, i int) (err error) {
		switch i {
		case 0:
			tc.Index.V, tc.Index.OK, err = d.Int("messages.tool_calls.index")
		case 1:
			tc.ID, _, err = d.String("messages.tool_calls.id")
		case 2:
			tc.Type, _, err = d.String("messages.tool_calls.type")
		case 3:
			err = d.callFunction(tc)
		default:
			d.Unknown(k)
			err = d.Skip(shapeToolCall.child(k))
		}
		return err
	})
}

var callFunctionFields = [...]string{"name", "arguments"}

func (d *Decoder) callFunction(tc *chatToolCall) error {
	return d.ObjectMembers("messages.tool_calls.function", callFunctionFields[:], func(k string, i int) (err error) {
		switch i {
		case 0:
			tc.Name, _, err = d.String("messages.tool_calls.function.name")
		case 1:
			tc.Args, _, err = d.String("messages.tool_calls.function.arguments")
		default:
			d.Unknown(k)
			err = d.Skip(ShapeRaw)
		}
		return err
	})
}
