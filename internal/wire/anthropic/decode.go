package anthropic

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// DecodeRequest decodes and validates the body of POST /v1/messages. Every error is an
// *apierr.Error of kind InvalidRequest whose message names the offending field by its path, as
// the real API does ("messages.1.content.0.text: field required").
//
// Strings in the returned Request share one copy of body (body itself is not retained, so the
// caller may reuse it); Model and UserID are separate copies because they outlive the request as
// metric labels and limiter keys. Tool inputs and schemas are compacted JSON. Thinking blocks are
// dropped, and document blocks with a text source become text blocks. System messages inside
// messages are kept at their place (llm.RoleSystem; see messages). The top-level fields layer0
// does not act on (thinking, output_config, context_management, …) are validated as JSON and left
// out: the pass-through path forwards the client's bytes, the translated path drops them.
func DecodeRequest(body []byte) (*llm.Request, error) {
	return decode(string(body), true)
}

// DecodeRequestText is DecodeRequest of a body given as text: the strings of the returned
// Request are substrings of text (Model, UserID and Ignored are still copies of their own, see
// DecodeRequest). A caller that makes text from a buffer it reuses (unsafe.String, to skip the
// copy of the body) must not change the buffer while the request or any string of it is in
// use, and must see that whatever keeps a string of the request past its end copies it.
func DecodeRequestText(text string) (*llm.Request, error) {
	return decode(text, true)
}

// DecodeCountTokens decodes the body of POST /v1/messages/count_tokens: the same fields as
// DecodeRequest, with max_tokens optional.
func DecodeCountTokens(body []byte) (*llm.Request, error) {
	return decode(string(body), false)
}

// decode decodes text, whose strings the request shares.
func decode(text string, needMaxTokens bool) (*llm.Request, error) {
	d := newDecoder(text)
	mem := &requestMem{r: llm.Request{Format: llm.FormatAnthropic}}
	r := &mem.r
	if err := d.request(mem, needMaxTokens); err != nil {
		return nil, err
	}
	// The decoder checked the syntax, UTF-8 and most rules with their exact paths; Validate
	// holds the rules every front shares (a named tool_choice must name a tool, for one).
	if err := llm.ValidateDecoded(r, needMaxTokens); err != nil {
		return nil, err
	}
	return r, nil
}

// topLevelIgnored lists the top-level fields the real API knows that layer0 accepts and does
// not act on: they are validated as JSON and dropped.
func topLevelIgnored(k string) bool {
	return topLevelBit(k) >= 1<<firstIgnored
}

// topLevelBit returns a distinct bit for each top-level field a request may have — those layer0
// reads, then (from bit firstIgnored) those it accepts and drops — and 0 for any other key.
func topLevelBit(k string) uint32 {
	var i uint
	switch k {
	case "model":
		i = 1
	case "max_tokens":
		i = 2
	case "messages":
		i = 3
	case "system":
		i = 4
	case "temperature":
		i = 5
	case "top_p":
		i = 6
	case "top_k":
		i = 7
	case "stop_sequences":
		i = 8
	case "stream":
		i = 9
	case "tools":
		i = 10
	case "tool_choice":
		i = 11
	case "metadata":
		i = 12
	case "service_tier":
		i = firstIgnored
	case "thinking":
		i = firstIgnored + 1
	case "container":
		i = firstIgnored + 2
	case "mcp_servers":
		i = firstIgnored + 3
	case "context_management":
		i = firstIgnored + 4
	case "cache_control":
		i = firstIgnored + 5
	case "inference_geo":
		i = firstIgnored + 6
	case "speed":
		i = firstIgnored + 7
	case "diagnostics":
		i = firstIgnored + 8
	case "output_config":
		i = firstIgnored + 9
	case "output_format":
		i = firstIgnored + 10
	case "compaction":
		i = firstIgnored + 11
	case "fallbacks":
		i = firstIgnored + 12
	case "fallback_credit_token":
		i = firstIgnored + 13
	default:
		return 0
	}
	return 1 << i
}

// changesAnswer reports whether a field accepted and dropped (topLevelIgnored) can change the
// answer of an engine that reads it: the pass-through path sends it one, so such a request is
// not cached (llm.Request.Ignored). Billing, routing and prompt-caching hints cannot.
func changesAnswer(k string) bool {
	switch k {
	case "service_tier", "cache_control", "inference_geo", "diagnostics", "fallback_credit_token":
		return false
	}
	return true
}

// firstIgnored is topLevelBit's first bit of the fields accepted and dropped.
const firstIgnored = 16

// requestMem is a Request with room for its optional numbers, which it points to: one
// allocation for all of them.
type requestMem struct {
	r                 llm.Request
	temperature, topP float64
	topK              int
}

