// Package jsontext reads and writes JSON text without decoding it into values and without
// allocating, for the hand-written codecs and the pass-through path. Writing: AppendString
// escapes for every encoder in the repository (the Anthropic and OpenAI codecs, the sim's tool
// inputs); its output is valid JSON for any input (control characters escaped, invalid UTF-8 as
// U+FFFD, U+2028/U+2029 escaped so the text is also safe inside JavaScript), with runs of plain
// ASCII found sixteen bytes at a time. Reading: Scanner reads a value token by token for the
// hand-written decoders, checking everything (strings without escapes come back as substrings of
// the input); Scan, ScanArray and Field locate members and elements as spans of the input,
// checking structure only; Valid checks a whole value as RFC 8259 writes it. Scanner and Valid
// share one reader of strings and numbers. Walker is the skeleton the request decoders of the
// Anthropic and OpenAI formats share over Scanner: the path of the value being read, for their
// errors, and the loops over an object's members and an array's elements that keep it.
package jsontext

import "unicode/utf8"

const hexDigits = "0123456789abcdef"

// safe marks the bytes a JSON string may hold as they are: printable ASCII except '"' and '\\'.
var safe = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// Safe reports whether c may stand unescaped inside a JSON string and is plain ASCII.
func Safe(c byte) bool { return safe[c] }

// SWAR constants: a byte repeated across a 64-bit word.
const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// PlainRun returns the length of the prefix of s, in whole 8-byte words, made of bytes Safe
// allows, checking sixteen bytes at a time where it can (the zero-byte tests of "Bit Twiddling
// Hacks"). Callers handle the rest byte by byte, so a word it stops at costs speed, never
// correctness.
func PlainRun(s string) int { return wordRun(s, true) }

// asciiRun is PlainRun letting quotes and backslashes through: the prefix, in whole words,
// without controls and non-ASCII bytes.
func asciiRun(s string) int { return wordRun(s, false) }

func wordRun(s string, full bool) int {
	i := 0
	for ; i+16 <= len(s); i += 16 {
		w := s[i : i+16]
		if stops(le64(w[:8]), full)|stops(le64(w[8:]), full) != 0 {
			break
		}
	}
	for ; i+8 <= len(s); i += 8 {
		if stops(le64(s[i:i+8]), full) != 0 {
			break
		}
	}
	return i
}

// le64 reads the eight bytes of w as a little-endian word (one load: the length is known).
func le64(w string) uint64 {
	_ = w[7]
	return uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
		uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
}

// stops is non-zero when a byte of v is a control (< 0x20) or not ASCII (>= 0x80), or, with
// full, a '"' or a '\\': when v holds a byte that Safe refuses.
func stops(v uint64, full bool) uint64 {
	m := (v - lsb*0x20) | v // high bit set in a byte < 0x20 or >= 0x80
	if full {
		q := v ^ (lsb * '"')   // zero where v has '"'
		bs := v ^ (lsb * '\\') // zero where v has '\\'
		m |= (q - lsb) &^ q
		m |= (bs - lsb) &^ bs
	}
	return m & msb
}

// AppendString appends s as a quoted JSON string.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = AppendEscaped(dst, s)
	return append(dst, '"')
}

// AppendStrings appends ss as a JSON array of strings.
func AppendStrings(dst []byte, ss []string) []byte {
	dst = append(dst, '[')
	for i, s := range ss {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendString(dst, s)
	}
	return append(dst, ']')
}

// AppendEscaped appends the inside of a JSON string for s, without the quotes.
func AppendEscaped(dst []byte, s string) []byte {
	start := 0
	for i := PlainRun(s); i < len(s); {
		c := s[i]
		if safe[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			i += PlainRun(s[i:])
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += n
			start = i
			continue
		}
		i += n
	}
	return append(dst, s[start:]...)
}
