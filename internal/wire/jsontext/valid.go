package jsontext

import (
	"unsafe"
)

// maxDepth bounds the nesting Valid accepts: deeper answers are refused (encoding/json's own
// bound is 10,000; no engine's answer nests beyond a few dozen levels).
const maxDepth = 1024

// ValidObject reports whether b is one complete JSON object, with only whitespace around it:
// every value checked as RFC 8259 writes it (strings, escapes, numbers, literals, nesting),
// not just the structure Scan checks, and its strings UTF-8 (a client's decoder would turn
// other bytes into U+FFFD without a word, where Valid, as encoding/json's, lets them through).
// It allocates nothing: the pass-through path checks every answer and every stream event with
// it before passing them on, so that a broken one is never relayed as if it were good (a
// check of the shape alone, '{' … '}', let a chunk such as {not json} through once a stream
// had begun).
func ValidObject(b []byte) bool {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	return valid(unsafe.String(unsafe.SliceData(b), len(b)), true, nil, nil, 0) // read only during the call
}

// ValidObjectMembers is ValidObject that also calls visit for each member of the top-level
// object, in order, as Scan does (the key between its quotes, esc when it holds an escape, the
// span of the value): one pass both checks an event and locates its members, where ValidObject
// and then Scan would read it twice. visit may have been called when it returns false, for the
// members before the fault. It allocates nothing.
func ValidObjectMembers(b []byte, visit func(key []byte, esc bool, start, end int)) bool {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	return valid(unsafe.String(unsafe.SliceData(b), len(b)), true, visit, nil, 0) // read only during the call
}

// maxMembers bounds the members of an object's prefix a Members remembers.
const maxMembers = 16

// Members checks a stream of JSON objects as ValidObjectMembers does, faster when they begin
// with the same members, as the chunks of an engine's stream do (the same id, object, created
// and model in every chunk of vLLM, SGLang, Ollama, TGI and the hosted API): it remembers the
// bytes of the last object up to the end of its second-last member and the byte after, and an object that starts
// with the same bytes is checked from there only, its first members' visits replayed. That is
// sound for the same reason as Renamer's prefix: a JSON reader's state after a prefix depends
// only on the prefix's bytes. The zero value is ready to use; it allocates only while its
// prefix grows.
type Members struct {
	prefix []byte               // the last object's bytes up to the end of its second-last member
	n      int                  // the members in prefix
	spans  [maxMembers]memberAt // where they are
	rec    int                  // members recorded in this pass; -1: not recording
}

// memberAt is one top-level member: its key b[ks:ke], its value b[vs:ve].
type memberAt struct {
	ks, ke, vs, ve int
	esc            bool
}

// Valid is ValidObjectMembers(b, visit), with the prefix b shares with the last object checked
// not checked again.
func (p *Members) Valid(b []byte, visit func(key []byte, esc bool, start, end int)) bool {
	s := unsafe.String(unsafe.SliceData(b), len(b)) // read only during the call
	if len(p.prefix) > 0 && len(b) > len(p.prefix) && string(b[:len(p.prefix)]) == string(p.prefix) {
		for _, m := range p.spans[:p.n] {
			visit(b[m.ks:m.ke], m.esc, m.vs, m.ve)
		}
		p.rec = -1
		return valid(s, true, visit, p, len(p.prefix)-1)
	}
	p.prefix, p.n, p.rec = p.prefix[:0], 0, 0
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' || !valid(s, true, visit, p, 0) {
		return false
	}
	if p.rec >= 2 {
		p.n = p.rec - 1
		// The byte after the member (a comma, or space) is part of the prefix: without it, a
		// number that ends the prefix could go on in the next object.
		p.prefix = append(p.prefix, b[:p.spans[p.n-1].ve+1]...)
	}
	return true
}

// Reset forgets the objects checked, as the zero value, keeping the buffer the prefix grew in
// (for a pooled checker) unless a large object grew it beyond maxKept.
func (p *Members) Reset() {
	prefix := p.prefix[:0]
	if cap(prefix) > maxKept {
		prefix = nil
	}
	*p = Members{prefix: prefix}
}

// maxKept bounds the buffer Reset keeps.
const maxKept = 64 << 10

// member records one top-level member, when recording, and visits it.
func (p *Members) member(s string, m *member, ve int, visit func(key []byte, esc bool, start, end int)) {
	if p != nil && p.rec >= 0 {
		if p.rec < maxMembers {
			p.spans[p.rec] = memberAt{m.ks, m.ke, m.vs, ve, m.esc}
			p.rec++
		} else {
			p.rec = -1
		}
	}
	visit(unsafe.Slice(unsafe.StringData(s[m.ks:]), m.ke-m.ks), m.esc, m.vs, ve)
}

// Valid reports whether b is one complete JSON value with only whitespace around it. Nesting
// deeper than 1024 levels is refused. It allocates nothing.
func Valid(b []byte) bool {
	return valid(unsafe.String(unsafe.SliceData(b), len(b)), false, nil, nil, 0) // read only during the call
}

