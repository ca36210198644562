package anthropic

import (
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// kind is the JSON type of the value at the scanner's position, judged by its first byte.
type kind uint8

const (
	kindInvalid kind = iota // a byte no JSON value starts with
	kindEOF                 // end of input
	kindString
	kindNumber
	kindObject
	kindArray
	kindBool
	kindNull
)

// String names the kind as error messages do ("must be a string, got number").
func (k kind) String() string {
	switch k {
	case kindString:
		return "string"
	case kindNumber:
		return "number"
	case kindObject:
		return "object"
	case kindArray:
		return "array"
	case kindBool:
		return "boolean"
	case kindNull:
		return "null"
	case kindEOF:
		return "end of input"
	}
	return "invalid JSON"
}

// syntaxError is a JSON syntax error at a byte offset of the input. badUTF8 marks a string that
// is not valid UTF-8, which the decoder reports as such rather than as a syntax error.
type syntaxError struct {
	off     int
	msg     string
	badUTF8 bool
}

func (e *syntaxError) Error() string {
	return "anthropic: invalid JSON at byte offset " + strconv.Itoa(e.off) + ": " + e.msg
}

// scanner reads JSON from a string. Each method consumes one token or value, leaving i after
// it; whitespace before a value is skipped by peek. Strings without escapes are returned as
// substrings of s, so reading them costs nothing.
type scanner struct {
	s string
	i int
}

func (d *scanner) errAt(off int, msg string) error { return &syntaxError{off: off, msg: msg} }

func (d *scanner) ws() {
	for d.i < len(d.s) {
		switch d.s[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// peek skips whitespace and returns the kind of the next value without consuming it.
func (d *scanner) peek() kind {
	d.ws()
	if d.i >= len(d.s) {
		return kindEOF
	}
	switch c := d.s[d.i]; c {
	case '"':
		return kindString
	case '{':
		return kindObject
	case '[':
		return kindArray
	case 't', 'f':
		return kindBool
	case 'n':
		return kindNull
	default:
		if c == '-' || c >= '0' && c <= '9' {
			return kindNumber
		}
	}
	return kindInvalid
}

// unexpected reports the byte at the position (or the end of input) as a syntax error.
func (d *scanner) unexpected(what string) error {
	if d.i >= len(d.s) {
		return d.errAt(d.i, "unexpected end of input, expected "+what)
	}
	return d.errAt(d.i, "unexpected "+strconv.QuoteRune(rune(d.s[d.i]))+", expected "+what)
}

// str reads a string at the position (which holds '"').
func (d *scanner) str() (string, error) {
	s := d.s
	start := d.i + 1
	for i := start + jsontext.PlainRun(s[start:]); i < len(s); {
		c := s[i]
		if jsontext.Safe(c) {
			i++
			continue
		}
		switch {
		case c == '"':
			d.i = i + 1
			return s[start:i], nil
		case c == '\\':
			return d.strEscaped(start, i, true)
		case c < 0x20:
			return "", d.errAt(i, "control character in string")
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			return "", &syntaxError{off: i, msg: "string is not valid UTF-8", badUTF8: true}
		}
		i += n
	}
	return "", d.errAt(len(s), "unterminated string")
}

// skipStr validates a string at the position without building it.
func (d *scanner) skipStr() error {
	_, err := d.strEscaped(d.i+1, d.i+1, false)
	return err
}

// strEscaped reads the rest of a string from i, where the first escape (or the start) is,
// decoding escapes into a new string when build is set. Lone surrogates become U+FFFD, as
// encoding/json does, so the result is always valid UTF-8.
func (d *scanner) strEscaped(start, i int, build bool) (string, error) {
	s := d.s
	var buf []byte
	if build {
		buf = make([]byte, 0, i-start+16)
		buf = append(buf, s[start:i]...)
	}
	for i < len(s) {
		c := s[i]
		if jsontext.Safe(c) {
			if build {
				buf = append(buf, c)
			}
			i++
			continue
		}
		switch {
		case c == '"':
			d.i = i + 1
			return string(buf), nil
		case c < 0x20:
			return "", d.errAt(i, "control character in string")
		case c >= utf8.RuneSelf:
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				return "", &syntaxError{off: i, msg: "string is not valid UTF-8", badUTF8: true}
			}
			if build {
				buf = append(buf, s[i:i+n]...)
			}
			i += n
			continue
		}
		// c == '\\'
		if i+1 >= len(s) {
			break
		}
		var r rune
		switch e := s[i+1]; e {
		case '"', '\\', '/':
			r = rune(e)
		case 'b':
			r = '\b'
		case 'f':
			r = '\f'
		case 'n':
			r = '\n'
		case 'r':
			r = '\r'
		case 't':
			r = '\t'
		case 'u':
			r = hex4(s, i+2)
			if r < 0 {
				return "", d.errAt(i, `invalid \u escape in string`)
			}
			i += 6
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if i+1 < len(s) && s[i] == '\\' && s[i+1] == 'u' {
					r2 = hex4(s, i+2)
				}
				if pair := utf16.DecodeRune(r, r2); pair != utf8.RuneError {
					r = pair
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			if build {
				buf = utf8.AppendRune(buf, r)
			}
			continue
		default:
			return "", d.errAt(i, "invalid escape in string")
		}
		if build {
			buf = append(buf, byte(r))
		}
		i += 2
	}
	return "", d.errAt(len(s), "unterminated string")
}

// hex4 decodes the four hex digits at s[i:], or returns -1.
func hex4(s string, i int) rune {
	if i+4 > len(s) {
		return -1
	}
	var r rune
	for _, c := range []byte(s[i : i+4]) {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// number reads a number at the position and returns its literal text.
func (d *scanner) number() (string, error) {
	s := d.s
	start, i := d.i, d.i
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	default:
		return "", d.errAt(i, "invalid number")
	}
	if i < len(s) && s[i] == '.' {
		i++
		j := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == j {
			return "", d.errAt(i, "invalid number: no digits after the decimal point")
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == j {
			return "", d.errAt(i, "invalid number: no digits in the exponent")
		}
	}
	d.i = i
	return s[start:i], nil
}

// literal consumes true, false or null at the position, returning which.
func (d *scanner) literal() (string, error) {
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(d.s)-d.i >= len(lit) && d.s[d.i:d.i+len(lit)] == lit {
			d.i += len(lit)
			return lit, nil
		}
	}
	return "", d.errAt(d.i, "invalid literal")
}

// nextKey reads the next member name of an object whose '{' was consumed, and the ':' after
// it. n counts the members read so far; ok is false at the closing '}', which is consumed.
func (d *scanner) nextKey(n *int) (key string, ok bool, err error) {
	d.ws()
	if d.i >= len(d.s) {
		return "", false, d.unexpected("'}' or a member")
	}
	c := d.s[d.i]
	if c == '}' {
		d.i++
		return "", false, nil
	}
	if *n > 0 {
		if c != ',' {
			return "", false, d.unexpected("',' or '}'")
		}
		d.i++
		d.ws()
		if d.i >= len(d.s) {
			return "", false, d.unexpected("a member name")
		}
	}
	if d.s[d.i] != '"' {
		return "", false, d.unexpected("a member name in double quotes")
	}
	key, err = d.str()
	if err != nil {
		return "", false, err
	}
	d.ws()
	if d.i >= len(d.s) || d.s[d.i] != ':' {
		return "", false, d.unexpected("':'")
	}
	d.i++
	*n++
	return key, true, nil
}

// nextElem moves to the next element of an array whose '[' was consumed. n counts the elements
// so far; ok is false at the closing ']', which is consumed.
func (d *scanner) nextElem(n *int) (ok bool, err error) {
	d.ws()
	if d.i >= len(d.s) {
		return false, d.unexpected("']' or a value")
	}
	c := d.s[d.i]
	if c == ']' {
		d.i++
		return false, nil
	}
	if *n > 0 {
		if c != ',' {
			return false, d.unexpected("',' or ']'")
		}
		d.i++
	}
	*n++
	return true, nil
}

// skip validates and consumes one value of any type. depth is the nesting depth of the value.
func (d *scanner) skip(depth int) error {
	switch d.peek() {
	case kindString:
		return d.skipStr()
	case kindNumber:
		_, err := d.number()
		return err
	case kindBool, kindNull:
		_, err := d.literal()
		return err
	case kindObject:
		if depth >= maxDepth {
			return d.errAt(d.i, "nesting too deep")
		}
		d.i++
		for n := 0; ; {
			_, ok, err := d.nextKey(&n)
			if err != nil {
				return err
			}
			if !ok {
				return nil
			}
			if err := d.skip(depth + 1); err != nil {
				return err
			}
		}
	case kindArray:
		if depth >= maxDepth {
			return d.errAt(d.i, "nesting too deep")
		}
		d.i++
		for n := 0; ; {
			ok, err := d.nextElem(&n)
			if err != nil {
				return err
			}
			if !ok {
				return nil
			}
			if err := d.skip(depth + 1); err != nil {
				return err
			}
		}
	}
	return d.unexpected("a value")
}

// end checks that only whitespace follows the top-level value.
func (d *scanner) end() error {
	d.ws()
	if d.i < len(d.s) {
		return d.errAt(d.i, "unexpected data after the top-level value")
	}
	return nil
}

// compact copies the valid JSON text s without insignificant whitespace.
func compact(s string) []byte {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			j := i + 1
			for j < len(s) && s[j] != '"' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			out = append(out, s[i:j+1]...)
			i = j
			continue
		}
		out = append(out, c)
	}
	return out
}
