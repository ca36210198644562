package sim

import (
	"bytes"
	"encoding/json"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// chooseTool returns the index of the tool the simulated model calls, or -1 for a text answer,
// and whether the model chose it itself (tool_choice auto) rather than being forced:
//   - none: text;
//   - named: that tool;
//   - any: the first tool the last user message names, else one picked by the seed;
//   - auto: the first tool the last user message names (contains, case-sensitively), unless
//     that message carries a tool_result — after a result, the model answers in text.
//
// The call's input follows the tool's schema, or is the JSON object the last user message writes
// right after the tool's name (givenInput).
func chooseTool(req *llm.Request, seed uint64) (int, bool, error) {
	if len(req.Tools) == 0 {
		return -1, false, nil
	}
	last := lastUser(req)
	switch req.ToolChoice.Type {
	case llm.ToolNone:
		return -1, false, nil
	case llm.ToolNamed:
		for i := range req.Tools {
			if req.Tools[i].Name == req.ToolChoice.Name {
				return i, false, nil
			}
		}
		return -1, false, apierr.Invalid("tool_choice.name", "no tool named %q in tools", req.ToolChoice.Name)
	case llm.ToolAny:
		if i := namedTool(req.Tools, last); i >= 0 {
			return i, false, nil
		}
		return int(seed % uint64(len(req.Tools))), false, nil
	}
	if last == nil {
		return -1, false, nil
	}
	for i := range last.Content {
		if last.Content[i].Type == llm.BlockToolResult {
			return -1, false, nil
		}
	}
	return namedTool(req.Tools, last), true, nil
}

// lastUser returns the last user message, or nil.
func lastUser(req *llm.Request) *llm.Message {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == llm.RoleUser {
			return &req.Messages[i]
		}
	}
	return nil
}

// namedTool returns the first tool whose name a text block of m contains, or -1.
func namedTool(tools []llm.Tool, m *llm.Message) int {
	if m == nil {
		return -1
	}
	for i := range tools {
		for j := range m.Content {
			b := &m.Content[j]
			if b.Type == llm.BlockText && tools[i].Name != "" && strings.Contains(b.Text, tools[i].Name) {
				return i
			}
		}
	}
	return -1
}

// givenInput returns the input the last user message m writes for the tool named name: the JSON
// object that follows the first mention of the name in a text block (after spaces and a colon,
// if any), compacted, as in `Read {"file_path": "notes.txt"}`; nil when none follows it. It is
// how a test makes the simulated model call an agent's tool with an input that tool can run.
func givenInput(m *llm.Message, name string) json.RawMessage {
	if m == nil || name == "" {
		return nil
	}
	for i := range m.Content {
		b := &m.Content[i]
		if b.Type != llm.BlockText {
			continue
		}
		at := strings.Index(b.Text, name)
		if at < 0 {
			continue
		}
		rest := strings.TrimLeft(b.Text[at+len(name):], " \t\n:")
		if !strings.HasPrefix(rest, "{") {
			return nil
		}
		var v json.RawMessage
		if err := json.NewDecoder(strings.NewReader(rest)).Decode(&v); err != nil {
			return nil
		}
		var out bytes.Buffer
		if json.Compact(&out, v) != nil {
			return nil
		}
		return out.Bytes()
	}
	return nil
}

// userText returns the text of message m: its text blocks and the text inside its tool results,
// separated by blank lines.
func userText(m *llm.Message) string {
	if m == nil {
		return ""
	}
	var parts []string
	var collect func(bs []llm.Block)
	collect = func(bs []llm.Block) {
		for i := range bs {
			switch bs[i].Type {
			case llm.BlockText:
				parts = append(parts, bs[i].Text)
			case llm.BlockToolResult:
				collect(bs[i].Content)
			}
		}
	}
	if len(m.Content) == 1 && m.Content[0].Type == llm.BlockText {
		return m.Content[0].Text
	}
	collect(m.Content)
	return strings.Join(parts, "\n\n")
}

// toolID returns "toolu_" and 24 base-62 characters drawn from r.
func toolID(r *rng) string {
	const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	var b [6 + 24]byte
	copy(b[:], "toolu_")
	for i := 6; i < len(b); i++ {
		b[i] = alphabet[r.intn(len(alphabet))]
	}
	return string(b[:])
}

