package openai

import (
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// tools reads tools: an array of tool objects (null ones read as empty tools).
func (d *Decoder) tools() ([]chatTool, error) {
	ok, err := d.Array("tools")
	if err != nil || !ok {
		return nil, err
	}
	var tools []chatTool
	for n := 0; ; {
		ok, err := d.Elem(&n)
		if err != nil || !ok {
			return tools, err
		}
		tools = append(tools, chatTool{})
		if err := d.tool(&tools[len(tools)-1]); err != nil {
			return nil, err
		}
		d.Leave()
	}
}

func (d *Decoder) tool(t *chatTool) error {
	ok, err := d.Object("tools")
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
		switch {
		case Is(k, "type"):
			i = 0
		case Is(k, "function"):
			i = 1
		}
		if f.Seen(d, k, i) {
			d.noteDup()
		}
		switch i {
		case 0:
			t.Type, _, err = d.String("tools.type")
		case 1:
			err = d.toolFunction(t)
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

var toolFunctionFields = [...]string{"name", "description", "parameters"}

func (d *Decoder) toolFunction(t *chatTool) error {
	ok, err := d.Object("tools.function")
	t.HasFunction = ok
	if err != nil || !ok {
		return err
	}
	var f Fields
	for n := 0; ; {
		k, ok, err := d.Key(&n)
		if err != nil || !ok {
			return err
		}
		i := fieldIndex(toolFunctionFields[:], k)
		if f.Seen(d, k, i) {
			d.noteDup()
		}
		switch i {
		case 0:
			t.Name, _, err = d.String("tools.function.name")
		case 1:
			t.Description, _, err = d.String("tools.function.description")
		case 2:
			t.Parameters, err = d.RawOrNull()
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

// RawOrNull reads any value as Raw does, and returns "" for null.
func (d *Decoder) RawOrNull() (string, error) {
	if null, err := d.Null(); null || err != nil {
		return "", err
	}
	return d.Raw()
}

// toolChoice reads tool_choice leniently: a string, or {"type":…,"function":{"name":…}}.
func (d *Decoder) toolChoice(l *lenient[toolChoiceJSON]) error {
	switch d.Peek() {
	case jsontext.KindNull:
		_, err := d.Literal()
		return err
	case jsontext.KindString:
		l.given, l.isStr = true, true
		var err error
		l.str, err = d.Str()
		return err
	case jsontext.KindObject:
	default:
		l.given, l.bad = true, true
		return d.Skip(shapeToolChoice)
	}
	l.given = true
	d.Pos++
	var f Fields
	for n := 0; ; {
		k, ok, err := d.Key(&n)
		if err != nil || !ok {
			return err
		}
		i := -1
		switch {
		case Is(k, "type"):
			i = 0
		case Is(k, "function"):
			i = 1
		}
		if f.Seen(d, k, i) {
			d.noteDup()
		}
		switch i {
		case 0:
			l.v.Type, _, err = d.lenientString(&l.bad)
		case 1:
			err = d.nameObject(&l.v.Name, &l.bad)
		default:
			err = d.Skip(shapeToolChoice.child(k))
		}
		if err != nil {
			return err
		}
		d.Leave()
	}
}

// nameObject reads {"name":…} leniently into name.
func (d *Decoder) nameObject(name *string, bad *bool) error {
	ok, err := d.lenientObject(shapeStruct, bad)
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
		if Is(k, "name") {
			i = 0
		}
		if f.Seen(d, k, i) {
			d.noteDup()
		}
		if i == 0 {
			*name, _, err = d.lenientString(bad)
		} else {
			err = d.Skip(ShapeRaw)
		}
		if err != nil {
			return err
		}
		d.Leave()
	}
}

// responseFormat reads response_format leniently: {"type":…,"json_schema":{"name":…,
// "schema":{…},"strict":…}}.
func (d *Decoder) responseFormat(l *lenient[responseFormatJSON]) error {
	if null, err := d.Null(); null || err != nil {
		return err
	}
	l.given = true
	ok, err := d.lenientObject(shapeResponseFormat, &l.bad)
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
		switch {
		case Is(k, "type"):
			i = 0
		case Is(k, "json_schema"):
			i = 1
		}
		if f.Seen(d, k, i) {
			d.noteDup()
		}
		switch i {
		case 0:
			l.v.Type, _, err = d.lenientString(&l.bad)
		case 1:
			err = d.jsonSchema(&l.v, &l.bad)
		default:
			err = d.Skip(shapeResponseFormat.child(k))
		}
		if err != nil {
			return err
		}
		d.Leave()
	}
}

var jsonSchemaFields = [...]string{"name", "schema", "strict"}

func (d *Decoder) jsonSchema(rf *responseFormatJSON, bad *bool) error {
	ok, err := d.lenientObject(shapeStruct, bad)
	rf.HasSchema = ok
	if err != nil || !ok {
		return err
	}
	var f Fields
	for n := 0; ; {
		k, ok, err := d.Key(&n)
		if err != nil || !ok {
			return err
		}
		i := fieldIndex(jsonSchemaFields[:], k)
		if f.Seen(d, k, i) {
			d.noteDup()
		}
		switch i {
		case 0:
			rf.Name, _, err = d.lenientString(bad)
		case 1:
			rf.Schema, err = d.RawOrNull()
		case 2:
			err = d.lenientBool(&rf.Strict, bad)
		default:
			err = d.Skip(ShapeRaw)
		}
		if err != nil {
			return err
		}
		d.Leave()
	}
}

// lenientBool reads a boolean or null; any other value sets bad.
func (d *Decoder) lenientBool(b *opt[bool], bad *bool) error {
	switch d.Peek() {
	case jsontext.KindBool:
		lit, err := d.Literal()
		b.v, b.ok = lit == "true", true
		return err
	case jsontext.KindNull:
		_, err := d.Literal()
		b.ok = false
		return err
	}
	*bad = true
	return d.Skip(ShapeRaw)
}
