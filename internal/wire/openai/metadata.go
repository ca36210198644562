package openai

import (
	"unicode/utf8"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// The bounds of metadata, as OpenAI's API sets them for Chat Completions and Responses.
const (
	// MaxMetadataPairs is the most key/value pairs metadata may hold.
	MaxMetadataPairs = 16
	// MaxMetadataKey is the longest key, in characters.
	MaxMetadataKey = 64
	// MaxMetadataValue is the longest value, in characters.
	MaxMetadataValue = 512
)

// CheckMetadata checks metadata, given as the raw JSON the decoder read (its syntax checked, no
// name given twice; "" when absent or null): an object of at most MaxMetadataPairs pairs, each
// key of at most MaxMetadataKey characters and each value a string of at most MaxMetadataValue.
// The error names the param "metadata", as OpenAI's does. Whatever else the API would refuse,
// layer0 would store and echo (a Responses answer) or pass by.
func CheckMetadata(raw string) error {
	if raw == "" {
		return nil
	}
	d := jsontext.Scanner{Text: raw}
	if d.Peek() != jsontext.KindObject {
		return apierr.Invalid("metadata", "must be an object of strings")
	}
	d.Pos++
	n := 0
	for {
		k, ok, err := d.NextKey(&n)
		switch {
		case err != nil: // not after the decoder read it, but say so rather than accept it
			return apierr.Invalid("metadata", "must be an object of strings")
		case !ok:
			return nil
		case n > MaxMetadataPairs:
			return apierr.Invalid("metadata", "must have at most %d key/value pairs", MaxMetadataPairs)
		case utf8.RuneCountInString(k) > MaxMetadataKey:
			return apierr.Invalid("metadata", "key %q is longer than %d characters", llm.Clip(k), MaxMetadataKey)
		case d.Peek() != jsontext.KindString:
			return apierr.Invalid("metadata", "the value of %q must be a string", llm.Clip(k))
		}
		v, err := d.Str()
		switch {
		case err != nil:
			return apierr.Invalid("metadata", "must be an object of strings")
		case utf8.RuneCountInString(v) > MaxMetadataValue:
			return apierr.Invalid("metadata", "the value of %q is longer than %d characters", llm.Clip(k), MaxMetadataValue)
		}
	}
}
