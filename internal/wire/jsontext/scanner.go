package jsontext

import (
	"bytes"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Kind is the JSON type of the value at a Scanner's position, judged by its first byte.
type Kind uint8

// The kinds of value Peek tells apart.
const (
	KindInvalid Kind = iota // a byte no JSON value starts with
	KindEOF                 // end of input
	KindString
	KindNumber
	KindObject
	KindArray
	KindBool
	KindNull
)

// String names the kind as error messages do ("must be a string, got number").
func (k Kind) String() string {
	switch k {
	case KindString:
		return "string"
	case KindNumber:
		return "number"
	case KindObject:
		return "object"
	case KindArray:
		return "array"
	case KindBool:
		return "boolean"
	case KindNull:
		return "null"
	case KindEOF:
		return "end of input"
	}
	return "invalid JSON"
}

// SyntaxError is a JSON syntax error at a byte offset of a Scanner's input. BadUTF8 marks a
// string that is not valid UTF-8, which decoders report as such rather than as a syntax error.
type SyntaxError struct {
	Offset  int
	Msg     string
	BadUTF8 bool
}

func (e *SyntaxError) Error() string {
	return "jsontext: invalid JSON at byte offset " + strconv.Itoa(e.Offset) + ": " + e.Msg
}

// Scanner reads JSON text one token or value at a time, checking it completely as RFC 8259
// writes it (syntax, escapes, numbers, UTF-8), for the hand-written decoders. Each method
// consumes what it reads, leaving Pos after it; whitespace before a value is skipped by Peek.
// Strings without escapes are returned as substrings of Text, so reading them costs nothing.
type Scanner struct {
	Text string // the input
	Pos  int    // the byte offset of the next thing to read
	// MaxDepth bounds the nesting Skip accepts; 0 is Valid's bound (1024).
	MaxDepth int
	// AnyBytes lets strings hold bytes that are not UTF-8, as encoding/json lets them through
	// (reading each as U+FFFD), for a reader that must accept what encoding/json accepted. Str
	// then returns such bytes as they are.
	AnyBytes bool
}

// ErrAt returns a *SyntaxError at off.
func (d *Scanner) ErrAt(off int, msg string) error { return &SyntaxError{Offset: off, Msg: msg} }

// WS skips whitespace.
func (d *Scanner) WS() { d.Pos = skipWS(d.Text, d.Pos) }

// Peek skips whitespace and returns the kind of the next value without consuming it.
func (d *Scanner) Peek() Kind {
	d.WS()
	if d.Pos >= len(d.Text) {
		return KindEOF
	}
	switch c := d.Text[d.Pos]; c {
	case '"':
		return KindString
	case '{':
		return KindObject
	case '[':
		return KindArray
	case 't', 'f':
		return KindBool
	case 'n':
		return KindNull
	default:
		if c == '-' || c >= '0' && c <= '9' {
			return KindNumber
		}
	}
	return KindInvalid
}

// Unexpected reports the byte at the position (or the end of input) as a syntax error.
func (d *Scanner) Unexpected(what string) error {
	if d.Pos >= len(d.Text) {
		return d.ErrAt(d.Pos, "unexpected end of input, expected "+what)
	}
	return d.ErrAt(d.Pos, "unexpected "+strconv.QuoteRune(rune(d.Text[d.Pos]))+", expected "+what)
}

// Str reads the string at the position (which holds '"') and returns its value. A string
// without escapes is a substring of Text; one with escapes is decoded into a new string, lone
// surrogates as U+FFFD (as encoding/json does), so the result is always valid UTF-8 (unless
// AnyBytes let other bytes through).
func (d *Scanner) Str() (string, error) {
	start := d.Pos + 1
	end, esc, err := d.scanStr(start)
	if err != nil {
		return "", err
	}
	d.Pos = end + 1
	if !esc {
		return d.Text[start:end], nil
	}
	return string(unescape(make([]byte, 0, end-start), d.Text[start:end])), nil
}

// SkipStr checks the string at the position without building its value.
func (d *Scanner) SkipStr() error {
	end, _, err := d.scanStr(d.Pos + 1)
	if err != nil {
		return err
	}
	d.Pos = end + 1
	return nil
}

func (d *Scanner) scanStr(i int) (end int, esc bool, err error) {
	end, esc, f := stringEnd(d.Text, i, !d.AnyBytes)
	if f == fNone {
		return end, esc, nil
	}
	if f == fEnd {
		end = len(d.Text)
	}
	return 0, false, &SyntaxError{Offset: end, Msg: f.String(), BadUTF8: f == fUTF8}
}

// Number reads the number at the position and returns its literal text.
func (d *Scanner) Number() (string, error) {
	start := d.Pos
	end, f := numberEnd(d.Text, start)
	if f != fNone {
		return "", d.ErrAt(end, f.String())
	}
	d.Pos = end
	return d.Text[start:end], nil
}

// Literal consumes true, false or null at the position, returning which.
func (d *Scanner) Literal() (string, error) {
	for _, lit := range [...]string{"true", "false", "null"} {
		if literalEnd(d.Text, d.Pos, lit) > 0 {
			d.Pos += len(lit)
			return lit, nil
		}
	}
	return "", d.ErrAt(d.Pos, "invalid literal")
}

// NextKey reads the next member name of an object whose '{' was consumed, and the ':' after
// it. n counts the members read so far; ok is false at the closing '}', which is consumed.
func (d *Scanner) NextKey(n *int) (key string, ok bool, err error) {
	d.WS()
	if d.Pos >= len(d.Text) {
		return "", false, d.Unexpected("'}' or a member")
	}
	c := d.Text[d.Pos]
	if c == '}' {
		d.Pos++
		return "", false, nil
	}
	if *n > 0 {
		if c != ',' {
			return "", false, d.Unexpected("',' or '}'")
		}
		d.Pos++
		d.WS()
		if d.Pos >= len(d.Text) {
			return "", false, d.Unexpected("a member name")
		}
	}
	if d.Text[d.Pos] != '"' {
		return "", false, d.Unexpected("a member name in double quotes")
	}
	key, err = d.Str()
	if err != nil {
		return "", false, err
	}
	d.WS()
	if d.Pos >= len(d.Text) || d.Text[d.Pos] != ':' {
		return "", false, d.Unexpected("':'")
	}
	d.Pos++
	*n++
	return key, true, nil
}

// NextRawKey is NextKey without decoding the name: it returns the name as it stands between
// its quotes, and whether it holds a backslash escape (KeyFolds compares such a name), so that
// reading an object allocates nothing whatever its names. NextKey keeps its own copy of the
// steps around the name, so that the decoders, which call it for every member, pay no call more.
func (d *Scanner) NextRawKey(n *int) (raw string, esc, ok bool, err error) {
	d.WS()
	if d.Pos >= len(d.Text) {
		return "", false, false, d.Unexpected("'}' or a member")
	}
	c := d.Text[d.Pos]
	if c == '}' {
		d.Pos++
		return "", false, false, nil
	}
	if *n > 0 {
		if c != ',' {
			return "", false, false, d.Unexpected("',' or '}'")
		}
		d.Pos++
		d.WS()
		if d.Pos >= len(d.Text) {
			return "", false, false, d.Unexpected("a member name")
		}
	}
	if d.Text[d.Pos] != '"' {
		return "", false, false, d.Unexpected("a member name in double quotes")
	}
	start := d.Pos + 1
	end, esc, err := d.scanStr(start)
	if err != nil {
		return "", false, false, err
	}
	d.Pos = end + 1
	d.WS()
	if d.Pos >= len(d.Text) || d.Text[d.Pos] != ':' {
		return "", false, false, d.Unexpected("':'")
	}
	d.Pos++
	*n++
	return d.Text[start:end], esc, true, nil
}

// NextElem moves to the next element of an array whose '[' was consumed. n counts the elements
// so far; ok is false at the closing ']', which is consumed.
func (d *Scanner) NextElem(n *int) (ok bool, err error) {
	d.WS()
	if d.Pos >= len(d.Text) {
		return false, d.Unexpected("']' or a value")
	}
	c := d.Text[d.Pos]
	if c == ']' {
		d.Pos++
		return false, nil
	}
	if *n > 0 {
		if c != ',' {
			return false, d.Unexpected("',' or ']'")
		}
		d.Pos++
	}
	*n++
	return true, nil
}

// Skip checks and consumes one value of any type. depth is the nesting depth of the value;
// deeper than MaxDepth is an error.
func (d *Scanner) Skip(depth int) error {
	switch k := d.Peek(); k {
	case KindString:
		return d.SkipStr()
	case KindNumber:
		_, err := d.Number()
		return err
	case KindBool, KindNull:
		_, err := d.Literal()
		return err
	case KindObject, KindArray:
		if err := d.deeper(depth); err != nil {
			return err
		}
		for n := 0; ; {
			ok, err := d.next(k, &n)
			if err != nil || !ok {
				return err
			}
			if err := d.Skip(depth + 1); err != nil {
				return err
			}
		}
	}
	return d.Unexpected("a value")
}

// next moves to the value of the next member of an object (k KindObject) or to the next element
// of an array whose opening was consumed, as NextKey or NextElem does; ok is false at the end.
func (d *Scanner) next(k Kind, n *int) (ok bool, err error) {
	if k == KindObject {
		_, ok, err = d.NextKey(n)
		return ok, err
	}
	return d.NextElem(n)
}

// Members reads the members of an object whose '{' was consumed: member reads the value of
// each, given its name. It returns the first error, the text's or member's.
func (d *Scanner) Members(member func(k string) error) error { return d.members(nil, member) }

// members is the loop of Scanner.Members and Walker.Members: with p, each name is entered on it
// while member reads the value, and left after.
func (d *Scanner) members(p *Path, member func(k string) error) error {
	for n := 0; ; {
		k, ok, err := d.NextKey(&n)
		if err != nil || !ok {
			return err
		}
		if p != nil {
			p.Enter(k)
		}
		if err := member(k); err != nil {
			return err
		}
		if p != nil {
			p.Leave()
		}
	}
}

// deeper consumes the '{' or '[' of a container at depth, unless that is too deep.
func (d *Scanner) deeper(depth int) error {
	limit := d.MaxDepth
	if limit == 0 {
		limit = maxDepth
	}
	if depth >= limit {
		return d.ErrAt(d.Pos, "nesting too deep")
	}
	d.Pos++
	return nil
}

// End checks that only whitespace follows the top-level value.
func (d *Scanner) End() error {
	d.WS()
	if d.Pos < len(d.Text) {
		return d.ErrAt(d.Pos, "unexpected data after the top-level value")
	}
	return nil
}

// Compact copies the valid JSON text s without insignificant whitespace.
func Compact(s string) []byte {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			j, _, f := stringEnd(s, i+1, false)
			if f != fNone {
				j = len(s) - 1
			}
			out = append(out, s[i:j+1]...)
			i = j
			continue
		}
		out = append(out, c)
	}
	return out
}

