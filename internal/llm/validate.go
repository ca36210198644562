package llm

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/layer0ai/layer0/internal/apierr"
)

// Bounds of the sampling parameters and of max_tokens.
const (
	// MaxTemperature is the highest temperature: the Anthropic API's, which the binary protocol
	// and the in-process path share.
	MaxTemperature = 1.0
	// MaxTemperatureOpenAI is the highest temperature of a request in OpenAI's format, whose
	// API allows up to 2; an engine that cannot take it refuses it.
	MaxTemperatureOpenAI = 2.0
	// MaxMaxTokens is the largest max_tokens (and top_k): what an int32 holds.
	MaxMaxTokens = math.MaxInt32
	// MaxToolName is the longest tool name, in bytes.
	MaxToolName = 128
)

// Validate checks the rules every request must meet whatever front it came through, so that
// the Anthropic, OpenAI and binary decoders and the in-process path (layer0.Do) accept the same
// requests. The decoders check syntax and name fields as their format spells them; this is the
// one place the meaning is checked, and what a decoder leaves unchecked is caught here:
//
//   - model is not empty;
//   - max_tokens is 1 to MaxMaxTokens (a request in OpenAI's format may leave it 0: the API
//     makes it optional and engines apply their default);
//   - there is at least one message; roles are user, assistant or system; every message has
//     content except an optional final assistant message; system messages hold text blocks
//     only; text blocks are not empty; images have media_type (one of ImageMediaTypes) and
//     data (padded standard base64), or an http or https URL; tool_use blocks (id, name, input
//     a JSON object) appear in assistant messages only and tool_result blocks (tool_use_id;
//     text and image content) in user messages only;
//   - tool calls and results pair up: every tool_use id in an assistant message has a
//     tool_result in the next message, which is a user message, and every tool_result answers a
//     tool_use of the message just before it, once;
//   - system blocks are non-empty text;
//   - temperature is 0 to MaxTemperature (MaxTemperatureOpenAI for OpenAI's format), top_p 0
//     to 1, top_k 0 to MaxMaxTokens;
//   - stop sequences are not empty;
//   - tools have unique names matching ^[a-zA-Z0-9_-]{1,128}$ and an input schema that is a
//     JSON object; tool_choice has a known type, and a named tool_choice names one of the tools;
//   - response_format has a known type, and a json_schema's schema is a JSON object;
//   - every string is valid UTF-8.
//
// The error is an *apierr.Error (400 invalid_request_error) whose Param names the field by its
// path in the Anthropic shape ("messages.1.content.0.text"). A nil request is an error too.
// Validate allocates nothing when the request is valid.
func (r *Request) Validate() error { return r.validate(true, false) }

// ValidateCount is Validate for a token count (count_tokens): max_tokens may be left 0.
func (r *Request) ValidateCount() error { return r.validate(false, false) }

// ValidateDecoded is Validate (ValidateCount when needMaxTokens is false) for a request a
// decoder has just built, one that checked every string as UTF-8 as it read it (a
// jsontext.Scanner refuses a string that is not; the binary decoder checks each) and every
// image's source against the image rules (ImageMediaType, ImageBase64, ImageURL), so that it
// could name the field as its format does. The text and image data of the blocks, the bulk of a
// request, are not checked a second time (BenchmarkValidateAgent, a coding agent's 100 KB
// request: 4.8 µs -> 0.5 µs with the text in cache; 16 µs of a gateway profile's request, where
// it was not), nor are the image sources, but for having one. Every other rule is checked as
// Validate checks it. A request whose strings came from anywhere else (a stored conversation, a
// caller's code) takes Validate.
func ValidateDecoded(r *Request, needMaxTokens bool) error { return r.validate(needMaxTokens, true) }

