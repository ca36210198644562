package openai

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// The request decoders read a body once, with jsontext.Scanner, into plain structs; the rules
// (model required, roles, tool pairs, …) then run on those. They answer what the encoding/json
// decoders they replaced answered, in the same order of precedence: a body that is not UTF-8,
// then broken JSON, then the first value of a wrong type, then the first name given twice, then
// the rules. Member names match fields ignoring case, as encoding/json matched them.

// Decoder reads a request body for the OpenAI-family decoders (this package's and the Responses
// API's). Syntax errors and values of the wrong type stop it; a name given twice is noted (the
// first one) and reading goes on, since a wrong type further on takes precedence. Finish turns
// what it found into the error a client gets.
type Decoder struct {
	// Walker reads the body and keeps the place of the value being read, names as the body
	// spells them; its Enter, EnterIndex, Leave and Elems are the Decoder's.
	jsontext.Walker
	dup     []PathSeg // the first name given twice, or nil
	ignored string    // the first member a struct has no field for, when Unknown is tracked
	// Fold says whether names given twice are compared ignoring case where a struct is read
	// (where encoding/json read them as one field); the Responses decoder compared them exactly.
	Fold bool
}

// PathSeg is one step of the path to a value: a member, or an array element when Index >= 0.
type PathSeg = jsontext.PathSeg

// maxNesting is encoding/json's bound on nesting.
const maxNesting = 10000

// NewDecoder returns a Decoder of body. The strings it reads point into one copy of body, which
// is not retained: the caller may reuse it.
func NewDecoder(body []byte) *Decoder { return NewDecoderText(string(body)) }

// NewDecoderText returns a Decoder of a body given as text: the strings it reads are substrings
// of text (see DecodeRequestText for a text that shares a buffer).
func NewDecoderText(text string) *Decoder {
	return &Decoder{Walker: jsontext.Walker{Scanner: jsontext.Scanner{Text: text, MaxDepth: maxNesting}}, Fold: true}
}

// wrongType is the error that stops a Decoder at a value of the wrong type: encoding/json's
// UnmarshalTypeError, Field the dotted names of the struct fields that lead to it.
type wrongType struct {
	Field, Value string
}

func (e *wrongType) Error() string { return "wrong type (" + e.Value + ") for " + e.Field }

// WrongType returns the error for the value at the position, of kind k, where field (its dotted
// path of struct fields, "" for the body) wants another type.
func (d *Decoder) WrongType(field string, k jsontext.Kind) error {
	switch k {
	case jsontext.KindInvalid, jsontext.KindEOF:
		return d.Unexpected("a value")
	}
	v := k.String()
	if k == jsontext.KindBool {
		v = "bool"
	}
	return &wrongType{Field: field, Value: v}
}

// Finish returns the error a client gets for err, what a decoding of the body ended with (nil
// when it read the whole body), or for a name given twice; nil when there is neither.
func (d *Decoder) Finish(err error) error {
	if err == nil {
		err = d.End()
	}
	if err == nil {
		if d.dup != nil {
			return apierr.Invalid(pathString(d.dup), "%s", dupMessage)
		}
		return nil
	}
	if !utf8.ValidString(d.Text) {
		return utf8Error([]byte(d.Text))
	}
	if se := syntaxError(d.Text); se != nil {
		return apierr.Wrap(apierr.InvalidRequest, se, "request body is not valid JSON (offset %d)", jsonOffset(d.Text, se))
	}
	if wt, ok := err.(*wrongType); ok {
		if wt.Field == "" {
			return apierr.Wrap(apierr.InvalidRequest, wt, "request body must be a JSON object")
		}
		e := apierr.Invalid(wt.Field, "has the wrong type (%s)", wt.Value)
		e.Cause = wt
		return e
	}
	return apierr.Wrap(apierr.InvalidRequest, err, "request body is not valid JSON")
}

// syntaxError returns the first syntax error of text, or nil.
func syntaxError(text string) *jsontext.SyntaxError {
	s := jsontext.Scanner{Text: text, MaxDepth: maxNesting}
	err := s.Skip(0)
	if err == nil {
		err = s.End()
	}
	se, _ := err.(*jsontext.SyntaxError)
	return se
}