// fault is what stringEnd or numberEnd found wrong.
type fault uint8

const (
	fNone fault = iota
	fEnd        // the string has no closing quote
	fControl
	fEscape
	fUnicode
	fUTF8
	fNumber
	fFraction
	fExponent
)

func (f fault) String() string {
	return [...]string{"", "unterminated string", "control character in string", "invalid escape in string",
		`invalid \u escape in string`, "string is not valid UTF-8", "invalid number",
		"invalid number: no digits after the decimal point", "invalid number: no digits in the exponent"}[f]
}

// stringEnd checks the inside of the string that starts at s[i] (just after its opening quote)
// and returns the index of its closing quote, and whether it holds a backslash escape. On a
// fault it returns the fault and its offset as end. checkUTF8 also refuses bytes that are not
// UTF-8.
//
// Runs of plain ASCII are checked sixteen bytes at a time (PlainRun). A run longer than longRun
// is text, not a key or a short value: there the next quote, and the next backslash before it,
// are found with strings.IndexByte (vector instructions, each byte searched at most twice), and
// between them only controls and non-ASCII bytes need a look (asciiRun, a cheaper test).
func stringEnd(s string, i int, checkUTF8 bool) (end int, esc bool, f fault) {
	q, bs := -1, -1 // in long text: the next '"' at or after i (len(s) when none), the next '\\' before it (q when none)
	for {
		j := i + PlainRun(s[i:min(len(s), i+longRun)])
		if j-i == longRun {
			if q < j {
				q = indexFrom(s, j, '"')
			}
			if bs < j {
				if bs = j + strings.IndexByte(s[j:q], '\\'); bs < j {
					bs = q
				}
			}
			j += asciiRun(s[j:bs])
		}
		for i = j; i < len(s) && safe[s[i]]; i++ {
		}
		if i >= len(s) {
			return len(s), esc, fEnd
		}
		switch c := s[i]; {
		case c == '"':
			return i, esc, fNone
		case c == '\\':
			esc = true
			if i+1 >= len(s) {
				return len(s), esc, fEnd
			}
			switch s[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if hex4(s, i+2) < 0 {
					return i, esc, fUnicode
				}
				i += 6
			default:
				return i, esc, fEscape
			}
		case c < 0x20:
			return i, esc, fControl
		case !checkUTF8:
			i++
		default:
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				return i, esc, fUTF8
			}
			i += n
		}
	}
}