// The JSON Schema subset the input generator follows: type (a name or a list of names; the first
// that is not "null" is used), properties (in the schema's order), required, items (a schema, or
// a list whose first schema is used), enum, const, anyOf/oneOf (the first option that is not
// null), minimum/maximum and exclusiveMinimum/exclusiveMaximum (numbers or draft-4 booleans),
// minLength/maxLength, minItems/maxItems, a few string formats (date-time, date, time, email,
// uri, uuid, hostname, ipv4, ipv6), and local $ref: a JSON pointer into the tool's schema
// ("#/$defs/Name", "#/definitions/Name", "#" itself or any deeper path), which stands for the
// schema it points to (its sibling keywords are ignored, as in draft 7). Other keywords and other
// references are ignored; a schema that is not valid JSON counts as {}.
type schema struct {
	Ref              string            `json:"$ref"`
	Type             json.RawMessage   `json:"type"`
	Properties       json.RawMessage   `json:"properties"`
	Required         []string          `json:"required"`
	Items            json.RawMessage   `json:"items"`
	Enum             []json.RawMessage `json:"enum"`
	Const            json.RawMessage   `json:"const"`
	AnyOf            []json.RawMessage `json:"anyOf"`
	OneOf            []json.RawMessage `json:"oneOf"`
	Minimum          *float64          `json:"minimum"`
	Maximum          *float64          `json:"maximum"`
	ExclusiveMinimum json.RawMessage   `json:"exclusiveMinimum"`
	ExclusiveMaximum json.RawMessage   `json:"exclusiveMaximum"`
	MinLength        *float64          `json:"minLength"`
	MaxLength        *float64          `json:"maxLength"`
	MinItems         *float64          `json:"minItems"`
	MaxItems         *float64          `json:"maxItems"`
	Format           string            `json:"format"`
}

// Sizes: a schema can ask for more than a simulated model should write, so minLength and
// minItems are honoured up to these caps only (a client's schema must not make the engine build
// a gigabyte of input).
// maxValues bounds the values of one input: nested arrays multiply, and past the budget every
// further value is null, valid or not.
const (
	maxStringLen = 4096
	maxItems     = 64
	maxValues    = 4096
)

// Nesting: past minimalDepth, values are minimal (required properties, fewest items) to keep
// the input small; past maxDepth, objects and arrays are left empty even if the schema then
// requires more. Each level parses its sub-schema again, so the cap bounds the work an absurdly
// deep schema can cause; a schema of reasonable depth always gets a valid input.
const (
	minimalDepth = 8
	maxDepth     = 32
)

// inputGen writes a tool input that follows a schema. minimal asks for the smallest valid
// value: required properties only, fewest items, one-word strings.
type inputGen struct {
	r       rng
	minimal bool
	left    int             // values still allowed
	root    json.RawMessage // the tool's whole schema, which $ref points into
	refs    map[string]json.RawMessage
}

// object appends a JSON object for the tool's input schema: the input is an object even where
// the schema says nothing.
func (g *inputGen) object(dst []byte, raw json.RawMessage) []byte {
	g.left, g.root, g.refs = maxValues, raw, nil
	var s schema
	if json.Unmarshal(raw, &s) != nil {
		return append(dst, "{}"...)
	}
	// The root may itself be a reference ({"$ref":"#/$defs/Input","$defs":{…}}).
	for depth := 0; s.Ref != "" && depth < maxDepth; depth++ {
		target, ok := g.resolve(s.Ref)
		if !ok {
			break
		}
		s = schema{}
		if json.Unmarshal(target, &s) != nil {
			break
		}
	}
	return g.objectOf(dst, &s, 0)
}

func (g *inputGen) value(dst []byte, raw json.RawMessage, depth int) []byte {
	if g.left <= 0 {
		return append(dst, "null"...)
	}
	g.left--
	var s schema
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
		return g.str(dst, &s)
	}
	// Following a reference counts as a level of nesting, so a schema that refers to itself
	// (a tree, or two definitions that name each other) ends at maxDepth; past it, or when the
	// reference points nowhere, the other keywords decide.
	if s.Ref != "" && depth < maxDepth {
		if target, ok := g.resolve(s.Ref); ok {
			g.left++ // the target is the same value
			return g.value(dst, target, depth+1)
		}
	}
	if len(s.Const) > 0 {
		return append(dst, compact(s.Const)...)
	}
	if len(s.Enum) > 0 {
		return append(dst, compact(s.Enum[g.r.intn(len(s.Enum))])...)
	}
	for _, opts := range [][]json.RawMessage{s.AnyOf, s.OneOf} {
		if len(opts) > 0 {
			for _, o := range opts {
				if !isNullSchema(o) {
					return g.value(dst, o, depth)
				}
			}
			return append(dst, "null"...)
		}
	}
	switch typeOf(&s) {
	case "object":
		if depth >= maxDepth {
			return append(dst, "{}"...)
		}
		return g.objectOf(dst, &s, depth)
	case "array":
		if depth >= maxDepth {
			return append(dst, "[]"...)
		}
		return g.array(dst, &s, depth)
	case "integer":
		return g.integer(dst, &s)
	case "number":
		return g.number(dst, &s)
	case "boolean":
		return strconv.AppendBool(dst, g.r.intn(2) == 0)
	case "null":
		return append(dst, "null"...)
	}
	return g.str(dst, &s)
}