// validate checks r; decoded says the blocks' text and data are known to be UTF-8 and the
// image sources to meet the image rules (ValidateDecoded).
func (r *Request) validate(needMaxTokens, decoded bool) error {
	if r == nil {
		return apierr.New(apierr.InvalidRequest, "request is missing (nil)")
	}
	switch {
	case r.Model == "":
		return apierr.Invalid("model", "must not be empty")
	case !utf8.ValidString(r.Model):
		return badUTF8("model")
	}
	if r.MaxTokens != 0 || needMaxTokens && !r.Format.OpenAIRanges() {
		if err := intRange("max_tokens", r.MaxTokens, 1); err != nil {
			return err
		}
	}
	if err := r.validateMessages(decoded); err != nil {
		return err
	}
	for i := range r.System {
		b := &r.System[i]
		if b.Type != BlockText {
			return apierr.Invalid(path("system", i, "type"), `must be "text", got %q`, b.Type.String())
		}
		if err := checkText(b.Text, decoded, "system", i); err != nil {
			return err
		}
	}
	maxTemp := MaxTemperature
	if r.Format.OpenAIRanges() {
		maxTemp = MaxTemperatureOpenAI
	}
	if err := floatRange("temperature", r.Temperature, maxTemp); err != nil {
		return err
	}
	if err := floatRange("top_p", r.TopP, 1); err != nil {
		return err
	}
	if r.TopK != nil {
		if err := intRange("top_k", *r.TopK, 0); err != nil {
			return err
		}
	}
	for i, s := range r.StopSequences {
		switch {
		case s == "":
			return apierr.Invalid(path("stop_sequences", i, ""), "must be non-empty")
		case !utf8.ValidString(s):
			return badUTF8(path("stop_sequences", i, ""))
		}
	}
	if err := r.validateTools(); err != nil {
		return err
	}
	if !utf8.ValidString(r.UserID) {
		return badUTF8("metadata.user_id")
	}
	return r.validateResponseFormat()
}

// validateResponseFormat checks response_format: a known type, and for json_schema a name
// and a schema that is a JSON object.
func (r *Request) validateResponseFormat() error {
	f := &r.ResponseFormat
	switch f.Type {
	case ResponseText, ResponseJSONObject:
		return nil
	case ResponseJSONSchema:
		switch {
		case !utf8.ValidString(f.Name):
			return badUTF8("response_format.json_schema.name")
		case len(f.Schema) > 0 && !jsonObject(f.Schema):
			return apierr.Invalid("response_format.json_schema.schema", "must be a JSON object")
		}
		return nil
	}
	return apierr.Invalid("response_format.type", "unknown response format type %d", f.Type)
}

func (r *Request) validateMessages(decoded bool) error {
	if len(r.Messages) == 0 {
		return apierr.Invalid("messages", "at least one message is required")
	}
	last := len(r.Messages) - 1
	for i := range r.Messages {
		m := &r.Messages[i]
		if m.Role > RoleSystem {
			return apierr.Invalid(path("messages", i, "role"), `must be "user", "assistant" or "system", got role %d`, m.Role)
		}
		if len(m.Content) == 0 && (i != last || m.Role != RoleAssistant) {
			return apierr.Invalid(path("messages", i, "content"),
				"all messages must have non-empty content except for the optional final assistant message")
		}
		for j := range m.Content {
			if err := checkBlock(&m.Content[j], m.Role, decoded, i, j); err != nil {
				return err
			}
		}
	}
	return r.validatePairs()
}

// validatePairs is ToolPairError as a 400 naming the field.
func (r *Request) validatePairs() error {
	i, j, reason := r.ToolPairError()
	switch {
	case reason == "":
		return nil
	case j < 0:
		return apierr.Invalid(path("messages", i), "%s", reason)
	}
	return apierr.Invalid(path("messages", i, "content", j), "%s", reason)
}

// ToolPairError reports the first place where tool_use and tool_result blocks fail to pair up
// as the Anthropic API requires: the message after an assistant message with tool_use blocks is
// a user message holding one tool_result for each of their ids, and every tool_result answers a
// tool_use of the message just before it, once. It returns the index of the message, the index
// of the block (-1 when the message as a whole is at fault: tool_use ids without results) and
// what is wrong, naming the ids; reason is "" when everything pairs. Validate calls it; the
// binary decoder calls it to name the offset. It allocates nothing for a conversation without
// tools, nor for one with at most pairScanMax calls in a turn, unless it finds an error.
func (r *Request) ToolPairError() (msg, block int, reason string) {
	for i := range r.Messages {
		j, why := -1, ""
		switch r.Messages[i].Role {
		case RoleAssistant:
			j, why = r.checkUsesAnswered(i)
		case RoleUser:
			j, why = r.checkResultsAnswer(i)
		}
		if why != "" {
			return i, j, why
		}
	}
	return -1, -1, ""
}

