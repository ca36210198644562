package jsontext

import (
	"bytes"
	"encoding/json"
	"errors"
)

// ErrNotObject is returned by Field for a body that is not a JSON object.
var ErrNotObject = errors.New("jsontext: not a JSON object")

// ErrNotArray is returned by ScanArray for a value that is not a JSON array.
var ErrNotArray = errors.New("jsontext: not a JSON array")

// Field finds the value of the top-level key in the JSON object body without decoding it and
// returns its span body[start:end]. ok is false when the key is absent. The last occurrence
// wins, as in encoding/json and the Python servers behind most engines.
func Field(body []byte, key string) (start, end int, ok bool, err error) {
	err = Scan(body, func(k []byte, esc bool, vs, ve int) {
		if KeyIs(k, esc, key) {
			start, end, ok = vs, ve, true
		}
	})
	if err != nil {
		return 0, 0, false, err
	}
	return start, end, ok, nil
}

// Scan calls visit for each member of the top-level JSON object body, in order, with the key as
// it appears between its quotes (esc says it holds a backslash escape; compare it with KeyIs)
// and the span of its value. It checks the object's structure but not the values' contents,
// which the engine validates anyway. It allocates nothing.
func Scan(body []byte, visit func(key []byte, esc bool, start, end int)) error {
	i := skipWS(body, 0)
	if i >= len(body) || body[i] != '{' {
		return ErrNotObject
	}
	i++
	for first := true; ; first = false {
		i = skipWS(body, i)
		if first && i < len(body) && body[i] == '}' {
			return nil
		}
		if i >= len(body) || body[i] != '"' {
			return ErrNotObject
		}
		ks := i
		ke, esc := skipString(body, i)
		if ke < 0 {
			return ErrNotObject
		}
		i = skipWS(body, ke)
		if i >= len(body) || body[i] != ':' {
			return ErrNotObject
		}
		i = skipWS(body, i+1)
		vs := i
		ve := skipValue(body, i)
		if ve < 0 {
			return ErrNotObject
		}
		visit(body[ks+1:ke-1], esc, vs, ve)
		i = skipWS(body, ve)
		if i < len(body) && body[i] == ',' {
			i++
			continue
		}
		if i < len(body) && body[i] == '}' {
			return nil
		}
		return ErrNotObject
	}
}

// ScanArray calls visit with the span of each element of the JSON array arr, in order. Like
// Scan it checks the structure, not the elements' contents, and allocates nothing.
func ScanArray(arr []byte, visit func(start, end int)) error {
	i := skipWS(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return ErrNotArray
	}
	i = skipWS(arr, i+1)
	if i < len(arr) && arr[i] == ']' {
		return nil
	}
	for {
		s := i
		e := skipValue(arr, i)
		if e < 0 {
			return ErrNotArray
		}
		visit(s, e)
		i = skipWS(arr, e)
		if i < len(arr) && arr[i] == ',' {
			i = skipWS(arr, i+1)
			continue
		}
		if i < len(arr) && arr[i] == ']' {
			return nil
		}
		return ErrNotArray
	}
}

// KeyIs reports whether a key from Scan equals key.
func KeyIs(k []byte, esc bool, key string) bool {
	if !esc {
		return string(k) == key
	}
	var s string
	q := make([]byte, 0, len(k)+2)
	q = append(append(append(q, '"'), k...), '"')
	return json.Unmarshal(q, &s) == nil && s == key
}

// skipWS returns the index of the first byte at or after i that is not JSON whitespace.
func skipWS[T string | []byte](b T, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"', or -1, and whether
// it holds a backslash escape. It looks for the next quote and the next backslash with
// bytes.IndexByte, many bytes at a time, instead of byte by byte: Scan runs over whole request
// bodies, prompts included, on the pass-through path.
func skipString(b []byte, i int) (int, bool) {
	esc := false
	q := -1 // the next '"' at or after i
	for i++; ; {
		if q < i {
			if q = bytes.IndexByte(b[i:], '"'); q < 0 {
				return -1, esc
			}
			q += i
		}
		bs := bytes.IndexByte(b[i:q], '\\')
		if bs < 0 {
			return q + 1, esc
		}
		esc = true
		if i += bs + 2; i > len(b) { // past the backslash and the byte it escapes
			return -1, esc
		}
	}
}

// skipValue returns the index after the value starting at b[i], or -1. Nested values are
// skipped by depth counting; their contents are checked only as far as strings go, since the
// engine validates the body anyway.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		e, _ := skipString(b, i)
		return e
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				e, _ := skipString(b, i)
				if e < 0 {
					return -1
				}
				i = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	}
	s := i
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			if i == s {
				return -1
			}
			return i
		}
		i++
	}
	if i == s {
		return -1
	}
	return i
}

// Int parses a JSON integer value (the bytes of a number without fraction or exponent) without
// allocating. ok is false for anything else, and for values beyond ±2^53.
func Int(v []byte) (n int, ok bool) {
	neg := len(v) > 0 && v[0] == '-'
	if neg {
		v = v[1:]
	}
	if len(v) == 0 || len(v) > 16 || len(v) > 1 && v[0] == '0' {
		return 0, false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if n > 1<<53 {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}
