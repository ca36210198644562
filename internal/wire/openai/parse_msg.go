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
			d.noteDup()
		}
		switch i {
		case 0:
			m.Role, _, err = d.String("messages.role")
		case 1:
			err = d.content(&m.Content)
		case 2:
			m.ToolCalls, err = d.toolCalls()
		case 3:
			m.ToolCallID.v, m.ToolCallID.ok, err = d.String("messages.tool_call_id")
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

// content reads a message's content leniently: a string, an array of parts, or null.
func (d *Decoder) content(c *content) error {
	*c = content{}
	switch d.Peek() {
	case jsontext.KindNull:
		_, err := d.Literal()
		return err
	case jsontext.KindString:
		c.given, c.isStr = true, true
		var err error
		c.str, err = d.Str()
		return err
	case jsontext.KindArray:
	default:
		c.given, c.bad = true, true
		return d.Skip(shapePart)
	}
	c.given = true
	d.Pos++
	for n := 0; ; {
		ok, err := d.Elem(&n)
		if err != nil || !ok {
			return err
		}
		var p contentPart
		switch d.Peek() {
		case jsontext.KindObject:
			err = d.part(&p, &c.bad)
		case jsontext.KindNull:
			_, err = d.Literal()
		default:
			c.bad = true
			err = d.Skip(shapePart)
		}
		if err != nil {
			return err
		}
		c.parts = append(c.parts, p)
		d.Leave()
	}
}

var partFields = [...]string{"type", "text", "refusal", "image_url"}

// part reads one content part object; a field of a type it cannot have sets bad.
func (d *Decoder) part(p *contentPart, bad *bool) error {
	d.Pos++
	var f Fields
	for n := 0; ; {
		k, ok, err := d.Key(&n)
		if err != nil || !ok {
			return err
		}
		i := fieldIndex(partFields[:], k)
		if f.Seen(d, k, i) {
			d.noteDup()
		}
		switch i {
		case 0:
			p.Type, _, err = d.lenientString(bad)
		case 1:
			p.Text.v, p.Text.ok, err = d.lenientString(bad)
		case 2:
			p.Refusal.v, p.Refusal.ok, err = d.lenientString(bad)
		case 3:
			err = d.imageURL(p, bad)
		default:
			err = d.Skip(shapePart.child(k))
		}
		if err != nil {
			return err
		}
		d.Leave()
	}
}

// lenientString reads a string or null; any other value sets bad.
func (d *Decoder) lenientString(bad *bool) (string, bool, error) {
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

// lenientObject consumes the '{' of an object; null is consumed (ok false); any other value is
// skipped as of shape s and sets bad.
func (d *Decoder) lenientObject(s Shape, bad *bool) (ok bool, err error) {
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

func (d *Decoder) imageURL(p *contentPart, bad *bool) error {
	ok, err := d.lenientObject(shapeStruct, bad)
	if err != nil || !ok {
		return err
	}
	p.ImageURL.ok = true
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
			d.noteDup()
		}
		if i == 0 {
			p.ImageURL.v, _, err = d.lenientString(bad)
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
			d.noteDup()
		}
		switch i {
		case 0:
			tc.Index.v, tc.Index.ok, err = d.Int("messages.tool_calls.index")
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
			d.noteDup()
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
