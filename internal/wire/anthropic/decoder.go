package anthropic

import (
	"math"
	"strconv"
	"strings"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// decoder turns scanner errors and type mismatches into client errors that name the field. The
// walker keeps the path of the value being read (enter before a value, leave after it), so that
// errors can name "messages.1.content.0.text" while the happy path builds no strings. On an
// error the path is left as it is: decoding stops there.
type decoder struct {
	jsontext.Walker
	// texts is where the one-block contents of a request (a message or system prompt given as a
	// string) are carved from: one allocation for several messages instead of one each.
	texts []llm.Block
}

func newDecoder(s string) decoder {
	return decoder{Walker: jsontext.Walker{Scanner: jsontext.Scanner{Text: s, MaxDepth: maxDepth}}}
}

// maxNamed bounds the segments an error names: deeper ones (a name given twice far down a tool's
// schema) are left out.
const maxNamed = 12

// oneText returns a content of one text block holding s, carved from d.texts with its capacity
// capped at its length, so that an append by a later stage copies it instead of writing over
// the next message's block.
func (d *decoder) oneText(s string) []llm.Block {
	if len(d.texts) == cap(d.texts) {
		// The first array has room for a block per KiB of the body: a conversation of a
		// dozen messages of a paragraph each fits it, where growing from 4 took two.
		d.texts = make([]llm.Block, 0, min(max(4, 2*cap(d.texts), len(d.Text)>>10), 64))
	}
	d.texts = append(d.texts, llm.Block{Type: llm.BlockText, Text: s})
	n := len(d.texts)
	return d.texts[n-1 : n : n]
}

// where returns the dotted path of the current value, "body" for the top level.
func (d *decoder) where() string {
	if d.Depth() == 0 {
		return "body"
	}
	var b []byte
	for i := range min(d.Depth(), maxNamed) {
		if i > 0 {
			b = append(b, '.')
		}
		switch sg := d.Seg(i); {
		case sg.Index >= 0:
			b = strconv.AppendInt(b, int64(sg.Index), 10)
		case sg.Key == "":
			b = append(b, `""`...) // a member named "" still gets a visible name
		default:
			b = append(b, sg.Key...)
		}
	}
	return string(b)
}

// fail returns an invalid_request_error about the current value.
func (d *decoder) fail(format string, args ...any) error {
	return apierr.Invalid(d.where(), format, args...)
}

// failAt returns an invalid_request_error about the member key of the current object.
func (d *decoder) failAt(key, format string, args ...any) error {
	d.Enter(key)
	return d.fail(format, args...)
}

func (d *decoder) extra() error { return d.fail("extra inputs are not permitted") }

func (d *decoder) required(key string) error { return d.failAt(key, "field required") }

// syntax reports a scanner error found inside the current value.
func (d *decoder) syntax(err error) error {
	if de, ok := err.(*jsontext.DuplicateKeyError); ok {
		for _, sg := range de.Path {
			if sg.Index >= 0 {
				d.EnterIndex(sg.Index)
			} else {
				d.Enter(sg.Key)
			}
		}
		return d.duplicate()
	}
	se, ok := err.(*jsontext.SyntaxError)
	if !ok {
		return err
	}
	if se.BadUTF8 {
		return d.fail("string is not valid UTF-8 (byte offset %d)", se.Offset)
	}
	return d.fail("invalid JSON at byte offset %d: %s", se.Offset, se.Msg)
}

// typeErr reports a value of kind k where want was expected.
func (d *decoder) typeErr(want string, k jsontext.Kind) error {
	// A scalar of the wrong type must at least be valid JSON to be called by its type.
	var err error
	switch k {
	case jsontext.KindInvalid, jsontext.KindEOF:
		err = d.Unexpected(want)
	case jsontext.KindBool, jsontext.KindNull:
		_, err = d.Literal()
	case jsontext.KindNumber:
		_, err = d.Number()
	case jsontext.KindString:
		err = d.SkipStr()
	}
	if err != nil {
		return d.syntax(err)
	}
	return d.fail("must be %s, got %s", want, k)
}

// null consumes a null at the position, if there is one.
func (d *decoder) null() bool {
	if d.Peek() == jsontext.KindNull && strings.HasPrefix(d.Text[d.Pos:], "null") {
		d.Pos += len("null")
		return true
	}
	return false
}

// key reads the next member name and enters it; the caller leaves after the value. With seen,
// the names of the object read so far, a name given twice is refused (a caller that tracks its
// members otherwise passes nil).
func (d *decoder) key(n *int, seen *jsontext.KeySet) (string, bool, error) {
	k, ok, err := d.NextKey(n)
	if err != nil {
		return "", false, d.syntax(err)
	}
	if ok {
		d.Enter(k)
		if seen != nil && seen.Add(k) {
			return "", false, d.duplicate()
		}
	}
	return k, ok, nil
}

// duplicate reports the current member as given twice. A member given twice would be read
// last-wins here and first-wins by other parsers of the same body (an engine reached by
// pass-through, a filter in front of it): the value checked would not be the value used.
func (d *decoder) duplicate() error {
	return d.fail("duplicate key: each field may be given only once")
}

// elem moves to the next array element and enters its index; the caller leaves after it.
func (d *decoder) elem(n *int) (bool, error) {
	ok, err := d.NextElem(n)
	if err != nil {
		return false, d.syntax(err)
	}
	if ok {
		d.EnterIndex(*n - 1)
	}
	return ok, nil
}

// members reads the members of an object whose '{' was consumed, refusing a name given twice:
// each enters the member's name and reads its value (members leaves after). The errors each
// returns name their field already (syntax passes them through); the scanner's are named here,
// at the path the walker stopped at.
func (d *decoder) members(each func(k string) error) error {
	var seen jsontext.KeySet
	err := d.Members(func(k string) error {
		if seen.Add(k) {
			return d.duplicate()
		}
		return each(k)
	})
	if err != nil {
		return d.syntax(err)
	}
	return nil
}

// elems reads the elements of an array whose '[' was consumed: each reads the element, its
// index entered (elems leaves after). Errors are named as members names them.
func (d *decoder) elems(each func() error) error {
	if err := d.Elems(each); err != nil {
		return d.syntax(err)
	}
	return nil
}

func (d *decoder) object() error {
	if k := d.Peek(); k != jsontext.KindObject {
		return d.typeErr("an object", k)
	}
	d.Pos++
	return nil
}

func (d *decoder) array() error {
	if k := d.Peek(); k != jsontext.KindArray {
		return d.typeErr("an array", k)
	}
	d.Pos++
	return nil
}

func (d *decoder) skipValue() error {
	if k := d.Peek(); k == jsontext.KindInvalid || k == jsontext.KindEOF {
		return d.typeErr("a value", k)
	}
	if err := d.SkipUnique(1); err != nil {
		return d.syntax(err)
	}
	return nil
}

func (d *decoder) readString() (string, error) {
	if k := d.Peek(); k != jsontext.KindString {
		return "", d.typeErr("a string", k)
	}
	s, err := d.Str()
	if err != nil {
		return "", d.syntax(err)
	}
	return s, nil
}

// readOptString reads a string or null (as "").
func (d *decoder) readOptString() (string, error) {
	if d.null() {
		return "", nil
	}
	return d.readString()
}

// readBool reads a boolean or null (as false).
func (d *decoder) readBool() (bool, error) {
	if d.null() {
		return false, nil
	}
	if k := d.Peek(); k != jsontext.KindBool {
		return false, d.typeErr("a boolean", k)
	}
	lit, err := d.Literal()
	if err != nil {
		return false, d.syntax(err)
	}
	return lit == "true", nil
}

func (d *decoder) readNumber(want string) (string, error) {
	if k := d.Peek(); k != jsontext.KindNumber {
		return "", d.typeErr(want, k)
	}
	lit, err := d.Number()
	if err != nil {
		return "", d.syntax(err)
	}
	return lit, nil
}

// readInt reads an integer in [lo, maxInt32]. Integral values written with a fraction or an
// exponent (1024.0, 1e3) are accepted, as the real API accepts them.
func (d *decoder) readInt(lo int64) (int, error) {
	lit, err := d.readNumber("an integer")
	if err != nil {
		return 0, err
	}
	v, ok := parseInt(lit)
	switch {
	case !ok:
		return 0, d.fail("must be an integer, got %s", clip(lit))
	case v > maxInt32:
		return 0, d.fail("must be at most %d, got %s", maxInt32, clip(lit))
	case v < lo:
		return 0, d.fail("must be at least %d, got %s", lo, clip(lit))
	}
	return int(v), nil
}

// readFloat reads a number in [lo, hi] into *dst and returns dst, or null as nil.
func (d *decoder) readFloat(dst *float64, lo, hi float64) (*float64, error) {
	if d.null() {
		return nil, nil
	}
	lit, err := d.readNumber("a number")
	if err != nil {
		return nil, err
	}
	v, perr := strconv.ParseFloat(lit, 64)
	if perr != nil || v < lo || v > hi {
		return nil, d.fail("must be between %g and %g, got %s", lo, hi, clip(lit))
	}
	*dst = v
	return dst, nil
}

// parseInt parses a JSON number literal as an integer, saturating far beyond the int32 range;
// ok is false when the value is not integral.
func parseInt(lit string) (v int64, ok bool) {
	const sat = 1 << 40
	if strings.IndexAny(lit, ".eE") < 0 {
		neg := lit[0] == '-'
		digits := lit
		if neg {
			digits = lit[1:]
		}
		for i := 0; i < len(digits) && v < sat; i++ {
			v = v*10 + int64(digits[i]-'0')
		}
		v = min(v, sat)
		if neg {
			v = -v
		}
		return v, true
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err == nil && f != math.Trunc(f) {
		return 0, false
	}
	// A range error is ±Inf or an underflow to 0, both handled by the clamps below.
	return int64(max(min(f, sat), -sat)), true
}

// clip shortens a number literal for an error message.
func clip(lit string) string {
	if len(lit) > 32 {
		return lit[:32] + "..."
	}
	return lit
}

// clipString shortens a client string quoted in an error message.
func clipString(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