// typeOf returns the type to generate: the first non-null name of "type", else what the other
// keywords imply.
func typeOf(s *schema) string {
	var name string
	var names []string
	switch {
	case json.Unmarshal(s.Type, &name) == nil:
		return name
	case json.Unmarshal(s.Type, &names) == nil && len(names) > 0:
		for _, n := range names {
			if n != "null" {
				return n
			}
		}
		return "null"
	case len(s.Properties) > 0 || len(s.Required) > 0:
		return "object"
	case len(s.Items) > 0:
		return "array"
	}
	return "string"
}

// resolve returns the schema a local reference points to: "#" is the root, "#/a/b" a JSON
// pointer into it (RFC 6901; "~1" is "/", "~0" is "~"; percent-encoding as in a URI fragment).
// Each reference is looked up once per input.
func (g *inputGen) resolve(ref string) (json.RawMessage, bool) {
	if target, ok := g.refs[ref]; ok {
		return target, target != nil
	}
	target := pointer(g.root, ref)
	if g.refs == nil {
		g.refs = make(map[string]json.RawMessage)
	}
	g.refs[ref] = target
	return target, target != nil
}

// pointer follows the URI-fragment JSON pointer ref through doc; nil when it points nowhere.
func pointer(doc json.RawMessage, ref string) json.RawMessage {
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return nil // a reference to another document
	}
	if u, err := url.PathUnescape(frag); err == nil {
		frag = u
	}
	if frag == "" {
		return doc
	}
	if frag[0] != '/' {
		return nil // an anchor ("#name"), not a pointer
	}
	cur := doc
	for _, tok := range strings.Split(frag[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		var obj map[string]json.RawMessage
		var arr []json.RawMessage
		switch {
		case json.Unmarshal(cur, &obj) == nil && obj != nil:
			next, ok := obj[tok]
			if !ok {
				return nil
			}
			cur = next
		case json.Unmarshal(cur, &arr) == nil:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(arr) {
				return nil
			}
			cur = arr[i]
		default:
			return nil
		}
	}
	return cur
}

func isNullSchema(raw json.RawMessage) bool {
	var s schema
	return json.Unmarshal(raw, &s) == nil && typeOf(&s) == "null" && len(s.Type) > 0
}

func compact(raw json.RawMessage) []byte {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return []byte("null")
	}
	return b.Bytes()
}

func (g *inputGen) objectOf(dst []byte, s *schema, depth int) []byte {
	keys, vals := properties(s.Properties)
	required := func(k string) bool {
		for _, r := range s.Required {
			if r == k {
				return true
			}
		}
		return false
	}
	minimal := g.minimal || depth >= minimalDepth
	dst = append(dst, '{')
	n := 0
	for i, k := range keys {
		if !required(k) && (minimal || g.r.intn(3) == 0) {
			continue
		}
		dst = appendKey(dst, &n, k)
		dst = g.value(dst, vals[i], depth+1)
	}
	for _, r := range s.Required { // required but not described: any value will do
		if slices.Contains(keys, r) {
			continue
		}
		dst = appendKey(dst, &n, r)
		dst = jsontext.AppendString(dst, g.words(1))
	}
	return append(dst, '}')
}

// appendKey appends the name k of an object's next member, the n-th (from 0, counted in n),
// and its colon; a comma separates it from the member before.
func appendKey(dst []byte, n *int, k string) []byte {
	if *n > 0 {
		dst = append(dst, ',')
	}
	*n++
	dst = jsontext.AppendString(dst, k)
	return append(dst, ':')
}

// properties returns the property names and schemas of a "properties" object in document order.
func properties(raw json.RawMessage) ([]string, []json.RawMessage) {
	if len(raw) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil
	}
	var keys []string
	var vals []json.RawMessage
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil
		}
		if slices.Contains(keys, k) { // a duplicate key: JSON decoders keep the last
			continue
		}
		keys = append(keys, k)
		vals = append(vals, v)
	}
	return keys, vals
}

func (g *inputGen) array(dst []byte, s *schema, depth int) []byte {
	lo, hi := 0.0, float64(maxItems)
	if s.MinItems != nil {
		lo = math.Min(math.Max(0, math.Ceil(*s.MinItems)), maxItems)
	}
	if s.MaxItems != nil {
		hi = math.Min(hi, math.Floor(*s.MaxItems))
	}
	n := 1 + g.r.intn(3)
	if g.minimal || depth >= minimalDepth {
		n = 0
	}
	n = max(int(lo), min(n, int(hi)))
	items := s.Items
	if len(items) > 0 && items[0] == '[' {
		var list []json.RawMessage
		if json.Unmarshal(items, &list) == nil && len(list) > 0 {
			items = list[0]
		} else {
			items = nil
		}
	}
	dst = append(dst, '[')
	for i := 0; i < n && g.left > 0; i++ {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = g.value(dst, items, depth+1)
	}
	return append(dst, ']')
}

