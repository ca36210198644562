// Package directive finds, checks and strips the directives a client writes in its system
// prompt: `<|name|>` or `<|name:value|>` where name is one of temperature, truncate, json_mode
// and offload. Any other `<|…|>` text (a chat template's special tokens, a look-alike with an
// unknown name, a misspelt or upper-case name) is content and is left alone.
//
// Parsing is built for the hot path: a system prompt without directives is scanned once with
// strings.Index for "<|" and costs no allocation.
package directive

import (
	"strconv"
	"strings"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

// Names of the directives.
const (
	NameTemperature = "temperature"
	NameTruncate    = "truncate"
	NameJSONMode    = "json_mode"
	NameOffload     = "offload"
)

// MaxValue is the longest value a directive may carry, in bytes; longer text between "<|" and
// "|>" is content.
const MaxValue = 256

// maxInner is the longest text between "<|" and "|>" that can be a directive: the longest name,
// a colon and the longest value.
const maxInner = len(NameTemperature) + 1 + MaxValue

// Set is the directives found in one request. The zero value is "none given".
type Set struct {
	// Temperature is the temperature directive's value, when HasTemperature.
	Temperature    float64
	HasTemperature bool
	// Truncate is set by the truncate directive: cutting the input is allowed. TruncateBudget,
	// when positive, is the input budget in tokens it gave (`<|truncate:4000|>`); 0 means the
	// context window of the model that serves.
	Truncate       bool
	TruncateBudget int
	// JSONMode is the json_mode directive's value, when HasJSONMode.
	JSONMode    bool
	HasJSONMode bool
	// Offload is the offload target's name, when given.
	Offload string
}

// Empty reports whether no directive was found.
func (s *Set) Empty() bool {
	return !s.HasTemperature && !s.Truncate && !s.HasJSONMode && s.Offload == ""
}

// Contains reports whether text holds at least one directive (well-formed or not: a known name
// between "<|" and "|>"). It allocates nothing.
func Contains(text string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], "<|")
		if j < 0 {
			return false
		}
		i += j
		if _, _, _, n := match(text[i:]); n > 0 {
			return true
		}
		i += 2
	}
}

// match reads a directive at the start of s (which begins with "<|"): its name, value, whether
// a value was given (a ':'), and its length in bytes; n is 0 when s does not start with a
// directive.
func match(s string) (name, value string, hasValue bool, n int) {
	body := s[2:]
	if len(body) > maxInner+2 {
		// A directive is short: looking further would make a text full of "<|" quadratic.
		body = body[:maxInner+2]
	}
	end := strings.Index(body, "|>")
	if end < 0 {
		return "", "", false, 0
	}
	inner := body[:end]
	name = inner
	if k := strings.IndexByte(inner, ':'); k >= 0 {
		name, value, hasValue = inner[:k], inner[k+1:], true
	}
	switch name {
	case NameTemperature, NameTruncate, NameJSONMode, NameOffload:
	default:
		return "", "", false, 0
	}
	if len(value) > MaxValue || strings.ContainsAny(value, "\n<") {
		return "", "", false, 0
	}
	return name, value, hasValue, 2 + end + 2
}

// Parse finds the directives in the request's system blocks, checks their values, and strips
// them: when it found any, the returned blocks are new (req is not modified), without the
// directives, a directive alone on its line taking its line break with it, and a block left
// blank dropped. When it found none, blocks is req.System itself and nothing was allocated.
//
// Stripping is one pass: a system prompt in which removing the directives joins the text around
// them into another directive (`<|offl<|json_mode|>oad:x|>`) is a 400, never a second round, so
// the returned blocks hold no directive and no engine downstream (another layer0) can find one.
//
// A directive given twice takes its last value. A bad value is a 400 (*apierr.Error of kind
// InvalidRequest) whose Param is "system" and whose message names the directive. The
// temperature's range depends on the client's format: 0 to 1 for Anthropic and binary clients,
// 0 to 2 for OpenAI's, as each API allows.
func Parse(req *llm.Request) (set Set, blocks []llm.Block, err error) {
	blocks = req.System
	first := -1
	for i := range req.System {
		if Contains(req.System[i].Text) {
			first = i
			break
		}
	}
	if first < 0 {
		return set, blocks, nil
	}
	maxTemp := llm.MaxTemperature
	if req.Format.OpenAIRanges() {
		maxTemp = llm.MaxTemperatureOpenAI
	}
	blocks = make([]llm.Block, 0, len(req.System))
	blocks = append(blocks, req.System[:first]...)
	for i := first; i < len(req.System); i++ {
		b := req.System[i]
		text, err := set.strip(b.Text, maxTemp)
		if err != nil {
			return Set{}, nil, err
		}
		if Contains(text) {
			// Stripping joined the text around a directive into another one
			// (`<|offl<|json_mode|>oad:x|>`): read again, it would be a directive nobody
			// wrote; left in, the engine — another layer0 among them — would read it.
			return Set{}, nil, smuggled()
		}
		if strings.TrimSpace(text) == "" {
			continue
		}
		b.Text = text
		blocks = append(blocks, b)
	}
	return set, blocks, nil
}