// pairScanMax is the number of tool blocks in a message up to which ids are compared pairwise;
// above it, a set is cheaper than the quadratic scan.
const pairScanMax = 32

// checkUsesAnswered checks that every tool_use of assistant message i has a tool_result in
// message i+1.
func (r *Request) checkUsesAnswered(i int) (int, string) {
	uses := r.Messages[i].Content
	var next []Block
	if i+1 < len(r.Messages) && r.Messages[i+1].Role == RoleUser {
		next = r.Messages[i+1].Content
	}
	n := countType(uses, BlockToolUse)
	if n == 0 {
		return -1, ""
	}
	var answered map[string]bool
	if n > pairScanMax {
		answered = toolIDs(next, BlockToolResult)
	}
	for j := range uses {
		b := &uses[j]
		if b.Type != BlockToolUse {
			continue
		}
		var ok bool
		if answered != nil {
			ok = answered[b.ID]
		} else {
			ok = hasResult(next, b.ID)
		}
		if !ok {
			return -1, unanswered(uses, next, answered)
		}
	}
	return -1, ""
}

// countType counts the blocks of bs of type t.
func countType(bs []Block, t BlockType) int {
	n := 0
	for i := range bs {
		if bs[i].Type == t {
			n++
		}
	}
	return n
}

// toolIDs is the set of the tool_use ids the blocks of bs of type t hold: a tool_use block's
// own id (t BlockToolUse), or the id a tool_result block answers (t BlockToolResult).
func toolIDs(bs []Block, t BlockType) map[string]bool {
	ids := make(map[string]bool, len(bs))
	for i := range bs {
		switch b := &bs[i]; {
		case b.Type != t:
		case t == BlockToolUse:
			ids[b.ID] = true
		default:
			ids[b.ToolUseID] = true
		}
	}
	return ids
}

// maxListed is the most ids an error message lists.
const maxListed = 16

// unanswered says which tool_use ids of uses have no tool_result in next (answered holds the
// ids next answers, when it was built); it names them, as the Anthropic API does, up to
// maxListed.
func unanswered(uses, next []Block, answered map[string]bool) string {
	var missing []string
	more := 0
	for _, b := range uses {
		if b.Type != BlockToolUse {
			continue
		}
		if ok := answered[b.ID]; ok || answered == nil && hasResult(next, b.ID) {
			continue
		}
		if len(missing) == maxListed {
			more++
			continue
		}
		missing = append(missing, Clip(b.ID))
	}
	list := strings.Join(missing, ", ")
	if more > 0 {
		list += " and " + strconv.Itoa(more) + " more"
	}
	return "tool_use ids were found without tool_result blocks immediately after: " + list +
		". Each tool_use block must have a corresponding tool_result block in the next message."
}

func hasResult(blocks []Block, id string) bool {
	for k := range blocks {
		if blocks[k].Type == BlockToolResult && blocks[k].ToolUseID == id {
			return true
		}
	}
	return false
}

// checkResultsAnswer checks that every tool_result of user message i answers a tool_use of
// message i-1, and that no two answer the same one.
func (r *Request) checkResultsAnswer(i int) (int, string) {
	results := r.Messages[i].Content
	var prev []Block
	if i > 0 && r.Messages[i-1].Role == RoleAssistant {
		prev = r.Messages[i-1].Content
	}
	n := countType(results, BlockToolResult)
	if n == 0 {
		return -1, ""
	}
	var uses, seen map[string]bool
	if n > pairScanMax {
		uses, seen = toolIDs(prev, BlockToolUse), make(map[string]bool, n)
	}
	for j := range results {
		b := &results[j]
		if b.Type != BlockToolResult {
			continue
		}
		var used, dup bool
		if uses != nil {
			used, dup = uses[b.ToolUseID], seen[b.ToolUseID]
			seen[b.ToolUseID] = true
		} else {
			used = hasUse(prev, b.ToolUseID)
			dup = hasResult(results[:j], b.ToolUseID)
		}
		switch {
		case !used:
			return j, "unexpected tool_use_id found in tool_result blocks: " + Clip(b.ToolUseID) +
				". Each tool_result block must have a corresponding tool_use block in the previous message."
		case dup:
			return j, "duplicate tool_result for tool_use_id " + Clip(b.ToolUseID) +
				": each tool_use block must have exactly one tool_result block."
		}
	}
	return -1, ""
}

