package openai

import (
	"strconv"
	"unicode/utf8"
	"unsafe"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// ParseUsage reads a usage object in one pass with jsontext.Scanner, without encoding/json: the
// pass-through path calls it on the usage of every stream and every answer, and decoding into
// usageJSON by reflection was a sixth of the cost of passing a token stream on, and four
// allocations. It answers what json.Unmarshal into usageJSON answered, for any input:
//
//   - the same JSON is accepted: strings may hold bytes that are not UTF-8, nesting may reach
//     encoding/json's bound (maxNesting), nothing but whitespace may follow the object;
//   - names match the fields ignoring case, as encoding/json matches them (jsontext.KeyFolds);
//   - a name given twice: the last value wins; prompt_tokens_details given twice merges, as
//     encoding/json decodes the second into the struct the first allocated, unless a null
//     between them dropped it;
//   - null leaves a count alone and drops prompt_tokens_details;
//   - a count that is not an integer an int holds (a fraction, an exponent, too large), or a
//     value of another type where a count or prompt_tokens_details is, fails, as encoding/json
//     reported an error for it.

// usageNames are the members of a usage object usageJSON has fields for, in the order of the
// use* constants.
var usageNames = [...]string{"prompt_tokens", "completion_tokens", "prompt_tokens_details"}

const (
	usePrompt = iota
	useCompletion
	useDetails
)

// detailsNames are the members of prompt_tokens_details usageJSON reads.
var detailsNames = [...]string{"cached_tokens"}

// ParseUsage decodes an OpenAI usage object (the value of "usage", not the chunk around it).
// ok is false for anything json.Unmarshal into usageJSON refused, or that is not an object.
// It allocates nothing for a valid object.
func ParseUsage(obj []byte) (u llm.Usage, ok bool) {
	if len(obj) == 0 || obj[0] != '{' {
		return llm.Usage{}, false
	}
	// obj is only read during the call.
	d := jsontext.Scanner{Text: unsafe.String(unsafe.SliceData(obj), len(obj)), Pos: 1, MaxDepth: maxNesting, AnyBytes: true}
	// cached is 0 while prompt_tokens_details is absent or null, as a nil pointer reads.
	var prompt, completion, cached int
	for n := 0; ; {
		raw, esc, more, err := d.NextRawKey(&n)
		if err != nil {
			return llm.Usage{}, false
		}
		if !more {
			break
		}
		switch fieldOf(raw, esc, usageNames[:]) {
		case usePrompt:
			ok = readCount(&d, &prompt)
		case useCompletion:
			ok = readCount(&d, &completion)
		case useDetails:
			ok = readDetails(&d, &cached)
		default:
			ok = d.Skip(1) == nil
		}
		if !ok {
			return llm.Usage{}, false
		}
	}
	if d.End() != nil {
		return llm.Usage{}, false
	}
	return canonicalUsage(prompt, completion, cached), true
}

// readDetails reads prompt_tokens_details: null drops it (*cached back to 0), as it sets the
// pointer to nil; an object is read into what is there, as into the struct a previous one left.
func readDetails(d *jsontext.Scanner, cached *int) bool {
	switch d.Peek() {
	case jsontext.KindNull:
		*cached = 0
		_, err := d.Literal()
		return err == nil
	case jsontext.KindObject:
	default:
		return false
	}
	d.Pos++
	for n := 0; ; {
		raw, esc, more, err := d.NextRawKey(&n)
		if err != nil {
			return false
		}
		if !more {
			return true
		}
		if fieldOf(raw, esc, detailsNames[:]) == 0 {
			if !readCount(d, cached) {
				return false
			}
		} else if d.Skip(2) != nil {
			return false
		}
	}
}

// readCount reads an int field's value into *dst: null leaves it alone; a number must be an
// integer that an int holds (strconv.ParseInt, as encoding/json parses it); any other value
// fails.
func readCount(d *jsontext.Scanner, dst *int) bool {
	switch d.Peek() {
	case jsontext.KindNull:
		_, err := d.Literal()
		return err == nil
	case jsontext.KindNumber:
		lit, err := d.Number()
		if err != nil {
			return false
		}
		v, ok := parseInt(lit)
		if ok {
			*dst = v
		}
		return ok
	}
	return false
}

// parseInt is strconv.ParseInt into an int, as encoding/json parses an int field: false for a
// fraction, an exponent, or a value beyond an int. (ParseInt allocates its error only on such a
// failure, which fails the whole object.)
func parseInt(lit string) (int, bool) {
	v, err := strconv.ParseInt(lit, 10, strconv.IntSize)
	return int(v), err == nil
}

// fieldOf returns the index of the name among names (lower-case ASCII) that a member name, raw
// as it stands between its quotes (esc when it holds an escape), matches as encoding/json
// matches names to fields, ignoring case; -1 for none. A name as the servers spell it is found
// by comparing bytes; only a name with an escape, an upper-case letter or a byte beyond ASCII
// (the Kelvin sign folds to k, the long s to s) can match another way.
func fieldOf(raw string, esc bool, names []string) int {
	if !esc {
		for i, name := range names {
			if raw == name {
				return i
			}
		}
		plain := true
		for i := 0; i < len(raw) && plain; i++ {
			c := raw[i]
			plain = c < utf8.RuneSelf && (c < 'A' || c > 'Z')
		}
		if plain {
			return -1
		}
	}
	for i, name := range names {
		if jsontext.KeyFolds(raw, name) {
			return i
		}
	}
	return -1
}
