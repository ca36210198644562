package openai

import (
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// tools reads tools: an array of tool objects (null ones read as empty tools).
func (d *Decoder) tools() ([]chatTool, error) {
	return arrayOf(d, "tools", 0, d.tool)
}

var toolFields = [...]string{"type", "function"}

func (d *Decoder) tool(t *chatTool) error {
	return d.ObjectMembers("tools", toolFields[:], func(k string, i int) (err error) {
		switch i {
		case 0:
			t.Type, _, err = d.String("tools.type")
		case 1:
			if t.HasFunction, err = d.Object("tools.function"); t.HasFunction {
				err = d.Members(funcFields[:], func(k string, i int) error {
					if i < 0 {
						d.Unknown(k)
					}
					return d.FuncMember(i, &t.Function, &toolFunctionNames, nil)
				})
			}
		default:
			d.Unknown(k)
			err = d.Skip(ShapeRaw)
		}
		return err
	})
}

// toolFunctionNames are the fields of a Chat Completions tool's function, as type errors name
// them.
var toolFunctionNames = [...]string{"tools.function.name", "tools.function.description"}

var funcFields = [...]string{"name", "description", "parameters"}

// FuncField returns the index of the member of a function declaration that k names (name,
// description, parameters), or -1.
func FuncField(k string) int { return fieldIndex(funcFields[:], k) }

// FuncMember reads member i (of FuncField; -1 for another, skipped) of a function declaration
// into f. With names, a value of the wrong type stops the decoder, naming the field as names has
// it; else it sets *bad.
func (d *Decoder) FuncMember(i int, f *FuncDecl, names *[2]string, bad *bool) (err error) {
	switch i {
	case 0:
		f.Name, err = d.str(names, 0, bad)
	case 1:
		f.Description, err = d.str(names, 1, bad)
	case 2:
		f.Parameters, err = d.RawOrNull()
	default:
		err = d.Skip(ShapeRaw)
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
	if more, err := Leniently(d, l, jsontext.KindObject, shapeToolChoice); !more {
		return err
	}
	return d.Members(toolFields[:], func(k string, i int) (err error) {
		switch i {
		case 0:
			l.V.Type, _, err = d.LenientString(&l.Bad)
		case 1:
			var ok bool
			if ok, err = d.LenientObject(shapeStruct, &l.Bad); ok {
				err = d.LenientStrings([]string{"name"}, &l.Bad, &l.V.Name)
			}
		default:
			err = d.Skip(shapeToolChoice.child(k))
		}
		return err
	})
}

// LenientStrings reads the members of an object whose '{' was consumed, keeping the string of
// member fields[i] in *dst[i] (leniently: another type sets bad) and skipping the others.
func (d *Decoder) LenientStrings(fields []string, bad *bool, dst ...*string) error {
	return d.Members(fields, func(_ string, i int) (err error) {
		if i < 0 {
			return d.Skip(ShapeRaw)
		}
		*dst[i], _, err = d.LenientString(bad)
		return err
	})
}

var formatFields = [...]string{"type", "json_schema"}

// responseFormat reads response_format leniently: {"type":…,"json_schema":{"name":…,
// "schema":{…},"strict":…}}.
func (d *Decoder) responseFormat(l *Lenient[responseFormatJSON]) error {
	more, err := Leniently(d, l, jsontext.KindObject, shapeResponseFormat)
	if !more {
		l.Bad = l.Bad || l.IsStr
		return err
	}
	return d.Members(formatFields[:], func(k string, i int) (err error) {
		switch i {
		case 0:
			l.V.Type, _, err = d.LenientString(&l.Bad)
		case 1:
			if l.V.HasSchema, err = d.LenientObject(shapeStruct, &l.Bad); l.V.HasSchema {
				err = d.Members(schemaFields[:], func(_ string, i int) error {
					return d.SchemaMember(i, &l.V.Schema, &l.Bad)
				})
			}
		default:
			err = d.Skip(shapeResponseFormat.child(k))
		}
		return err
	})
}

var schemaFields = [...]string{"name", "schema", "strict"}

// SchemaField returns the index of the member of a json_schema format that k names (name,
// schema, strict), or -1.
func SchemaField(k string) int { return fieldIndex(schemaFields[:], k) }

// SchemaMember reads member i (of SchemaField; -1 for another, skipped) of a json_schema format
// into s, leniently.
func (d *Decoder) SchemaMember(i int, s *SchemaDecl, bad *bool) (err error) {
	switch i {
	case 0:
		s.Name, _, err = d.LenientString(bad)
	case 1:
		s.Schema, err = d.RawOrNull()
	case 2:
		err = d.LenientBool(&s.Strict, bad)
	default:
		err = d.Skip(ShapeRaw)
	}
	return err
}

// LenientBool reads a boolean or null; any other value sets bad.
func (d *Decoder) LenientBool(b *Opt[bool], bad *bool) error {
	if d.Peek() == jsontext.KindNull {
		b.OK = false // a value of another type leaves b as it was
	}
	if ok, err := d.lenientGiven(jsontext.KindBool, ShapeRaw, bad); !ok {
		return err
	}
	lit, err := d.Literal()
	b.V, b.OK = lit == "true", true
	return err
}