// jsonOffset is the offset encoding/json reported for a syntax error: how many bytes it read,
// the bad one included. The scanner places an error in an escape or a literal at its start;
// encoding/json at the first byte that cannot continue it.
func jsonOffset(text string, se *jsontext.SyntaxError) int {
	i := se.Offset
	switch se.Msg {
	case "invalid escape in string":
		i++
	case `invalid \u escape in string`:
		for i += 2; i < len(text) && i < se.Offset+6 && strings.IndexByte("0123456789abcdefABCDEF", text[i]) >= 0; i++ {
		}
	case "invalid literal":
		lit := "null"
		switch text[i] {
		case 't':
			lit = "true"
		case 'f':
			lit = "false"
		}
		for k := 0; k < len(lit) && i < len(text) && text[i] == lit[k]; k++ {
			i++
		}
	}
	return min(i+1, len(text))
}

// dupMessage is the message of the 400 for a member name given twice.
const dupMessage = "duplicate key: each field may be given only once"

// pathString spells a path as errors do: "messages[0].content".
func pathString(path []PathSeg) string {
	var b strings.Builder
	for _, sg := range path {
		if sg.Index >= 0 {
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(sg.Index))
			b.WriteByte(']')
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(sg.Key)
	}
	return b.String()
}

// NoteDup notes the member just entered as given twice, unless a name was already.
func (d *Decoder) NoteDup() {
	if d.dup == nil {
		d.dup = d.Segments(nil)
	}
}

// Ignored returns the first member a struct had no field for (see Unknown), or "".
func (d *Decoder) Ignored() string { return d.ignored }

// Unknown notes key as a member a struct has no field for, spelled as encoding/json's error
// spelled it, if it is the first.
func (d *Decoder) Unknown(key string) {
	if d.ignored == "" {
		d.ignored, _, _ = strings.Cut(strconv.Quote(key)[1:], `"`)
	}
}

// Fields tells the members of one struct-shaped object apart: with d.Fold, a known field by its
// index (below 64) and any other name by its folded form; else every name as it is.
type Fields struct {
	known uint64
	other jsontext.KeySet
}

// Seen notes member key, field i of the struct or -1 for a name it lacks, and reports whether
// the object gave it already.
func (f *Fields) Seen(d *Decoder, key string, i int) bool {
	if i >= 0 && d.Fold {
		dup := f.known&(1<<i) != 0
		f.known |= 1 << i
		return dup
	}
	if d.Fold {
		key = foldName(key)
	}
	return f.other.Add(key)
}

// foldName is the form of a name compared ignoring case: ASCII in lower case, anything else
// mapped to upper then lower case, so that characters whose fold is not their lower case meet.
func foldName(k string) string {
	for i := 0; i < len(k); i++ {
		if c := k[i]; c >= utf8.RuneSelf {
			return strings.ToLower(strings.ToUpper(k))
		} else if 'A' <= c && c <= 'Z' {
			return strings.ToLower(k)
		}
	}
	return k
}

// Is reports whether the member name k matches field (lower-case ASCII) as encoding/json matched
// names to fields: ignoring case.
func Is(k, field string) bool {
	if len(k) == len(field) {
		for i := 0; i < len(k); i++ {
			c := k[i]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != field[i] {
				return strings.EqualFold(k, field)
			}
		}
		return true
	}
	return strings.EqualFold(k, field)
}

// Object consumes the '{' of an object for field, or returns the error of a wrong type; null
// is no object and is consumed (ok false), as encoding/json leaves a field alone for it.
func (d *Decoder) Object(field string) (ok bool, err error) {
	return d.open(field, jsontext.KindObject)
}

// Array consumes the '[' of an array for field, as Object does an object.
func (d *Decoder) Array(field string) (ok bool, err error) { return d.open(field, jsontext.KindArray) }

func (d *Decoder) open(field string, want jsontext.Kind) (bool, error) {
	ok, err := d.given(field, want)
	if ok {
		d.Pos++
	}
	return ok, err
}

// given reports whether a value of kind want is at the position, for field: null is consumed
// (false), and a value of another kind is the error of a wrong type.
func (d *Decoder) given(field string, want jsontext.Kind) (bool, error) {
	switch k := d.Peek(); k {
	case want:
		return true, nil
	case jsontext.KindNull:
		_, err := d.Literal()
		return false, err
	default:
		return false, d.WrongType(field, k)
	}
}

