package openai

import (
	"encoding/json"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

// The checks and mappings below are shared with the other OpenAI-family format, the Responses
// API (wire/responses): one body of rules for what both accept and how both spell errors.

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

// ToolChoiceMode sets r's tool choice from a tool_choice string ("auto", "required" or "none");
// any other is an error saying that the field may also be other ("an object").
func ToolChoiceMode(r *llm.Request, s, other string) error { return toolChoiceMode(r, s, other) }

// NamedToolChoice sets r's tool choice to the tool named name, the field at p, which must be one
// of r.Tools; what is the word for a tool in the error ("function").
func NamedToolChoice(r *llm.Request, p, name, what string) error {
	return namedToolChoice(r, p, name, what)
}

// FunctionName checks a function tool's name, the field at p: given, and of the characters and
// length a tool name may have.
func FunctionName(p, name string) error { return functionName(p, name) }