// bounds returns the inclusive or exclusive limits of a number schema; a draft-4 boolean
// exclusiveMinimum makes minimum exclusive.
func bounds(s *schema) (lo, hi float64, hasLo, hasHi, exLo, exHi bool) {
	if s.Minimum != nil {
		lo, hasLo = *s.Minimum, true
	}
	if s.Maximum != nil {
		hi, hasHi = *s.Maximum, true
	}
	var f float64
	var b bool
	if json.Unmarshal(s.ExclusiveMinimum, &f) == nil {
		if !hasLo || f >= lo {
			lo, hasLo, exLo = f, true, true
		}
	} else if json.Unmarshal(s.ExclusiveMinimum, &b) == nil && b && hasLo {
		exLo = true
	}
	if json.Unmarshal(s.ExclusiveMaximum, &f) == nil {
		if !hasHi || f <= hi {
			hi, hasHi, exHi = f, true, true
		}
	} else if json.Unmarshal(s.ExclusiveMaximum, &b) == nil && b && hasHi {
		exHi = true
	}
	switch {
	case !hasLo && !hasHi:
		lo, hi = 0, 100
	case !hasHi:
		hi = lo + 100
	case !hasLo:
		lo = hi - 100
	}
	return lo, hi, hasLo, hasHi, exLo, exHi
}

const maxSafe = 1 << 53 // integers beyond this do not survive float64

func (g *inputGen) integer(dst []byte, s *schema) []byte {
	flo, fhi, _, _, exLo, exHi := bounds(s)
	lo, hi := math.Ceil(flo), math.Floor(fhi)
	if exLo && lo == flo {
		lo++
	}
	if exHi && hi == fhi {
		hi--
	}
	lo, hi = math.Max(lo, -maxSafe), math.Min(hi, maxSafe)
	v := lo
	if hi > lo && !g.minimal {
		v = lo + float64(g.r.next()%uint64(math.Min(hi-lo, 1000)+1))
	}
	return strconv.AppendInt(dst, int64(v), 10)
}

func (g *inputGen) number(dst []byte, s *schema) []byte {
	lo, hi, _, _, exLo, exHi := bounds(s)
	frac := float64(1+g.r.intn(999)) / 1000 // strictly inside (0, 1)
	v := lo + (hi-lo)*frac
	if math.IsInf(hi-lo, 0) { // bounds near ±MaxFloat64
		v = lo/2 + hi/2
	}
	if r := math.Round(v*100) / 100; (r > lo || !exLo && r == lo) && (r < hi || !exHi && r == hi) {
		v = r
	}
	if !exLo && !exHi && g.minimal {
		v = lo
	}
	return strconv.AppendFloat(dst, v, 'f', -1, 64)
}

func (g *inputGen) str(dst []byte, s *schema) []byte {
	var v string
	switch s.Format {
	case "date-time":
		v = "2025-01-01T12:00:00Z"
	case "date":
		v = "2025-01-01"
	case "time":
		v = "12:00:00"
	case "email":
		v = "sim@example.com"
	case "uri", "url", "uri-reference", "iri":
		v = "https://example.com/sim"
	case "uuid":
		v = "00000000-0000-4000-8000-" + strconv.FormatUint(1<<48|g.r.next()&(1<<48-1), 16)[1:] // 12 digits
	case "hostname":
		v = "example.com"
	case "ipv4":
		v = "192.0.2.1"
	case "ipv6":
		v = "2001:db8::1"
	default:
		n := 1 + g.r.intn(3)
		if g.minimal {
			n = 1
		}
		v = g.words(n)
	}
	if s.MinLength != nil {
		if n := int(math.Min(math.Ceil(*s.MinLength), maxStringLen)); len(v) < n {
			if s.Format == "" {
				// Prose is lengthened with more words, as a model would write it: the answer
				// reads as text, not as text padded with x.
				for len(v) < n {
					v += " " + g.words(1)
				}
			} else {
				v += strings.Repeat("x", n-len(v)) // a format's value cannot take words
			}
		}
	}
	if s.MaxLength != nil {
		if n := max(0, int(math.Floor(*s.MaxLength))); len(v) > n {
			v = v[:n] // generated strings are ASCII
		}
	}
	return jsontext.AppendString(dst, v)
}

// words returns n lorem words separated by spaces.
func (g *inputGen) words(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		list := grammar.noun
		if i < n-1 {
			list = grammar.adj
		}
		b.WriteString(list[g.r.intn(len(list))])
	}
	return b.String()
}
