package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The pre-tokenizer: cl100k_base cuts text into pieces with the pattern
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// and merges bytes within each piece only. split is that pattern written out by hand, branch by
// branch in the same order, following the matcher tiktoken-go v0.10.0 generates for it (see the
// package comment for the one place where that differs from a textbook regexp engine). \s is
// unicode.IsSpace, \p{L} and \p{N} are unicode.L and unicode.N, as in regexp2.

// Character classes. Every rune is in exactly one.
const (
	clOther  uint8 = iota // [^\s\p{L}\p{N}]
	clLetter              // \p{L}
	clNumber              // \p{N}
	clSpace               // \s except \r and \n
	clBreak               // \r or \n
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for b := range utf8.RuneSelf {
		t[b] = classOf(rune(b))
	}
	return t
}()

func classOf(r rune) uint8 {
	switch {
	case r == '\r' || r == '\n':
		return clBreak
	case unicode.IsSpace(r):
		return clSpace
	case unicode.Is(unicode.L, r):
		return clLetter
	case unicode.Is(unicode.N, r):
		return clNumber
	}
	return clOther
}

// class returns the class of the rune at s[i] and its width; s is valid UTF-8 and i < len(s).
func class(s string, i int) (uint8, int) {
	if b := s[i]; b < utf8.RuneSelf {
		return asciiClass[b], 1
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	return classOf(r), w
}

// run returns the end of the run of runes of class cl starting at i.
func run(s string, i int, cl uint8) int {
	for i < len(s) {
		c, w := class(s, i)
		if c != cl {
			break
		}
		i += w
	}
	return i
}

// split returns the end of the piece that starts at s[i]; s is valid UTF-8 and i < len(s).
func split(s string, i int) int {
	// (?i:'s|'t|'re|'ve|'m|'ll|'d); ſ (U+017F, bytes C5 BF) folds to s.
	if s[i] == '\'' && i+1 < len(s) {
		switch s[i+1] {
		case 's', 'S', 't', 'T', 'm', 'M', 'd', 'D':
			return i + 2
		case 'r', 'R', 'v', 'V':
			if i+2 < len(s) && s[i+2]|0x20 == 'e' {
				return i + 3
			}
		case 'l', 'L':
			if i+2 < len(s) && s[i+2]|0x20 == 'l' {
				return i + 3
			}
		case 0xC5:
			if i+2 < len(s) && s[i+2] == 0xBF {
				return i + 3
			}
		}
	}
	c0, w0 := class(s, i)
	switch c0 {
	case clLetter: // [^\r\n\p{L}\p{N}]?\p{L}+ with the option empty
		return run(s, i+w0, clLetter)
	case clNumber: // \p{N}{1,3}
		j := i + w0
		for range 2 {
			if j >= len(s) {
				break
			}
			c, w := class(s, j)
			if c != clNumber {
				break
			}
			j += w
		}
		return j
	case clOther, clSpace:
		// [^\r\n\p{L}\p{N}]?\p{L}+ with the option taken.
		if j := i + w0; j < len(s) {
			if c1, w1 := class(s, j); c1 == clLetter {
				return run(s, j+w1, clLetter)
			}
		}
		// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
		j := i
		if s[j] == ' ' {
			j++
		}
		if k := run(s, j, clOther); k > j {
			for k < len(s) && (s[k] == '\r' || s[k] == '\n') {
				k++
			}
			return k
		}
	}
	// Whitespace, c0 is clSpace or clBreak. j is the end of the run \s+.
	j := i
	for j < len(s) {
		c, w := class(s, j)
		if c != clSpace && c != clBreak {
			break
		}
		j += w
	}
	// \s*[\r\n]+, taking the first line break of the run (the generated matcher's choice).
	for k := i; k < j; k++ {
		if s[k] == '\r' || s[k] == '\n' {
			for k < j && (s[k] == '\r' || s[k] == '\n') {
				k++
			}
			return k
		}
	}
	// \s+(?!\S): all of the run at the end of the text, else all but its last rune.
	if j == len(s) {
		return j
	}
	_, w := utf8.DecodeLastRuneInString(s[i:j])
	if j-w > i {
		return j - w
	}
	return j // \s+
}
