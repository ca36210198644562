package openai

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// dupMessage is the message of the 400 for a member name given twice.
const dupMessage = "duplicate key: each field may be given only once"

// shape is how the decoder reads the object at a place in the request. encoding/json reads a
// struct's fields matching member names ignoring case, so there two names that differ only in
// case are the same field, read last-wins, while an engine reads them as two; elsewhere (a
// schema, tool arguments, metadata: JSON passed on as it is) names are compared exactly. An
// array's elements have the array's shape.
type shape uint8

const (
	shapeRaw shape = iota
	shapeStruct
	shapeRequest
	shapeMessage
	shapePart
	shapeToolCall
	shapeTool
	shapeToolChoice
	shapeResponseFormat
)

// child returns the shape of the value of member k (its raw name) in an object of shape s.
func (s shape) child(k []byte) shape {
	is := func(field string) bool { return nameIs(k, field) }
	switch s {
	case shapeRequest:
		switch {
		case is("messages"):
			return shapeMessage
		case is("tools"):
			return shapeTool
		case is("tool_choice"):
			return shapeToolChoice
		case is("response_format"):
			return shapeResponseFormat
		case is("stream_options"):
			return shapeStruct
		}
	case shapeMessage:
		switch {
		case is("content"):
			return shapePart
		case is("tool_calls"):
			return shapeToolCall
		}
	case shapePart, shapeToolCall, shapeToolChoice:
		if is("image_url") || is("function") {
			return shapeStruct
		}
	case shapeTool:
		if is("function") {
			return shapeStruct // its parameters are raw: a struct's members are
		}
	case shapeResponseFormat:
		if is("json_schema") {
			return shapeStruct // its schema is raw
		}
	}
	return shapeRaw
}

// nameIs reports whether the raw member name k matches field (lower-case ASCII) as
// encoding/json matches names to fields: ignoring case.
func nameIs(k []byte, field string) bool {
	for _, c := range k {
		if c == '\\' || c >= utf8.RuneSelf { // rare: the general comparison
			return strings.EqualFold(unescape(k), field)
		}
	}
	if len(k) != len(field) {
		return false
	}
	for i, c := range k {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != field[i] {
			return false
		}
	}
	return true
}

// duplicateKey finds a member name given twice in one object of body, at any depth, and
// returns the path of the second occurrence as errors spell it ("messages[0].content"). body
// is valid JSON (json.Unmarshal or json.Valid accepted it); s is the shape of its top-level
// value. It allocates only for names with escapes, for objects of more than sixteen members,
// and for the path it returns.
func duplicateKey(body []byte, s shape) (string, bool) {
	w := dupWalker{b: body}
	path, found := w.value(s)
	if !found {
		return "", false
	}
	var b strings.Builder
	for i := len(path) - 1; i >= 0; i-- { // path is innermost first
		switch sg := path[i]; {
		case sg.idx >= 0:
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(sg.idx))
			b.WriteByte(']')
		default:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(unescape(sg.key))
		}
	}
	return b.String(), true
}

// dupSeg is one step of the path to a duplicate: a raw member name, or an index when idx >= 0.
type dupSeg struct {
	key []byte
	idx int
}

// dupWalker walks valid JSON text.
type dupWalker struct {
	b []byte
	i int
}

func (w *dupWalker) ws() {
	for w.i < len(w.b) && (w.b[w.i] == ' ' || w.b[w.i] == '\t' || w.b[w.i] == '\n' || w.b[w.i] == '\r') {
		w.i++
	}
}

// value walks the value at the position, of shape s; it returns the path to a duplicate
// innermost first.
func (w *dupWalker) value(s shape) ([]dupSeg, bool) {
	w.ws()
	if w.i >= len(w.b) {
		return nil, false
	}
	switch w.b[w.i] {
	case '"':
		w.i = stringEnd(w.b, w.i)
	case '{':
		return w.object(s)
	case '[':
		w.i++
		for n := 0; ; n++ {
			w.ws()
			if w.i >= len(w.b) || w.b[w.i] == ']' {
				w.i++
				return nil, false
			}
			if path, found := w.value(s); found {
				return append(path, dupSeg{idx: n}), true
			}
			w.ws()
			if w.i < len(w.b) && w.b[w.i] == ',' {
				w.i++
			}
		}
	default: // a number or a literal
		for ; w.i < len(w.b); w.i++ {
			switch w.b[w.i] {
			case ',', ']', '}', ' ', '\t', '\r', '\n':
				return nil, false
			}
		}
	}
	return nil, false
}

func (w *dupWalker) object(s shape) ([]dupSeg, bool) {
	w.i++
	var names nameSet
	names.fold = s != shapeRaw
	for {
		w.ws()
		if w.i >= len(w.b) || w.b[w.i] == '}' {
			w.i++
			return nil, false
		}
		if w.b[w.i] == ',' {
			w.i++
			w.ws()
		}
		start := w.i
		w.i = stringEnd(w.b, w.i)
		k := w.b[start+1 : w.i-1]
		if names.add(k) {
			return []dupSeg{{key: k, idx: -1}}, true
		}
		w.ws()
		w.i++ // ':'
		if path, found := w.value(s.child(k)); found {
			return append(path, dupSeg{key: k, idx: -1}), true
		}
	}
}

// nameSet holds the raw member names of one object; with fold, names equal ignoring case are
// the same. The first sixteen are compared in place, the rest in a map of their normal forms.
type nameSet struct {
	fold  bool
	n     int
	small [16][]byte
	many  map[string]struct{}
}

// add adds the raw name k and reports whether it was there already.
func (s *nameSet) add(k []byte) bool {
	if s.many == nil {
		for _, p := range s.small[:s.n] {
			if s.same(p, k) {
				return true
			}
		}
		if s.n < len(s.small) {
			s.small[s.n] = k
			s.n++
			return false
		}
		s.many = make(map[string]struct{}, 4*len(s.small))
		for _, p := range s.small {
			s.many[s.norm(p)] = struct{}{}
		}
	}
	nk := s.norm(k)
	if _, dup := s.many[nk]; dup {
		return true
	}
	s.many[nk] = struct{}{}
	return false
}

func (s *nameSet) same(a, b []byte) bool {
	if bytes.IndexByte(a, '\\') < 0 && bytes.IndexByte(b, '\\') < 0 {
		if s.fold {
			return bytes.EqualFold(a, b)
		}
		return bytes.Equal(a, b)
	}
	if s.fold {
		return strings.EqualFold(unescape(a), unescape(b))
	}
	return unescape(a) == unescape(b)
}

// norm is the map key of a raw name: unescaped, and with fold in one case (upper then lower,
// so that the characters whose fold is not their lower case meet theirs).
func (s *nameSet) norm(k []byte) string {
	n := unescape(k)
	if s.fold {
		n = strings.ToLower(strings.ToUpper(n))
	}
	return n
}

// stringEnd returns the index just past the JSON string starting at body[i] (a '"').
func stringEnd(body []byte, i int) int {
	for j := i + 1; j < len(body); j++ {
		switch body[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(body)
}

// unescape returns the raw member name k (valid JSON string content) as a string.
func unescape(k []byte) string {
	if bytes.IndexByte(k, '\\') < 0 {
		return string(k)
	}
	q := make([]byte, 0, len(k)+2)
	q = append(append(append(q, '"'), k...), '"')
	var s string
	if err := json.Unmarshal(q, &s); err != nil {
		return string(k) // cannot happen: body was valid JSON
	}
	return s
}
