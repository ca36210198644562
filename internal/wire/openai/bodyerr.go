package openai

import (
	"unicode/utf8"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// utf8Error returns the 400 for a body that is not valid UTF-8, or nil when it is. encoding/json
// would replace the bad bytes with U+FFFD and the request would go on changed; the Anthropic
// decoder refuses them, and so does this one, naming the field whose string holds the first bad
// byte. The walk to find the field runs only on this error path.
func utf8Error(body []byte) error {
	if utf8.Valid(body) {
		return nil
	}
	off := badUTF8Offset(body)
	return apierr.Invalid(fieldAt(body, off), "string is not valid UTF-8 (byte offset %d)", off)
}

// badUTF8Offset returns the offset of the first byte of body that does not start a valid
// UTF-8 sequence.
func badUTF8Offset(b []byte) int {
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// fieldAt returns the path, as OpenAI spells it ("messages[1].content[0].text"), of the value
// whose token spans offset off of the JSON body; a member name's offset names its object. It
// returns "body" when the value is the whole body or the JSON breaks before off. Bytes that are
// not UTF-8 read as '?', so that only the JSON around them decides.
func fieldAt(body []byte, off int) string {
	text := make([]byte, len(body))
	for i := 0; i < len(body); {
		r, n := utf8.DecodeRune(body[i:])
		if r == utf8.RuneError && n == 1 {
			text[i] = '?'
		} else {
			copy(text[i:], body[i:i+n])
		}
		i += n
	}
	w := pathWalker{Walker: jsontext.Walker{Scanner: jsontext.Scanner{Text: string(text), MaxDepth: maxNesting}}, off: off}
	w.value()
	if w.found == "" {
		return "body"
	}
	return w.found
}

// pathWalker walks JSON text to the token that spans an offset.
type pathWalker struct {
	jsontext.Walker
	off   int
	found string
	done  bool // found, or the JSON broke
}

// at ends the walk when the token just read spans the offset.
func (w *pathWalker) at() bool {
	if w.Pos > w.off {
		w.found, w.done = w.where(), true
	}
	return w.done
}

// where spells the path of the value being walked.
func (w *pathWalker) where() string { return pathString(w.Segments(nil)) }

func (w *pathWalker) value() {
	switch w.Peek() {
	case jsontext.KindObject:
		w.Pos++
		if w.at() {
			return
		}
		for n := 0; !w.done; {
			if w.nameEnd(n) > w.off { // a name is a token of its own, whatever follows it
				w.found, w.done = w.where(), true
				return
			}
			k, ok, err := w.NextKey(&n)
			if w.done = err != nil; !ok || w.done || w.at() {
				return
			}
			w.Enter(k)
			w.value()
			w.Leave()
		}
	case jsontext.KindArray:
		w.Pos++
		if w.at() {
			return
		}
		for n := 0; !w.done; {
			ok, err := w.NextElem(&n)
			if w.done = err != nil; !ok || w.done {
				return
			}
			w.EnterIndex(n - 1)
			w.value()
			w.Leave()
		}
	default:
		if err := w.Scanner.Skip(w.Depth()); err != nil {
			w.done = true
			return
		}
		w.at()
	}
}

// nameEnd returns the offset after the next member name of the object being walked (n names
// read), or 0 when no name comes next.
func (w *pathWalker) nameEnd(n int) int {
	s := w.Scanner
	s.WS()
	if n > 0 && s.Pos < len(s.Text) && s.Text[s.Pos] == ',' {
		s.Pos++
		s.WS()
	}
	if s.Pos >= len(s.Text) || s.Text[s.Pos] != '"' || s.SkipStr() != nil {
		return 0
	}
	return s.Pos
}
