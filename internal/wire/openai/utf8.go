package openai

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/layer0ai/layer0/internal/apierr"
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
// returns "body" when the value is the whole body or the JSON breaks before off.
func fieldAt(body []byte, off int) string {
	type frame struct {
		array   bool
		key     string // the member being read (objects)
		idx     int    // the element being read (arrays)
		wantKey bool   // the next token of an object is a member name
	}
	var stack []frame
	dec := json.NewDecoder(bytes.NewReader(body))
	path := func(n int) string {
		var b []byte
		for _, f := range stack[:n] {
			if f.array {
				b = append(b, '[')
				b = strconv.AppendInt(b, int64(f.idx), 10)
				b = append(b, ']')
				continue
			}
			if len(b) > 0 {
				b = append(b, '.')
			}
			b = append(b, f.key...)
		}
		if len(b) == 0 {
			return "body"
		}
		return string(b)
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return "body"
		}
		end := int(dec.InputOffset())
		n := len(stack)
		if n > 0 && !stack[n-1].array && stack[n-1].wantKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:n-1]
				if n > 1 && !stack[n-2].array {
					stack[n-2].wantKey = true
				}
				continue
			}
			if end > off {
				return path(n - 1)
			}
			stack[n-1].key, _ = tok.(string)
			stack[n-1].wantKey = false
			continue
		}
		if d, ok := tok.(json.Delim); ok && d == ']' {
			stack = stack[:n-1]
			if n > 1 && !stack[n-2].array {
				stack[n-2].wantKey = true
			}
			continue
		}
		// A value: an element of the array on top, or the value of the member just read.
		if n > 0 && stack[n-1].array {
			stack[n-1].idx++
		}
		if end > off {
			return path(n)
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{wantKey: true})
		case json.Delim('['):
			stack = append(stack, frame{array: true, idx: -1})
		default:
			if n > 0 && !stack[n-1].array {
				stack[n-1].wantKey = true
			}
		}
	}
}