func (d *decoder) request(mem *requestMem, needMaxTokens bool) error {
	r := &mem.r
	switch k := d.Peek(); k {
	case jsontext.KindObject:
		d.Pos++
	case jsontext.KindEOF:
		return d.fail("request body is empty; want a JSON object")
	default:
		return d.typeErr("a JSON object", k)
	}
	var hasModel, hasMaxTokens, hasMessages bool
	var seen uint32 // topLevelBit of each field read
	for n := 0; ; {
		k, ok, err := d.key(&n, nil)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		b := topLevelBit(k)
		if seen&b != 0 {
			return d.duplicate()
		}
		seen |= b
		switch k {
		case "model":
			var s string
			if s, err = d.readString(); err == nil && s == "" {
				err = d.fail("must not be empty")
			}
			r.Model, hasModel = strings.Clone(s), true
		case "max_tokens":
			r.MaxTokens, err = d.readInt(1)
			hasMaxTokens = true
		case "messages":
			err, hasMessages = d.messages(r), true
		case "system":
			r.System = nil
			if !d.null() {
				r.System, _, err = d.content(ctxSystem, 0)
			}
		case "temperature":
			r.Temperature, err = d.readFloat(&mem.temperature, 0, 1)
		case "top_p":
			r.TopP, err = d.readFloat(&mem.topP, 0, 1)
		case "top_k":
			if r.TopK = nil; !d.null() {
				if mem.topK, err = d.readInt(0); err == nil {
					r.TopK = &mem.topK
				}
			}
		case "stop_sequences":
			err = d.stopSequences(r)
		case "stream":
			r.Stream, err = d.readBool()
		case "tools":
			err = d.tools(r)
		case "tool_choice":
			err = d.toolChoice(r)
		case "metadata":
			err = d.metadata(r)
		default:
			if !topLevelIgnored(k) {
				return d.extra()
			}
			if r.Ignored == "" && changesAnswer(k) && d.Peek() != jsontext.KindNull {
				r.Ignored = strings.Clone(k) // k may alias a scratch buffer
			}
			err = d.skipValue()
		}
		if err != nil {
			return err
		}
		d.Leave()
	}
	if err := d.End(); err != nil {
		return d.syntax(err)
	}
	switch {
	case !hasModel:
		return d.required("model")
	case needMaxTokens && !hasMaxTokens:
		return d.required("max_tokens")
	case !hasMessages:
		return d.required("messages")
	}
	return nil
}

// messages decodes the conversation. System messages (role "system") stay at their place, except
// those the model would not see: one without content (it carries only a per-message
// output_config), and one with clear_at "next_user_message" once a later user message exists
// (the hosted API keeps it in the array but no longer shows it to the model).
func (d *decoder) messages(r *llm.Request) error {
	if err := d.array(); err != nil {
		return err
	}
	// The messages are gathered on the stack and copied once to an array of their number
	// (past 16 they grow on the heap first): the appends from an array of 4 cost an allocation
	// each time it doubled.
	var scratch [16]llm.Message
	msgs := scratch[:0]
	prevEmpty := false
	cleared := -1 // index in msgs of the last system message cleared at the next user message
	var hidden []int
	n := 0 // messages read
	for {
		ok, err := d.elem(&n)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		if prevEmpty {
			d.Leave()
			return d.emptyContent(n - 2)
		}
		var m llm.Message
		var mi messageInfo
		if mi, err = d.message(&m); err != nil {
			return err
		}
		if mi.outputConfig && r.Ignored == "" {
			r.Ignored = "messages." + strconv.Itoa(n-1) + ".output_config"
		}
		d.Leave()
		if m.Role == llm.RoleSystem {
			if len(m.Content) == 0 {
				continue
			}
			if mi.clearAtNextUser {
				cleared = len(msgs)
			}
			msgs = append(msgs, m)
			continue
		}
		prevEmpty = mi.empty
		if m.Role == llm.RoleUser && cleared >= 0 {
			hidden = append(hidden, cleared)
			cleared = -1
		}
		msgs = append(msgs, m)
	}
	if len(msgs) == 0 {
		return d.fail("at least one message is required")
	}
	if prevEmpty && msgs[len(msgs)-1].Role != llm.RoleAssistant {
		return d.emptyContent(n - 1) // the last message read: nothing may follow an empty one
	}
	msgs = dropMessages(msgs, hidden)
	r.Messages = append(make([]llm.Message, 0, len(msgs)), msgs...)
	return nil
}

