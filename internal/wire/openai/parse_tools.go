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
			d.NoteDup()
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

// toolFunctionNames are the fields of a Chat Completions tool's function, as type errors name
// them.
var toolFunctionNames = [...]string{"tools.function.name", "tools.function.description"}

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
		i := FuncField(k)
		if f.Seen(d, k, i) {
			d.NoteDup()
		}
		if i >= 0 {
			err = d.FuncMember(i, &t.Function, &toolFunctionNames, nil)
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

var funcFields = [...]string{"name", "description", "parameters"}

// FuncField returns the index of the member of a function declaration that k names (name,
// description, parameters), or -1.
func FuncField(k string) int { return fieldIndex(funcFields[:], k) }

// FuncMember reads member i (of FuncField) of a function declaration into f. With names, a value
// of the wrong type stops the decoder, naming the field as names has it; else it sets *bad.
func (d *Decoder) FuncMember(i int, f *FuncDecl, names *[2]string, bad *bool) (err error) {
	switch i {
	case 0:
		f.Name, err = d.str(names, 0, bad)
	case 1:
		f.Description, err = d.str(names, 1, bad)
	default:
		f.Parameters, err = d.RawOrNull()
	}
	return err
}

// str reads a string (null as ""): with names, strictly, as field names[i]; else leniently.
func (d *Decoder) str(names *[2]string, i int, bad *bool) (s string, err error) {
	if names != nil {
		s, _, err = d.String(names[i])
	} else {
		s, _, err = d.LenientString(bad)
	}
	return s, err
}

// RawOrNull reads any value as Raw does, and returns "" for null.
func (d *Decoder) RawOrNull() (string, error) {
	if null, err := d.Null(); null || err != nil {
		return "", err
	}
	return d.Raw()
}

// toolChoice reads tool_choice leniently: a string, or {"type":…,"function":{"name":…}}.
func (d *Decoder) toolChoice(l *Lenient[toolChoiceJSON]) error {
	switch d.Peek() {
	case jsontext.KindNull:
		_, err := d.Literal()
		return err
	case jsontext.KindString:
		l.Given, l.IsStr = true, true
		var err error
		l.Str, err = d.Str()
		return err
	case jsontext.KindObject:
	default:
		l.Given, l.Bad = true, true
		return d.Skip(shapeToolChoice)
	}
	l.Given = true
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
			d.NoteDup()
		}
		switch i {
		case 0:
			l.V.Type, _, err = d.LenientString(&l.Bad)
		case 1:
			err = d.nameObject(&l.V.Name, &l.Bad)
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
	ok, err := d.LenientObject(shapeStruct, bad)
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
			d.NoteDup()
		}
		if i == 0 {
			*name, _, err = d.LenientString(bad)
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
func (d *Decoder) responseFormat(l *Lenient[responseFormatJSON]) error {
	if null, err := d.Null(); null || err != nil {
		return err
	}
	l.Given = true
	ok, err := d.LenientObject(shapeResponseFormat, &l.Bad)
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
			d.NoteDup()
		}
		switch i {
		case 0:
			l.V.Type, _, err = d.LenientString(&l.Bad)
		case 1:
			err = d.jsonSchema(&l.V, &l.Bad)
		default:
			err = d.Skip(shapeResponseFormat.child(k))
		}
		if err != nil {
			return err
		}
		d.Leave()
	}
}

var schemaFields = [...]string{"name", "schema", "strict"}

// SchemaField returns the index of the member of a json_schema format that k names (name,
// schema, strict), or -1.
func SchemaField(k string) int { return fieldIndex(schemaFields[:], k) }

// SchemaMember reads member i (of SchemaField) of a json_schema format into s, leniently.
func (d *Decoder) SchemaMember(i int, s *SchemaDecl, bad *bool) (err error) {
	switch i {
	case 0:
		s.Name, _, err = d.LenientString(bad)
	case 1:
		s.Schema, err = d.RawOrNull()
	default:
		err = d.LenientBool(&s.Strict, bad)
	}
	return err
}

func (d *Decoder) jsonSchema(rf *responseFormatJSON, bad *bool) error {
	ok, err := d.LenientObject(shapeStruct, bad)
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
		i := SchemaField(k)
		if f.Seen(d, k, i) {
			d.NoteDup()
		}
		if i >= 0 {
			err = d.SchemaMember(i, &rf.Schema, bad)
		} else {
			err = d.Skip(ShapeRaw)
		}
		if err != nil {
			return err
		}
		d.Leave()
	}
}

// LenientBool reads a boolean or null; any other value sets bad.
func (d *Decoder) LenientBool(b *Opt[bool], bad *bool) error {
	switch d.Peek() {
	case jsontext.KindBool:
		lit, err := d.Literal()
		b.V, b.OK = lit == "true", true
		return err
	case jsontext.KindNull:
		_, err := d.Literal()
		b.OK = false
		return err
	}
	*bad = true
	return d.Skip(ShapeRaw)
}
