package openai

import (
	"encoding/json"
	"errors"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// The checks and mappings below are shared with the other OpenAI-family format, the Responses
// API (wire/responses): one body of rules for what both accept and how both spell errors.

// CheckBody returns the 400 for a request body that is not valid UTF-8 (naming the field that
// holds the first bad byte), or nil.
func CheckBody(body []byte) error { return utf8Error(body) }

// JSONError turns an encoding/json error from decoding a request body into a 400 naming the
// field where it can.
func JSONError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			return apierr.Wrap(apierr.InvalidRequest, err, "request body must be a JSON object")
		}
		e := apierr.Invalid(field, "has the wrong type (%s)", te.Value)
		e.Cause = err
		return e
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return apierr.Wrap(apierr.InvalidRequest, err, "request body is not valid JSON (offset %d)", se.Offset)
	}
	return apierr.Wrap(apierr.InvalidRequest, err, "request body is not valid JSON")
}

// DuplicateKey returns the path of a member name given twice in one object of body (one valid
// JSON value), at any depth, names compared exactly.
func DuplicateKey(body []byte) (string, bool) {
	s := jsontext.Scanner{Text: string(body), MaxDepth: maxNesting}
	if de, ok := s.SkipUnique(0).(*jsontext.DuplicateKeyError); ok {
		return pathString(de.Path), true
	}
	return "", false
}

// ErrorTypeCode returns the OpenAI error type and code for e, as the OpenAI API spells them
// (docs/errors.md lists them).
func ErrorTypeCode(e *apierr.Error) (typ, code string) { return errorTypeCode(e) }

// ToolArguments validates a tool call's arguments string, the field at p: a JSON object in
// which no object repeats a name, or empty for none ("{}").
func ToolArguments(p, args string) (json.RawMessage, error) { return toolInput(p, args) }

// ImageURL decodes an image given by URL: a base64 data URL becomes a base64 image block, an
// http(s) URL stays a URL. p names the field in the error.
func ImageURL(p, u string) (llm.Block, error) { return decodeImageURL(p, u) }

// TokenCount checks an integer parameter against [lo, llm.MaxMaxTokens], naming field.
func TokenCount(field string, v, lo int) error { return tokenCount(field, v, lo) }

// Sampling checks temperature (0 to llm.MaxTemperatureOpenAI) and top_p (0 to 1), each nil when
// not given.
func Sampling(temperature, topP *float64) error { return sampling(temperature, topP) }

// ToolChoiceMode returns the tool choice a tool_choice string names ("auto", "required" or
// "none"), false for any other string.
func ToolChoiceMode(s string) (llm.ToolChoiceType, bool) { return toolChoiceMode(s) }

// FunctionName checks a function tool's name, the field at p: given, and of the characters and
// length a tool name may have.
func FunctionName(p, name string) error { return functionName(p, name) }