// longRun is how many plain bytes make a string long text (see stringEnd).
const longRun = 64

// indexFrom returns the index of the first c in s at or after i, or len(s).
func indexFrom(s string, i int, c byte) int {
	if j := strings.IndexByte(s[i:], c); j >= 0 {
		return i + j
	}
	return len(s)
}

// unescape appends the value of the inside of a string that stringEnd checked: escapes
// decoded, lone surrogates as U+FFFD.
func unescape(buf []byte, s string) []byte {
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && s[j] != '\\' {
			j++
		}
		buf = append(buf, s[i:j]...)
		if j+1 >= len(s) {
			return buf
		}
		var r rune
		r, i = escaped(s, j)
		if r < utf8.RuneSelf {
			buf = append(buf, byte(r))
		} else {
			buf = utf8.AppendRune(buf, r)
		}
	}
	return buf
}

// escaped decodes the escape at s[j] (a backslash) of a string that stringEnd checked, and
// returns the character and the index after the escape: a surrogate pair is one character, and
// a lone surrogate is U+FFFD, as encoding/json reads them.
func escaped(s string, j int) (r rune, next int) {
	switch e := s[j+1]; e {
	case 'b':
		return '\b', j + 2
	case 'f':
		return '\f', j + 2
	case 'n':
		return '\n', j + 2
	case 'r':
		return '\r', j + 2
	case 't':
		return '\t', j + 2
	case 'u':
		r, next = hex4(s, j+2), j+6
		if !utf16.IsSurrogate(r) {
			return r, next
		}
		r2 := rune(-1)
		if next+1 < len(s) && s[next] == '\\' && s[next+1] == 'u' {
			r2 = hex4(s, next+2)
		}
		if pair := utf16.DecodeRune(r, r2); pair != utf8.RuneError {
			return pair, next + 6
		}
		return utf8.RuneError, next
	default: // '"', '\\', '/'
		return rune(e), j + 2
	}
}