// ObjectMembers reads the object of field, Object then Members: null reads as no object;
// member reads the value of each member, given its name and its index in fields.
func (d *Decoder) ObjectMembers(field string, fields []string, member func(k string, i int) error) error {
	if ok, err := d.Object(field); err != nil || !ok {
		return err
	}
	return d.Members(fields, member)
}

// Members reads the members of an object whose '{' was consumed: member reads the value of
// each, given its name and its index in fields (-1 for none); a name given twice is noted.
func (d *Decoder) Members(fields []string, member func(k string, i int) error) error {
	var f Fields
	return d.Walker.Members(func(k string) error {
		i := fieldIndex(fields, k)
		if f.Seen(d, k, i) {
			d.NoteDup()
		}
		return member(k, i)
	})
}

// arrayOf reads the array of field (null reads as none), each element into a T appended to the
// result by read; capacity, when not 0, is the room made for the elements first.
func arrayOf[T any](d *Decoder, field string, capacity int, read func(*T) error) ([]T, error) {
	ok, err := d.Array(field)
	if err != nil || !ok {
		return nil, err
	}
	var out []T
	if capacity > 0 {
		out = make([]T, 0, capacity)
	}
	var zero T
	err = d.Elems(func() error {
		out = append(out, zero)
		return read(&out[len(out)-1])
	})
	return out, err
}

// Leniently starts reading a field of several shapes into l (reset first: a field given again
// replaces what was read): null (false), a string (into l.Str, false), or a value of kind want,
// whose first byte it consumes (true); any other value is skipped as of shape s and sets l.Bad
// (false).
func Leniently[T any](d *Decoder, l *Lenient[T], want jsontext.Kind, s Shape) (bool, error) {
	*l = Lenient[T]{}
	var err error
	switch k := d.Peek(); k {
	case jsontext.KindNull:
		_, err = d.Literal()
		return false, err
	case jsontext.KindString:
		l.Given, l.IsStr = true, true
		l.Str, err = d.Str()
		return false, err
	case want:
		l.Given = true
		d.Pos++
		return true, nil
	}
	l.Given, l.Bad = true, true
	return false, d.Skip(s)
}

// Null consumes a null at the position, if there is one.
func (d *Decoder) Null() (bool, error) {
	if d.Peek() != jsontext.KindNull {
		return false, nil
	}
	_, err := d.Literal()
	return err == nil, err
}

// String reads a string for field; ok is false for null.
func (d *Decoder) String(field string) (s string, ok bool, err error) {
	if ok, err = d.given(field, jsontext.KindString); !ok {
		return "", false, err
	}
	s, err = d.Str()
	return s, err == nil, err
}

// Int reads an integer for field; ok is false for null. A number that is not an integer is of
// the wrong type ("number 1.5"), as encoding/json has it.
func (d *Decoder) Int(field string) (v int, ok bool, err error) {
	lit, ok, err := d.number(field)
	if !ok {
		return 0, false, err
	}
	n, perr := strconv.ParseInt(lit, 10, 0)
	if perr != nil {
		return 0, false, &wrongType{Field: field, Value: "number " + lit}
	}
	return int(n), true, nil
}

// Float reads a number for field; nil for null.
func (d *Decoder) Float(field string) (*float64, error) {
	lit, ok, err := d.number(field)
	if !ok {
		return nil, err
	}
	f, perr := strconv.ParseFloat(lit, 64)
	if perr != nil {
		return nil, &wrongType{Field: field, Value: "number " + lit}
	}
	return &f, nil
}

func (d *Decoder) number(field string) (string, bool, error) {
	if ok, err := d.given(field, jsontext.KindNumber); !ok {
		return "", false, err
	}
	lit, err := d.Number()
	return lit, err == nil, err
}

// Bool reads a boolean for field; ok is false for null.
func (d *Decoder) Bool(field string) (v, ok bool, err error) {
	if ok, err = d.given(field, jsontext.KindBool); !ok {
		return false, false, err
	}
	lit, err := d.Literal()
	return lit == "true", err == nil, err
}

// Raw reads any value and returns its text, checking names given twice in it exactly.
func (d *Decoder) Raw() (string, error) {
	d.WS()
	start := d.Pos
	err := d.Skip(ShapeRaw)
	return d.Text[start:d.Pos], err
}