// dropMessages removes the messages at the ascending indexes drop.
func dropMessages(msgs []llm.Message, drop []int) []llm.Message {
	if len(drop) == 0 {
		return msgs
	}
	out := msgs[:0]
	for i := range msgs {
		if len(drop) > 0 && drop[0] == i {
			drop = drop[1:]
			continue
		}
		out = append(out, msgs[i])
	}
	return out
}

func (d *decoder) emptyContent(i int) error {
	d.EnterIndex(i)
	return d.failAt("content", "all messages must have non-empty content except for the optional final assistant message")
}

// messageInfo describes a message beyond its role and content.
type messageInfo struct {
	empty           bool // content was "" or [] (or only thinking)
	clearAtNextUser bool // a system message with clear_at "next_user_message"
	outputConfig    bool // a system message with a per-message output_config (not null)
}

// message decodes one message. A system message may carry clear_at and a per-message
// output_config (read and dropped: layer0 acts on neither beyond clear_at's visibility rule), and
// holds text blocks only.
func (d *decoder) message(m *llm.Message) (messageInfo, error) {
	var mi messageInfo
	if err := d.object(); err != nil {
		return mi, err
	}
	var hasRole, hasContent bool
	var info contentInfo
	extra := "" // the first member only a system message may have
	var seen jsontext.KeySet
	for n := 0; ; {
		k, ok, err := d.key(&n, &seen)
		if err != nil {
			return mi, err
		}
		if !ok {
			break
		}
		switch k {
		case "role":
			s, err := d.readString()
			if err != nil {
				return mi, err
			}
			switch s {
			case "user":
				m.Role = llm.RoleUser
			case "assistant":
				m.Role = llm.RoleAssistant
			case "system":
				m.Role = llm.RoleSystem
			default:
				return mi, d.fail(`must be "user", "assistant" or "system", got %q`, clipString(s))
			}
			hasRole = true
		case "content":
			if m.Content, info, err = d.content(ctxMessage, 0); err != nil {
				return mi, err
			}
			hasContent = true
		case "clear_at":
			var s string
			if s, err = d.readOptString(); err != nil {
				return mi, err
			}
			switch s {
			case "", "never":
			case "next_user_message":
				mi.clearAtNextUser = true
			default:
				return mi, d.fail(`must be "next_user_message" or "never", got %q`, clipString(s))
			}
			if extra == "" {
				extra = k
			}
		case "output_config":
			if !d.null() {
				if _, err := d.rawObject(); err != nil {
					return mi, err
				}
				mi.outputConfig = true
			}
			if extra == "" {
				extra = k
			}
		default:
			return mi, d.extra()
		}
		d.Leave()
	}
	switch {
	case !hasRole:
		return mi, d.required("role")
	case !hasContent:
		return mi, d.required("content")
	case m.Role != llm.RoleSystem && extra != "":
		d.Enter(extra)
		return mi, d.fail("only permitted on system messages")
	case m.Role == llm.RoleSystem && !onlyText(m.Content):
		return mi, d.failAt("content", "a system message holds text blocks only")
	case m.Role == llm.RoleUser && info.toolUse >= 0:
		return mi, d.contentErr(info.toolUse, "tool_use blocks are only allowed in assistant messages")
	case m.Role == llm.RoleAssistant && info.toolResult >= 0:
		return mi, d.contentErr(info.toolResult, "tool_result blocks are only allowed in user messages")
	}
	mi.empty = info.empty
	return mi, nil
}

// onlyText reports whether every block is a text block.
func onlyText(bs []llm.Block) bool {
	for i := range bs {
		if bs[i].Type != llm.BlockText {
			return false
		}
	}
	return true
}

func (d *decoder) contentErr(i int, msg string) error {
	d.Enter("content")
	d.EnterIndex(i)
	return d.fail("%s", msg)
}

func (d *decoder) stopSequences(r *llm.Request) error {
	r.StopSequences = nil
	if d.null() {
		return nil
	}
	if err := d.array(); err != nil {
		return err
	}
	return d.elems(func() error {
		s, err := d.readString()
		if err != nil {
			return err
		}
		if s == "" {
			return d.fail("must be non-empty")
		}
		r.StopSequences = append(r.StopSequences, s)
		return nil
	})
}

func (d *decoder) metadata(r *llm.Request) error {
	r.UserID = ""
	if d.null() {
		return nil
	}
	if err := d.object(); err != nil {
		return err
	}
	return d.members(func(k string) error {
		if k != "user_id" {
			return d.extra()
		}
		s, err := d.readOptString()
		if err != nil {
			return err
		}
		if len(s) > 256 {
			return d.fail("must be at most 256 characters long")
		}
		r.UserID = strings.Clone(s)
		return nil
	})
}