// KeyFolds reports whether a member name, raw as it stands between its quotes in text a Scanner
// checked, matches name (valid UTF-8) as encoding/json matches a name to a struct field's:
// equal under Unicode simple case folding, as strings.EqualFold compares, once its escapes are
// decoded, each byte that is not UTF-8 and each lone surrogate read as U+FFFD. So "Prompt_Tokens"
// matches "prompt_tokens", and so does a name spelled with the Kelvin sign (U+212A) for its k.
// It allocates nothing, where decoding the name to compare it would for an escape.
func KeyFolds(raw, name string) bool {
	j := 0
	for i := 0; i < len(raw); {
		var r rune
		switch c := raw[i]; {
		case c == '\\':
			if i+1 >= len(raw) || raw[i+1] == 'u' && i+6 > len(raw) {
				return false // a cut escape: no name a Scanner checked, matching none
			}
			r, i = escaped(raw, i)
		case c < utf8.RuneSelf:
			r = rune(c)
			i++
		default:
			var n int
			r, n = utf8.DecodeRuneInString(raw[i:])
			i += n
		}
		if j >= len(name) {
			return false
		}
		s, n := utf8.DecodeRuneInString(name[j:])
		j += n
		if r != s && !sameFold(r, s) {
			return false
		}
	}
	return j == len(name)
}

// sameFold reports whether r and s lie in one orbit of unicode.SimpleFold: whether they are
// the same letter ignoring case, as strings.EqualFold judges.
func sameFold(r, s rune) bool {
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if f == s {
			return true
		}
	}
	return false
}

// hex4 decodes the four hex digits at s[i:], or returns -1.
func hex4[T ~string | ~[]byte](s T, i int) rune {
	if i < 0 || i+4 > len(s) {
		return -1
	}
	var r rune
	for k := i; k < i+4; k++ {
		c := s[k]
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

// HasLoneSurrogate reports whether the JSON text raw has a \u escape of a UTF-16 surrogate that
// is not a high surrogate followed by a low one: a value a decoder replaces with U+FFFD, so that
// two different texts would read the same.
func HasLoneSurrogate(raw []byte) bool {
	for i := 0; i < len(raw); {
		j := bytes.IndexByte(raw[i:], '\\')
		if j < 0 || i+j+1 >= len(raw) {
			return false
		}
		i += j
		if raw[i+1] != 'u' {
			i += 2 // \", \\, \n…: the escaped character starts no escape
			continue
		}
		r := hex4(raw, i+2)
		i += 6
		if r < 0 || !utf16.IsSurrogate(r) {
			continue
		}
		if r >= 0xDC00 || i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
			return true // a low surrogate first, or a high one not followed by an escape
		}
		if lo := hex4(raw, i+2); lo < 0xDC00 || lo > 0xDFFF {
			return true
		}
		i += 6
	}
	return false
}

// numberEnd checks the number at s[i] and returns the index after it, or the fault and its
// offset.
func numberEnd(s string, i int) (int, fault) {
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		i = digits(s, i)
	default:
		return i, fNumber
	}
	if i < len(s) && s[i] == '.' {
		j := digits(s, i+1)
		if j == i+1 {
			return j, fFraction
		}
		i = j
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := digits(s, i)
		if j == i {
			return j, fExponent
		}
		i = j
	}
	return i, fNone
}

func digits(s string, i int) int {
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	return i
}

// literalEnd returns the index after lit when s[i:] starts with it, else -1.
func literalEnd(s string, i int, lit string) int {
	if len(s)-i < len(lit) || s[i:i+len(lit)] != lit {
		return -1
	}
	return i + len(lit)
}
