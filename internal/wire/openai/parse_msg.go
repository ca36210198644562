package openai

import (
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// messages reads messages: an array of message objects (null ones read as empty messages).
func (d *Decoder) messages() ([]chatMessage, error) {
	ok, err := d.Array("messages")
	if err != nil || !ok {
		return nil, err
	}
	msgs := make([]chatMessage, 0, 8)
	for n := 0; ; {
		ok, err := d.Elem(&n)
		if err != nil || !ok {
			return msgs, err
		}
		msgs = append(msgs, chatMessage{})
		if err := d.message(&msgs[len(msgs)-1]); err != nil {
			return nil, err
		}
		d.Leave()
	}
}

var messageFields = [...]string{"role", "content", "tool_calls", "tool_call_id", "refusal"}

func (d *Decoder) message(m *chatMessage) error {
	ok, err := d.Object("messages")
	if err != nil || !ok {
		return err
	}
	var f Fields
	for n := 0; ; {
		k, ok, err := d.Key(&n)
		if err != nil || !ok {
			return err
		}
		i := fieldIndex(messageFields[:], k)
		if f.Seen(d, k, i) {
			d.NoteDup()
		}
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
		if err != nil {
			return err
		}
		d.Leave()
	}
}

// Content reads a message's content leniently: a string, an array of parts, or null. flat
// reads parts as the Responses API has them (image_url a string, file_id), else as Chat
// Completions has them (image_url an object with a url).
func (d *Decoder) Content(c *Content, flat bool) error {
	*c = Content{}
	switch d.Peek() {
	case jsontext.KindNull:
		_, err := d.Literal()
		return err
	case jsontext.KindString:
		c.Given, c.IsStr = true, true
		var err error
		c.Str, err = d.Str()
		return err
	case jsontext.KindArray:
	default:
		c.Given, c.Bad = true, true
		return d.Skip(shapePart)
	}
	c.Given = true
	d.Pos++
	for n := 0; ; {
		ok, err := d.Elem(&n)
		if err != nil || !ok {
			return err
		}
		var p ContentPart
		switch d.Peek() {
		case jsontext.KindObject:
			err = d.part(&p, &c.Bad, flat)
		case jsontext.KindNull:
			_, err = d.Literal()
		default:
			c.Bad = true
			err = d.Skip(shapePart)
		}
		if err != nil {
			return err
		}
		c.Parts = append(c.Parts, p)
		d.Leave()
	}
}

var partFields = [...]string{"type", "text", "refusal", "image_url", "file_id"}

// part reads one content part object; a field of a type it cannot have sets bad.
func (d *Decoder) part(p *ContentPart, bad *bool, flat bool) error {
	d.Pos++
	var f Fields
	for n := 0; ; {
		k, ok, err := d.Key(&n)
		if err != nil || !ok {
			return err
		}
		i := fieldIndex(partFields[:], k)
		if i == 4 && !flat {
			i = -1
		}
		if f.Seen(d, k, i) {
			d.NoteDup()
		}
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
			err = d.imageURL(p, bad)
		case i == 4:
			p.FileID.V, p.FileID.OK, err = d.LenientString(bad)
		default:
			err = d.Skip(shapePart.child(k))
		}
		if err != nil {
			return err
		}
		d.Leave()
	}
}

// LenientString reads a string or null (ok false); any other value sets bad.
func (d *Decoder) LenientString(bad *bool) (string, bool, error) {
	switch d.Peek() {
	case jsontext.KindString:
		s, err := d.Str()
		return s, err == nil, err
	case jsontext.KindNull:
		_, err := d.Literal()
		return "", false, err
	}
	*bad = true
	return "", false, d.Skip(ShapeRaw)
}

// LenientObject consumes the '{' of an object; null is consumed (ok false); any other value is
// skipped as of shape s and sets bad.
func (d *Decoder) LenientObject(s Shape, bad *bool) (ok bool, err error) {
	switch d.Peek() {
	case jsontext.KindObject:
		d.Pos++
		return true, nil
	case jsontext.KindNull:
		_, err := d.Literal()
		return false, err
	}
	*bad = true
	return false, d.Skip(s)
}

func (d *Decoder) imageURL(p *ContentPart, bad *bool) error {
	ok, err := d.LenientObject(shapeStruct, bad)
	if err != nil || !ok {
		return err
	}
	p.ImageURL.OK = true
	var f Fields
	for n := 0; ; {
		k, ok, err := d.Key(&n)
		if err != nil || !ok {
			return err
		}
		i := -1
		if Is(k, "url") {
			i = 0
		}
		if f.Seen(d, k, i) {
			d.NoteDup()
		}
		if i == 0 {
			p.ImageURL.V, _, err = d.LenientString(bad)
		} else {
			err = d.Skip(ShapeRaw)
		}
		if err != nil {
			return err
		}
		d.Leave()
	}
}

// toolCalls reads an assistant message's tool_calls.
func (d *Decoder) toolCalls() ([]chatToolCall, error) {
	ok, err := d.Array("messages.tool_calls")
	if err != nil || !ok {
		return nil, err
	}
	var calls []chatToolCall
	for n := 0; ; {
		ok, err := d.Elem(&n)
		if err != nil || !ok {
			return calls, err
		}
		calls = append(calls, chatToolCall{})
		if err := d.toolCall(&calls[len(calls)-1]); err != nil {
			return nil, err
		}
		d.Leave()
	}
}

var toolCallFields = [...]string{"index", "id", "type", "function"}

func (d *Decoder) toolCall(tc *chatToolCall) error {
	ok, err := d.Object("messages.tool_calls")
	if err != nil || !ok {
		return err
	}
	var f Fields
	for n := 0; ; {
		k, ok, err := d.Key(&n)
		if err != nil || !ok {
			return err
		}
		i := fieldIndex(toolCallFields[:], k)
		if f.Seen(d, k, i) {
			d.NoteDup()
		}
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
		if err != nil {
			return err
		}
		d.Leave()
	}
}

var callFunctionFields = [...]string{"name", "arguments"}

func (d *Decoder) callFunction(tc *chatToolCall) error {
	ok, err := d.Object("messages.tool_calls.function")
	if err != nil || !ok {
		return err
	}
	var f Fields
	for n := 0; ; {
		k, ok, err := d.Key(&n)
		if err != nil || !ok {
			return err
		}
		i := fieldIndex(callFunctionFields[:], k)
		if f.Seen(d, k, i) {
			d.NoteDup()
		}
		switch i {
		case 0:
			tc.Name, _, err = d.String("messages.tool_calls.function.name")
		case 1:
			tc.Args, _, err = d.String("messages.tool_calls.function.arguments")
		default:
			d.Unknown(k)
			err = d.Skip(ShapeRaw)
		}
		if err != nil {
			return err
		}
		d.Leave()
	}
}
