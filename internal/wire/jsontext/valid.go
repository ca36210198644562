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
	return valid(unsafe.String(unsafe.SliceData(b), len(b)), true) // read only during the call
}

// Valid reports whether b is one complete JSON value with only whitespace around it. Nesting
// deeper than 1024 levels is refused. It allocates nothing.
func Valid(b []byte) bool {
	return valid(unsafe.String(unsafe.SliceData(b), len(b)), false) // read only during the call
}

// valid is Valid over s; with checkUTF8, the strings' bytes must be UTF-8 too (outside strings
// only ASCII is JSON, so that covers the whole text in the same pass).
func valid(s string, checkUTF8 bool) bool {
	// stack holds one bit per open container: 1 for an object, 0 for an array.
	var stack [maxDepth / 64]uint64
	depth := 0
	i := skipWS(s, 0)
	for {
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
				if i = validKey(s, i, checkUTF8); i < 0 {
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
		// A value ended at s[i]: close containers, or go on to the next member or element.
		for {
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
					if i = validKey(s, i, checkUTF8); i < 0 {
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

// validKey checks an object's key and its colon at s[i], returning where the value starts.
func validKey(s string, i int, checkUTF8 bool) int {
	if i >= len(s) || s[i] != '"' {
		return -1
	}
	if i = validString(s, i, checkUTF8); i < 0 {
		return -1
	}
	i = skipWS(s, i)
	if i >= len(s) || s[i] != ':' {
		return -1
	}
	return skipWS(s, i+1)
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