func (d *decoder) tools(r *llm.Request) error {
	r.Tools = nil
	if d.null() {
		return nil
	}
	if err := d.array(); err != nil {
		return err
	}
	if err := d.elems(func() error {
		var t llm.Tool
		if err := d.tool(&t); err != nil {
			return err
		}
		r.Tools = append(r.Tools, t)
		return nil
	}); err != nil {
		return err
	}
	// Names must be unique; quadratic is cheaper than a map for the usual handful of tools.
	for i := range r.Tools {
		for j := range i {
			if r.Tools[i].Name == r.Tools[j].Name {
				d.EnterIndex(i)
				return d.failAt("name", "tool names must be unique; %q is also tools.%d.name", r.Tools[i].Name, j)
			}
		}
	}
	return nil
}

func (d *decoder) tool(t *llm.Tool) error {
	if err := d.object(); err != nil {
		return err
	}
	var hasName bool
	var typ string
	if err := d.members(func(k string) (err error) {
		switch k {
		case "name":
			t.Name, err = d.readString()
			hasName = true
		case "description":
			t.Description, err = d.readOptString()
		case "input_schema":
			t.InputSchema, err = d.schema()
		case "type":
			typ, err = d.readOptString()
		case "cache_control", "strict", "input_examples", "defer_loading", "allowed_callers",
			"eager_input_streaming":
			err = d.skipValue()
		default:
			return d.extra()
		}
		return err
	}); err != nil {
		return err
	}
	switch {
	case typ != "" && typ != "custom":
		return d.failAt("type", "tool type %q is not supported; only custom tools (name, description, input_schema) are", clipString(typ))
	case !hasName:
		return d.required("name")
	case !llm.ValidToolName(t.Name):
		return d.failAt("name", "must match ^[a-zA-Z0-9_-]{1,128}$, got %q", clipString(t.Name))
	case t.InputSchema == nil:
		return d.required("input_schema")
	}
	return nil
}

// schema reads a JSON Schema object whose type, when given, must be "object", and returns it
// compacted.
func (d *decoder) schema() (json.RawMessage, error) {
	if k := d.Peek(); k != jsontext.KindObject {
		return nil, d.typeErr("an object", k)
	}
	start := d.Pos
	d.Pos++
	if err := d.members(func(k string) error {
		if k != "type" {
			return d.skipValue()
		}
		if kd := d.Peek(); kd != jsontext.KindString {
			return d.typeErr(`"object"`, kd)
		}
		s, err := d.readString()
		if err != nil {
			return err
		}
		if s != "object" {
			return d.fail(`must be "object", got %q`, clipString(s))
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return jsontext.Compact(d.Text[start:d.Pos]), nil
}

// rawObject reads any JSON object and returns it compacted.
func (d *decoder) rawObject() (json.RawMessage, error) {
	if k := d.Peek(); k != jsontext.KindObject {
		return nil, d.typeErr("an object", k)
	}
	start := d.Pos
	if err := d.SkipUnique(1); err != nil {
		return nil, d.syntax(err)
	}
	return jsontext.Compact(d.Text[start:d.Pos]), nil
}

func (d *decoder) toolChoice(r *llm.Request) error {
	r.ToolChoice = llm.ToolChoice{}
	if d.null() {
		return nil
	}
	if err := d.object(); err != nil {
		return err
	}
	var typ, name string
	var hasType, hasName, hasDisable bool
	tc := &r.ToolChoice
	if err := d.members(func(k string) (err error) {
		switch k {
		case "type":
			typ, err = d.readString()
			hasType = true
		case "name":
			name, err = d.readString()
			hasName = true
		case "disable_parallel_tool_use":
			tc.DisableParallelToolUse, err = d.readBool()
			hasDisable = true
		default:
			return d.extra()
		}
		return err
	}); err != nil {
		return err
	}
	if !hasType {
		return d.required("type")
	}
	switch typ {
	case "auto":
		tc.Type = llm.ToolAuto
	case "any":
		tc.Type = llm.ToolAny
	case "tool":
		tc.Type = llm.ToolNamed
	case "none":
		tc.Type = llm.ToolNone
	default:
		return d.failAt("type", `must be one of "auto", "any", "tool" or "none", got %q`, clipString(typ))
	}
	switch {
	case tc.Type == llm.ToolNamed && !hasName:
		return d.required("name")
	case tc.Type == llm.ToolNamed && !llm.ValidToolName(name):
		return d.failAt("name", "must match ^[a-zA-Z0-9_-]{1,128}$, got %q", clipString(name))
	case tc.Type != llm.ToolNamed && hasName:
		d.Enter("name")
		return d.extra()
	case tc.Type == llm.ToolNone && hasDisable:
		d.Enter("disable_parallel_tool_use")
		return d.extra()
	}
	tc.Name = name
	return nil
}