func hasUse(blocks []Block, id string) bool {
	for k := range blocks {
		if blocks[k].Type == BlockToolUse && blocks[k].ID == id {
			return true
		}
	}
	return false
}

// checkBlock checks block j of message i; decoded as in validate.
func checkBlock(b *Block, role Role, decoded bool, i, j int) error {
	if role == RoleSystem && b.Type != BlockText {
		return apierr.Invalid(path("messages", i, "content", j, "type"), `must be "text" in a system message, got %q`, b.Type.String())
	}
	switch b.Type {
	case BlockText:
		return checkText(b.Text, decoded, "messages", i, j)
	case BlockImage:
		return checkImage(b, decoded, "messages", i, j)
	case BlockToolUse:
		if role != RoleAssistant {
			return apierr.Invalid(path("messages", i, "content", j), "tool_use blocks are only allowed in assistant messages")
		}
		if err := checkField(b.ID, i, j, "id"); err != nil {
			return err
		}
		if err := checkField(b.Name, i, j, "name"); err != nil {
			return err
		}
		if len(b.Input) > 0 && !jsonObject(b.Input) {
			return apierr.Invalid(path("messages", i, "content", j, "input"), "must be a JSON object")
		}
		return nil
	case BlockToolResult:
		if role != RoleUser {
			return apierr.Invalid(path("messages", i, "content", j), "tool_result blocks are only allowed in user messages")
		}
		if err := checkField(b.ToolUseID, i, j, "tool_use_id"); err != nil {
			return err
		}
		for k := range b.Content {
			c := &b.Content[k]
			var err error
			switch c.Type {
			case BlockText:
				err = checkText(c.Text, decoded, "messages", i, j, k)
			case BlockImage:
				err = checkImage(c, decoded, "messages", i, j, k)
			default:
				err = apierr.Invalid(path("messages", i, "content", j, "content", k, "type"),
					`must be "text" or "image" inside a tool_result, got %q`, c.Type.String())
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	return apierr.Invalid(path("messages", i, "content", j, "type"), "unknown block type %d", b.Type)
}

// checkField checks the string field of block j of message i that a block of its type needs:
// non-empty, valid UTF-8.
func checkField(s string, i, j int, field string) error {
	switch {
	case s == "":
		return apierr.Invalid(path("messages", i, "content", j, field), "must be non-empty")
	case !utf8.ValidString(s):
		return badUTF8(path("messages", i, "content", j, field))
	}
	return nil
}

// checkText checks a text block; idx are the indexes of the message, block and nested block
// under list ("messages" or "system", whose blocks have one index). With isUTF8 the text is
// known to be UTF-8.
func checkText(s string, isUTF8 bool, list string, idx ...int) error {
	switch {
	case s == "":
		return apierr.Invalid(blockPath(list, idx, "text"), "text content blocks must be non-empty")
	case !isUTF8 && !utf8.ValidString(s):
		return badUTF8(blockPath(list, idx, "text"))
	}
	return nil
}

// checkImage checks an image block, as checkText a text block: a source is given, and unless
// decoded (the decoder checked its strings as UTF-8 and its source against the image rules as
// it read them, see ValidateDecoded) the strings are UTF-8 and the source meets the rules of
// image.go. The fields given are checked: a URL, and media_type and data when there is no URL
// or either is given beside it.
func checkImage(b *Block, decoded bool, list string, idx ...int) error {
	switch {
	case b.URL == "" && (b.MediaType == "" || b.Data == ""):
		return apierr.Invalid(blockPath(list, idx, "source"), "an image needs media_type and data, or url")
	case decoded:
		return nil
	}
	if b.URL != "" {
		switch {
		case !utf8.ValidString(b.URL):
			return badUTF8(blockPath(list, idx, "source.url"))
		case !ImageURL(b.URL):
			return apierr.Invalid(blockPath(list, idx, "source.url"), "must be an http or https URL")
		}
		if b.MediaType == "" && b.Data == "" {
			return nil
		}
	}
	switch {
	case !utf8.ValidString(b.MediaType):
		return badUTF8(blockPath(list, idx, "source.media_type"))
	case !ImageMediaType(b.MediaType):
		return apierr.Invalid(blockPath(list, idx, "source.media_type"), "must be one of %s, got %q", ImageMediaTypes, Clip(b.MediaType))
	case !utf8.ValidString(b.Data):
		return badUTF8(blockPath(list, idx, "source.data"))
	case !ImageBase64(b.Data):
		return apierr.Invalid(blockPath(list, idx, "source.data"), "must be non-empty base64 (standard alphabet, padded)")
	}
	return nil
}

func (r *Request) validateTools() error {
	for i := range r.Tools {
		t := &r.Tools[i]
		switch {
		case !ValidToolName(t.Name):
			return apierr.Invalid(path("tools", i, "name"), "must match ^[a-zA-Z0-9_-]{1,128}$, got %q", Clip(t.Name))
		case !utf8.ValidString(t.Description):
			return badUTF8(path("tools", i, "description"))
		case len(t.InputSchema) == 0:
			return apierr.Invalid(path("tools", i, "input_schema"), "field required")
		case !jsonObject(t.InputSchema):
			return apierr.Invalid(path("tools", i, "input_schema"), "must be a JSON object")
		}
		// Quadratic is cheaper than a map for the usual handful of tools.
		for j := range i {
			if r.Tools[j].Name == t.Name {
				return apierr.Invalid(path("tools", i, "name"), "tool names must be unique; %q is also tools.%d.name", t.Name, j)
			}
		}
	}
	tc := &r.ToolChoice
	switch tc.Type {
	case ToolAuto, ToolAny, ToolNone:
		return nil
	case ToolNamed:
		for i := range r.Tools {
			if r.Tools[i].Name == tc.Name {
				return nil
			}
		}
		if tc.Name == "" {
			return apierr.Invalid("tool_choice.name", "field required")
		}
		return apierr.Invalid("tool_choice.name", "no tool named %q in tools", Clip(tc.Name))
	}
	return apierr.Invalid("tool_choice.type", "unknown tool choice type %d", tc.Type)
}

// ValidToolName reports whether s is a valid tool name: ^[a-zA-Z0-9_-]{1,128}$, as both the
// Anthropic and the OpenAI APIs require.
func ValidToolName(s string) bool {
	return len(s) <= MaxToolName && ValidID(s)
}

// ValidID reports whether s matches ^[a-zA-Z0-9_-]+$, the characters of tool names and of the
// ids the Anthropic API takes for tool_use blocks.
func ValidID(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// jsonObject reports whether b is one valid JSON object, surrounding white space allowed.
func jsonObject(b []byte) bool {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i < len(b) && b[i] == '{' && json.Valid(b)
}

func intRange(field string, v, lo int) error {
	switch {
	case v < lo:
		return apierr.Invalid(field, "must be at least %d, got %d", lo, v)
	case v > MaxMaxTokens:
		return apierr.Invalid(field, "must be at most %d, got %d", MaxMaxTokens, v)
	}
	return nil
}

func floatRange(field string, v *float64, hi float64) error {
	if v != nil && !(*v >= 0 && *v <= hi) { // NaN fails both comparisons
		return apierr.Invalid(field, "must be between 0 and %g, got %g", hi, *v)
	}
	return nil
}

func badUTF8(field string) error { return apierr.Invalid(field, "string is not valid UTF-8") }

// path joins a field path in the Anthropic shape: segments are member names or indexes,
// separated by dots; empty names are left out. It runs only on the error path.
func path(segs ...any) string {
	var b []byte
	for _, s := range segs {
		var seg string
		switch v := s.(type) {
		case string:
			seg = v
		case int:
			seg = strconv.Itoa(v)
		}
		if seg == "" {
			continue
		}
		if len(b) > 0 {
			b = append(b, '.')
		}
		b = append(b, seg...)
	}
	return string(b)
}

// blockPath is the path of member field of a block: list.i.content.j[.content.k].field for a
// message's, list.i.field for a system block's.
func blockPath(list string, idx []int, field string) string {
	segs := []any{list}
	for n, i := range idx {
		if n > 0 {
			segs = append(segs, "content")
		}
		segs = append(segs, i)
	}
	return path(append(segs, field)...)
}

// Clip shortens s for an error message (64 bytes at most, cut at a character boundary).
func Clip(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