// valid is Valid over s; with checkUTF8, the strings' bytes must be UTF-8 too (outside strings
// only ASCII is JSON, so that covers the whole text in the same pass). visit, when not nil, is
// called for each member of the top-level object once its value has been read, through p when
// not nil (Members). from > 0 resumes where a top-level member of an object ended, at s[from],
// s[:from] being known to be such a prefix.
func valid(s string, checkUTF8 bool, visit func(key []byte, esc bool, start, end int), p *Members, from int) bool {
	// stack holds one bit per open container: 1 for an object, 0 for an array.
	var stack [maxDepth / 64]uint64
	depth := 0
	m := member{ks: -1} // the top-level member being read, for visit
	i := skipWS(s, 0)
	ended := from > 0 // a value ended at s[i]
	if ended {
		stack[0], depth, i = 1, 1, from
	}
	for {
		if ended {
			ended = false
			goto end
		}
		// A value starts at s[i].
		if i >= len(s) {
			return false
		}
		switch c := s[i]; c {
		case '{', '[':
			if depth == maxDepth {
				return false
			}
			if c == '{' {
				stack[depth/64] |= 1 << (depth % 64)
			} else {
				stack[depth/64] &^= 1 << (depth % 64)
			}
			depth++
			i = skipWS(s, i+1)
			if i < len(s) && (c == '{' && s[i] == '}' || c == '[' && s[i] == ']') {
				depth--
				i++
				break
			}
			if c == '{' {
				if i = m.key(s, i, checkUTF8, depth == 1 && visit != nil); i < 0 {
					return false
				}
			}
			continue
		case '"':
			if i = validString(s, i, checkUTF8); i < 0 {
				return false
			}
		case 't':
			if i = literalEnd(s, i, "true"); i < 0 {
				return false
			}
		case 'f':
			if i = literalEnd(s, i, "false"); i < 0 {
				return false
			}
		case 'n':
			if i = literalEnd(s, i, "null"); i < 0 {
				return false
			}
		default:
			if i = validNumber(s, i); i < 0 {
				return false
			}
		}
	end:
		// A value ended at s[i]: close containers, or go on to the next member or element.
		for {
			if depth == 1 && visit != nil && m.ks >= 0 {
				p.member(s, &m, i, visit)
				m.ks = -1
			}
			i = skipWS(s, i)
			if depth == 0 {
				return i == len(s)
			}
			if i >= len(s) {
				return false
			}
			obj := stack[(depth-1)/64]&(1<<((depth-1)%64)) != 0
			switch {
			case s[i] == ',':
				i = skipWS(s, i+1)
				if obj {
					if i = m.key(s, i, checkUTF8, depth == 1 && visit != nil); i < 0 {
						return false
					}
				}
			case obj && s[i] == '}', !obj && s[i] == ']':
				depth--
				i++
				continue
			default:
				return false
			}
			break
		}
	}
}

// member is where the top-level member being read lies: its key s[ks:ke] (ks < 0: none being
// recorded), whether the key holds an escape, and where its value starts.
type member struct {
	ks, ke, vs int
	esc        bool
}

// key checks an object's key and its colon at s[i], returning where the value starts; with
// record, it notes the key and the value's start in m.
func (m *member) key(s string, i int, checkUTF8, record bool) int {
	if i >= len(s) || s[i] != '"' {
		return -1
	}
	end, esc, f := stringEnd(s, i+1, checkUTF8)
	if f != fNone {
		return -1
	}
	if record {
		m.ks, m.ke, m.esc = i+1, end, esc
	}
	i = skipWS(s, end+1)
	if i >= len(s) || s[i] != ':' {
		return -1
	}
	i = skipWS(s, i+1)
	if record {
		m.vs = i
	}
	return i
}

// validString checks the string at s[i] == '"' and returns the index after it, or -1. Bytes
// that are not UTF-8 are let through, as encoding/json's Valid does, unless checkUTF8.
func validString(s string, i int, checkUTF8 bool) int {
	end, _, f := stringEnd(s, i+1, checkUTF8)
	if f != fNone {
		return -1
	}
	return end + 1
}

// validNumber checks the number at s[i] and returns the index after it, or -1.
func validNumber(s string, i int) int {
	end, f := numberEnd(s, i)
	if f != fNone {
		return -1
	}
	return end
}

// ValidStringAt checks the JSON string that starts at b[i] (its opening quote) as ValidObject
// checks one, UTF-8 included, and returns the index after its closing quote, or -1. It lets a
// caller that knows an object's fixed shape check only its variable part.
func ValidStringAt(b []byte, i int) int {
	if i < 0 || i >= len(b) || b[i] != '"' {
		return -1
	}
	return validString(unsafe.String(unsafe.SliceData(b), len(b)), i, true) // read only during the call
}