// strip applies and removes every directive of text.
func (s *Set) strip(text string, maxTemp float64) (string, error) {
	var out strings.Builder
	out.Grow(len(text))
	last := 0 // text[last:] is not yet copied
	for i := 0; ; {
		j := strings.Index(text[i:], "<|")
		if j < 0 {
			break
		}
		i += j
		name, value, hasValue, n := match(text[i:])
		if n == 0 {
			i += 2
			continue
		}
		if err := s.apply(name, value, hasValue, maxTemp); err != nil {
			return "", err
		}
		start, end := i, i+n
		// A directive alone on its line goes with its line break and the blanks around it.
		ls := start
		for ls > last && (text[ls-1] == ' ' || text[ls-1] == '\t') {
			ls--
		}
		le := end
		for le < len(text) && (text[le] == ' ' || text[le] == '\t') {
			le++
		}
		// The line starts where the text or the output so far (directives removed) does.
		lineStart := ls > last && text[ls-1] == '\n' ||
			ls <= last && (out.Len() == 0 || out.String()[out.Len()-1] == '\n')
		if lineStart && (le == len(text) || text[le] == '\n' || text[le] == '\r') {
			start = ls
			if le < len(text) && text[le] == '\r' {
				le++
			}
			if le < len(text) && text[le] == '\n' {
				le++
			}
			end = le
		}
		out.WriteString(text[last:start])
		last, i = end, end
	}
	out.WriteString(text[last:])
	return out.String(), nil
}

// apply records one directive, checking its value.
func (s *Set) apply(name, value string, hasValue bool, maxTemp float64) error {
	value = strings.TrimSpace(value)
	switch name {
	case NameTemperature:
		t, err := strconv.ParseFloat(value, 64)
		if !hasValue || err != nil || !(t >= 0 && t <= maxTemp) {
			return bad(name, value, "a number between 0 and "+strconv.FormatFloat(maxTemp, 'g', -1, 64))
		}
		s.Temperature, s.HasTemperature = t, true
	case NameTruncate:
		s.Truncate, s.TruncateBudget = true, 0
		if hasValue {
			n, err := strconv.Atoi(value)
			if err != nil || n < 1 || n > llm.MaxMaxTokens {
				return bad(name, value, "a positive number of input tokens, or no value for the model's context window")
			}
			s.TruncateBudget = n
		}
	case NameJSONMode:
		on, ok := true, !hasValue
		switch value {
		case "true", "on", "1":
			ok = true
		case "false", "off", "0":
			on, ok = false, true
		}
		if !ok {
			return bad(name, value, "no value, true or false")
		}
		s.JSONMode, s.HasJSONMode = on, true
	case NameOffload:
		if !hasValue || value == "" {
			return bad(name, value, "the name of an offload target")
		}
		s.Offload = value
	}
	return nil
}

// smuggled is the 400 of a system prompt in which removing the directives forms another one.
func smuggled() *apierr.Error {
	return &apierr.Error{Kind: apierr.InvalidRequest, Param: "system", Code: "invalid_directive",
		Message: "system: removing the directives joins the text around them into another directive; " +
			"write each directive whole, apart from the text"}
}

// bad is the 400 of a directive with a bad value.
func bad(name, value, want string) *apierr.Error {
	return &apierr.Error{Kind: apierr.InvalidRequest, Param: "system", Code: "invalid_directive",
		Message: "system: directive <|" + name + "|> must be " + want + ", got " + strconv.Quote(value)}
}
