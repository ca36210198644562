package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/llm"
)

// check validates instance v (decoded with UseNumber) against schema s, for the subset the
// generator claims to follow, and returns the first violation with its path.
func check(v any, s map[string]any, path string) error { return checkIn(v, s, s, path, 0) }

// checkIn is check inside the root schema root, which local $refs point into; hops counts the
// references followed without descending into v.
func checkIn(v any, s, root map[string]any, path string, hops int) error {
	if ref, ok := s["$ref"].(string); ok {
		if hops > 64 {
			return fmt.Errorf("%s: $ref %q loops", path, ref)
		}
		target, err := testPointer(root, ref)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		return checkIn(v, target, root, path, hops+1)
	}
	check := func(v any, s map[string]any, path string) error { return checkIn(v, s, root, path, 0) }
	if c, ok := s["const"]; ok && !jsonEqual(v, c) {
		return fmt.Errorf("%s: %v is not the const %v", path, v, c)
	}
	if e, ok := s["enum"].([]any); ok {
		found := false
		for _, x := range e {
			found = found || jsonEqual(v, x)
		}
		if !found {
			return fmt.Errorf("%s: %v not in enum %v", path, v, e)
		}
	}
	for _, key := range []string{"anyOf", "oneOf"} {
		if opts, ok := s[key].([]any); ok {
			n := 0
			for _, o := range opts {
				if check(v, o.(map[string]any), path) == nil {
					n++
				}
			}
			if n == 0 || key == "oneOf" && n > 1 {
				return fmt.Errorf("%s: %v matches %d of the %s options", path, v, n, key)
			}
		}
	}
	if t, ok := s["type"]; ok {
		var types []string
		switch t := t.(type) {
		case string:
			types = []string{t}
		case []any:
			for _, x := range t {
				types = append(types, x.(string))
			}
		}
		match := false
		for _, t := range types {
			match = match || hasType(v, t)
		}
		if !match {
			return fmt.Errorf("%s: %#v is not of type %v", path, v, types)
		}
	}
	switch v := v.(type) {
	case map[string]any:
		props, _ := s["properties"].(map[string]any)
		for k, pv := range v {
			ps, ok := props[k]
			if !ok {
				if s["additionalProperties"] == false {
					return fmt.Errorf("%s: unexpected property %q", path, k)
				}
				continue
			}
			if err := check(pv, ps.(map[string]any), path+"."+k); err != nil {
				return err
			}
		}
		req, _ := s["required"].([]any)
		for _, r := range req {
			if _, ok := v[r.(string)]; !ok {
				return fmt.Errorf("%s: required property %q missing", path, r)
			}
		}
	case []any:
		if n, ok := num(s["minItems"]); ok && float64(len(v)) < n {
			return fmt.Errorf("%s: %d items, want at least %v", path, len(v), n)
		}
		if n, ok := num(s["maxItems"]); ok && float64(len(v)) > n {
			return fmt.Errorf("%s: %d items, want at most %v", path, len(v), n)
		}
		items, _ := s["items"].(map[string]any)
		if list, ok := s["items"].([]any); ok && len(list) > 0 {
			items = list[0].(map[string]any)
		}
		for i, x := range v {
			if items != nil {
				if err := check(x, items, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
	case string:
		n := float64(utf8.RuneCountInString(v))
		if m, ok := num(s["minLength"]); ok && n < m {
			return fmt.Errorf("%s: %q shorter than %v", path, v, m)
		}
		if m, ok := num(s["maxLength"]); ok && n > m {
			return fmt.Errorf("%s: %q longer than %v", path, v, m)
		}
		if err := checkFormat(v, s["format"]); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	case json.Number:
		f, _ := v.Float64()
		lo, hasLo := num(s["minimum"])
		hi, hasHi := num(s["maximum"])
		if hasLo && (f < lo || s["exclusiveMinimum"] == true && f == lo) {
			return fmt.Errorf("%s: %v below minimum %v", path, f, lo)
		}
		if hasHi && (f > hi || s["exclusiveMaximum"] == true && f == hi) {
			return fmt.Errorf("%s: %v above maximum %v", path, f, hi)
		}
		if x, ok := num(s["exclusiveMinimum"]); ok && f <= x {
			return fmt.Errorf("%s: %v not above %v", path, f, x)
		}
		if x, ok := num(s["exclusiveMaximum"]); ok && f >= x {
			return fmt.Errorf("%s: %v not below %v", path, f, x)
		}
	}
	return nil
}

// testPointer resolves a local $ref in root, independently of the generator's resolver.
func testPointer(root map[string]any, ref string) (map[string]any, error) {
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return nil, fmt.Errorf("$ref %q is not local", ref)
	}
	if u, err := url.PathUnescape(frag); err == nil {
		frag = u
	}
	var cur any = root
	if frag != "" {
		for _, tok := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
			tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
			m, ok := cur.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("$ref %q: %q is not in an object", ref, tok)
			}
			if cur, ok = m[tok]; !ok {
				return nil, fmt.Errorf("$ref %q: no %q", ref, tok)
			}
		}
	}
	m, ok := cur.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("$ref %q does not point to a schema", ref)
	}
	return m, nil
}

func hasType(v any, t string) bool {
	switch v := v.(type) {
	case map[string]any:
		return t == "object"
	case []any:
		return t == "array"
	case string:
		return t == "string"
	case bool:
		return t == "boolean"
	case nil:
		return t == "null"
	case json.Number:
		if t == "number" {
			return true
		}
		f, err := v.Float64()
		return t == "integer" && err == nil && f == math.Trunc(f)
	}
	return false
}

func num(x any) (float64, bool) {
	switch x := x.(type) {
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	case float64:
		return x, true
	}
	return 0, false
}

func jsonEqual(a, b any) bool {
	norm := func(x any) any {
		var out any
		raw, _ := json.Marshal(x)
		_ = json.Unmarshal(raw, &out)
		return out
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func checkFormat(v string, f any) error {
	var ok bool
	switch f {
	case "date-time":
		_, err := time.Parse(time.RFC3339, v)
		ok = err == nil
	case "date":
		_, err := time.Parse(time.DateOnly, v)
		ok = err == nil
	case "email":
		ok = strings.Count(v, "@") == 1
	case "uri":
		u, err := url.Parse(v)
		ok = err == nil && u.Scheme != ""
	case "uuid":
		ok = uuidRE.MatchString(v)
	case "ipv4":
		ok = net.ParseIP(v).To4() != nil
	case "ipv6":
		ok = net.ParseIP(v) != nil && strings.Contains(v, ":")
	default:
		ok = true
	}
	if !ok {
		return fmt.Errorf("%q is not a %v", v, f)
	}
	return nil
}

func decodeSchema(t *testing.T, raw string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var s map[string]any
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("bad test schema %s: %v", raw, err)
	}
	return s
}

func decodeInput(t *testing.T, raw []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("tool input %s is not JSON: %v", raw, err)
	}
	return v
}

var schemas = map[string]string{
	"weather":                  `{"type":"object","properties":{"city":{"type":"string","minLength":2},"unit":{"type":"string","enum":["celsius","fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city"],"additionalProperties":false}`,
	"all types":                `{"type":"object","properties":{"s":{"type":"string"},"n":{"type":"number"},"i":{"type":"integer"},"b":{"type":"boolean"},"z":{"type":"null"},"a":{"type":"array","items":{"type":"integer"}},"o":{"type":"object","properties":{"x":{"type":"string"}},"required":["x"]}},"required":["s","n","i","b","z","a","o"]}`,
	"nested arrays of objects": `{"type":"object","properties":{"rows":{"type":"array","minItems":2,"maxItems":4,"items":{"type":"object","properties":{"id":{"type":"integer","minimum":100},"tags":{"type":"array","maxItems":1,"items":{"type":"string","maxLength":3}}},"required":["id","tags"]}}},"required":["rows"]}`,
	"bounds":                   `{"type":"object","properties":{"p":{"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1},"q":{"type":"integer","exclusiveMinimum":-5,"maximum":-3},"r":{"type":"number","minimum":10,"exclusiveMinimum":true,"maximum":10.5},"s":{"type":"number","minimum":1e6},"t":{"type":"integer","maximum":-1000}},"required":["p","q","r","s","t"]}`,
	"enum const anyOf":         `{"type":"object","properties":{"mixed":{"enum":[1,"two",true,null,{"k":[3]}]},"fixed":{"const":"v1"},"maybe":{"anyOf":[{"type":"null"},{"type":"string","format":"date"}]},"either":{"oneOf":[{"type":"integer"},{"type":"string"}]}},"required":["mixed","fixed","maybe","either"]}`,
	"type lists":               `{"type":"object","properties":{"a":{"type":["null","integer"]},"b":{"type":["string","null"],"maxLength":5}},"required":["a","b"]}`,
	"formats":                  `{"type":"object","properties":{"when":{"type":"string","format":"date-time"},"day":{"type":"string","format":"date"},"mail":{"type":"string","format":"email"},"link":{"type":"string","format":"uri"},"id":{"type":"string","format":"uuid"},"v4":{"type":"string","format":"ipv4"},"v6":{"type":"string","format":"ipv6"}},"required":["when","day","mail","link","id","v4","v6"]}`,
	"implicit types":           `{"properties":{"obj":{"properties":{"k":{"type":"boolean"}},"required":["k"]},"list":{"items":{"type":"number"},"minItems":1}},"required":["obj","list","undeclared"]}`,
	"awkward names":            `{"type":"object","properties":{"quote\"d":{"type":"string"},"back\\slash":{"type":"integer"},"日本":{"type":"boolean"},"ctl\u0001":{"type":"string"}},"required":["quote\"d","back\\slash","日本","ctl\u0001"]}`,
	"empty":                    `{}`,
	"no properties":            `{"type":"object"}`,
	"tuple items":              `{"type":"object","properties":{"pair":{"type":"array","items":[{"type":"string"}],"minItems":1}},"required":["pair"]}`,
	"deep":                     deepSchema(12),
	"$defs refs":               `{"type":"object","properties":{"home":{"$ref":"#/$defs/Address"},"work":{"$ref":"#/$defs/Address"},"tag":{"anyOf":[{"$ref":"#/$defs/Tag"},{"type":"null"}]}},"required":["home","tag"],"$defs":{"Address":{"type":"object","properties":{"city":{"type":"string","minLength":2},"zip":{"type":"string","maxLength":5},"unit":{"$ref":"#/$defs/Unit"}},"required":["city","zip","unit"],"additionalProperties":false},"Unit":{"enum":["c","f"]},"Tag":{"type":"string","format":"uuid"}}}`,
	"definitions refs":         `{"type":"object","properties":{"unit":{"$ref":"#/definitions/Unit"},"list":{"type":"array","minItems":1,"items":{"$ref":"#/definitions/Unit"}}},"required":["unit","list"],"definitions":{"Unit":{"type":"integer","minimum":3,"maximum":4}}}`,
	"root ref":                 `{"$ref":"#/$defs/Input","$defs":{"Input":{"type":"object","properties":{"q":{"type":"integer","minimum":5}},"required":["q"],"additionalProperties":false}}}`,
	"recursive ref":            `{"type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#"}}},"required":["name","children"]}`,
	"escaped pointers":         `{"type":"object","properties":{"a":{"$ref":"#/$defs/a~1b"},"t":{"$ref":"#/properties/a"},"s":{"$ref":"#/$defs/x%20y"},"i":{"$ref":"#/$defs/t~0"}},"required":["a","t","s","i"],"$defs":{"a/b":{"type":"boolean"},"x y":{"const":"spaced"},"t~":{"type":"integer","maximum":-7}}}`,
}

// deepSchema nests objects n levels deep, past maxDepth.
func deepSchema(n int) string {
	s := `{"type":"string"}`
	for i := range n {
		s = fmt.Sprintf(`{"type":"object","properties":{"p%d":%s},"required":["p%d"]}`, i, s, i)
	}
	return s
}

// TestToolInputFollowsSchema generates inputs for every schema with many seeds, in full and in
// minimal form, and validates each with the checker above.
func TestToolInputFollowsSchema(t *testing.T) {
	for name, raw := range schemas {
		t.Run(name, func(t *testing.T) {
			s := decodeSchema(t, raw)
			for seed := range uint64(200) {
				for _, minimal := range []bool{false, true} {
					g := inputGen{r: rng(seed), minimal: minimal}
					out := g.object(nil, json.RawMessage(raw))
					v := decodeInput(t, out)
					if _, ok := v.(map[string]any); !ok {
						t.Fatalf("seed %d: input %s is not an object", seed, out)
					}
					if err := check(v, s, "input"); err != nil {
						t.Fatalf("seed %d minimal %v: input %s: %v", seed, minimal, out, err)
					}
				}
			}
		})
	}
}

func TestToolInputInvalidSchema(t *testing.T) {
	g := inputGen{r: rng(1)}
	if got := string(g.object(nil, json.RawMessage(`{not json`))); got != "{}" {
		t.Errorf("input for an invalid schema = %s, want {}", got)
	}
}

func TestToolInputTooDeep(t *testing.T) {
	g := inputGen{r: rng(1)}
	out := g.object(nil, json.RawMessage(deepSchema(200)))
	if !json.Valid(out) {
		t.Fatalf("input for a 200-level schema is not JSON: %s", out)
	}
	if depth := bytes.Count(out, []byte("{")); depth != maxDepth+1 {
		t.Errorf("input nests %d objects, want the cap %d", depth, maxDepth+1)
	}
}

func TestToolInputBudget(t *testing.T) {
	s := `{"type":"string"}`
	for range 8 {
		s = `{"type":"array","minItems":64,"items":` + s + `}`
	}
	g := inputGen{r: rng(1)}
	start := time.Now()
	out := g.object(nil, json.RawMessage(`{"properties":{"a":`+s+`},"required":["a"]}`))
	if !json.Valid(out) {
		t.Fatalf("input is not JSON: %.200s", out)
	}
	if n := bytes.Count(out, []byte(",")); n > maxValues {
		t.Errorf("input has %d values, want at most the budget %d", n, maxValues)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d) // a backstop: 64^8 values would never finish
	}
}

// TestToolInputRefLoops checks that references that never reach a value end: the generator
// follows at most maxDepth of them, then uses the keywords beside the reference.
func TestToolInputRefLoops(t *testing.T) {
	tests := []struct {
		name, schema string
		want         string // a schema without references the input must follow
	}{
		{"two definitions naming each other", `{"type":"object","properties":{"a":{"$ref":"#/$defs/A"}},"required":["a"],"$defs":{"A":{"$ref":"#/$defs/B"},"B":{"$ref":"#/$defs/A","type":"integer"}}}`,
			`{"properties":{"a":{"type":["integer","string"]}},"required":["a"],"additionalProperties":false}`},
		{"a definition naming itself", `{"type":"object","properties":{"a":{"$ref":"#/$defs/A"}},"required":["a"],"$defs":{"A":{"$ref":"#/$defs/A","type":"boolean"}}}`,
			`{"properties":{"a":{"type":"boolean"}},"required":["a"],"additionalProperties":false}`},
		{"the root naming itself", `{"$ref":"#"}`, `{"additionalProperties":false}`},
		{"missing and remote references", `{"type":"object","properties":{"a":{"$ref":"#/$defs/Missing","type":"integer"},"b":{"$ref":"https://example.com/s.json","type":"null"},"c":{"$ref":"#anchor","const":1}},"required":["a","b","c"]}`,
			`{"properties":{"a":{"type":"integer"},"b":{"type":"null"},"c":{"const":1}},"required":["a","b","c"],"additionalProperties":false}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for seed := range uint64(20) {
				for _, minimal := range []bool{false, true} {
					g := inputGen{r: rng(seed), minimal: minimal}
					out := g.object(nil, json.RawMessage(tt.schema))
					if err := check(decodeInput(t, out), decodeSchema(t, tt.want), "input"); err != nil {
						t.Fatalf("seed %d minimal %v: input %s: %v", seed, minimal, out, err)
					}
				}
			}
		})
	}
}

func TestToolInputPropertyOrder(t *testing.T) {
	g := inputGen{r: rng(1), minimal: true}
	got := string(g.object(nil, json.RawMessage(`{"properties":{"z":{"type":"integer"},"a":{"type":"integer"},"m":{"type":"integer"}},"required":["m","z","a"]}`)))
	if want := `{"z":0,"a":0,"m":0}`; got != want {
		t.Errorf("minimal input = %s, want %s (the schema's property order)", got, want)
	}
}

var toolIDRE = regexp.MustCompile(`^toolu_[0-9A-Za-z]{24}$`)

func toolReq(text string, choice llm.ToolChoice) *llm.Request {
	r := userReq(text)
	r.Tools = []llm.Tool{
		{Name: "get_weather", Description: "Current weather.", InputSchema: json.RawMessage(schemas["weather"])},
		{Name: "search_docs", Description: "Search.", InputSchema: json.RawMessage(schemas["nested arrays of objects"])},
	}
	r.ToolChoice = choice
	return r
}

func TestToolChoice(t *testing.T) {
	toolResult := toolReq("thanks", llm.ToolChoice{})
	toolResult.Messages = append(toolResult.Messages,
		llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockToolUse, ID: "toolu_x", Name: "get_weather", Input: json.RawMessage(`{"city":"Paris"}`)}}},
		llm.Message{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockToolResult, ToolUseID: "toolu_x", Content: []llm.Block{{Type: llm.BlockText, Text: "get_weather says 18C"}}}}})
	tests := []struct {
		name   string
		req    *llm.Request
		blocks []llm.BlockType
		tool   string // the tool called, if any
		stop   llm.StopReason
	}{
		{"none", toolReq("use get_weather please", llm.ToolChoice{Type: llm.ToolNone}), []llm.BlockType{llm.BlockText}, "", llm.StopEndTurn},
		{"auto, named in the message", toolReq("What does get_weather say for Paris?", llm.ToolChoice{}), []llm.BlockType{llm.BlockText, llm.BlockToolUse}, "get_weather", llm.StopToolUse},
		{"auto, not named", toolReq("Tell me a story.", llm.ToolChoice{}), []llm.BlockType{llm.BlockText}, "", llm.StopEndTurn},
		{"auto, after a tool result", toolResult, []llm.BlockType{llm.BlockText}, "", llm.StopEndTurn},
		{"any, named in the message", toolReq("try search_docs", llm.ToolChoice{Type: llm.ToolAny}), []llm.BlockType{llm.BlockToolUse}, "search_docs", llm.StopToolUse},
		{"named wins over the message", toolReq("try search_docs", llm.ToolChoice{Type: llm.ToolNamed, Name: "get_weather"}), []llm.BlockType{llm.BlockToolUse}, "get_weather", llm.StopToolUse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, err := generate(t, newEngine(t, config.Sim{}), tt.req)
			if err != nil {
				t.Fatal(err)
			}
			resp := rec.coll.Response
			var got []llm.BlockType
			for _, b := range resp.Content {
				got = append(got, b.Type)
			}
			if !reflect.DeepEqual(got, tt.blocks) || resp.Stop != tt.stop {
				t.Fatalf("blocks %v stop %v, want %v %v", got, resp.Stop, tt.blocks, tt.stop)
			}
			if tt.tool == "" {
				return
			}
			call := resp.Content[len(resp.Content)-1]
			if call.Name != tt.tool || !toolIDRE.MatchString(call.ID) {
				t.Errorf("call %q id %q, want %q and an id like toolu_ + 24 characters", call.Name, call.ID, tt.tool)
			}
			var schema string
			for _, tl := range tt.req.Tools {
				if tl.Name == call.Name {
					schema = string(tl.InputSchema)
				}
			}
			if err := check(decodeInput(t, call.Input), decodeSchema(t, schema), "input"); err != nil {
				t.Errorf("input %s: %v", call.Input, err)
			}
			fragments := 0
			for _, ev := range rec.events {
				if ev.Kind == llm.EventToolDelta {
					fragments++
				}
			}
			if fragments < 2 {
				t.Errorf("input streamed in %d fragments, want several", fragments)
			}
			if resp.Usage.OutputTokens < fragments {
				t.Errorf("OutputTokens %d < %d fragments", resp.Usage.OutputTokens, fragments)
			}
		})
	}
}

// The input the user writes after the tool's name is the call's input, and a system message
// after the user's does not hide it.
func TestToolGivenInput(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"object after the name", `Use get_weather {"city": "Lyon", "days": [1, 2]} now`, `{"city":"Lyon","days":[1,2]}`},
		{"after a colon", "get_weather:\n{\"city\":\"Oslo\"}", `{"city":"Oslo"}`},
		{"not an object: the schema's", `get_weather ["Lyon"]`, ""},
		{"broken JSON: the schema's", `get_weather {"city": `, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := toolReq(tt.text, llm.ToolChoice{})
			req.Messages = append(req.Messages, llm.Message{Role: llm.RoleSystem, Content: []llm.Block{{Type: llm.BlockText, Text: "search_docs"}}})
			resp := mustGenerate(t, newEngine(t, config.Sim{}), req)
			call := resp.Content[len(resp.Content)-1]
			if call.Type != llm.BlockToolUse || call.Name != "get_weather" {
				t.Fatalf("last block %v %q, want a get_weather call", call.Type, call.Name)
			}
			if tt.want != "" && string(call.Input) != tt.want {
				t.Errorf("input %s, want %s", call.Input, tt.want)
			}
			if tt.want == "" {
				if err := check(decodeInput(t, call.Input), decodeSchema(t, string(req.Tools[0].InputSchema)), "input"); err != nil {
					t.Errorf("input %s: %v", call.Input, err)
				}
			}
		})
	}
}

func TestToolChoiceDeterministic(t *testing.T) {
	req := toolReq("pick one", llm.ToolChoice{Type: llm.ToolAny})
	a := mustGenerate(t, newEngine(t, config.Sim{}), req)
	b := mustGenerate(t, newEngine(t, config.Sim{}), req)
	if !reflect.DeepEqual(a.Content, b.Content) {
		t.Errorf("same request, different calls:\n%+v\n%+v", a.Content, b.Content)
	}
}

func TestToolNamedMissing(t *testing.T) {
	_, err := generate(t, newEngine(t, config.Sim{}), toolReq("x", llm.ToolChoice{Type: llm.ToolNamed, Name: "nope"}))
	var ae *apierr.Error
	if !errors.As(err, &ae) || ae.Kind != apierr.InvalidRequest || ae.Param != "tool_choice.name" {
		t.Errorf("err = %v, want a 400 about tool_choice.name", err)
	}
}

func TestToolMaxTokens(t *testing.T) {
	e := newEngine(t, config.Sim{})
	// Find the full call's size, then allow just less: the minimal input must be used.
	req := toolReq("x", llm.ToolChoice{Type: llm.ToolNamed, Name: "search_docs"})
	full := mustGenerate(t, e, req)
	req.MaxTokens = full.Usage.OutputTokens - 1
	small := mustGenerate(t, e, req)
	if small.Stop != llm.StopToolUse || small.Usage.OutputTokens > req.MaxTokens {
		t.Errorf("with max_tokens %d: stop %v after %d tokens, want a smaller tool call", req.MaxTokens, small.Stop, small.Usage.OutputTokens)
	}
	if err := check(decodeInput(t, small.Content[0].Input), decodeSchema(t, schemas["nested arrays of objects"]), "input"); err != nil {
		t.Errorf("minimal input %s: %v", small.Content[0].Input, err)
	}
}

// TestToolMaxTokensCut checks a forced call with no room for its input: as the real API does,
// the answer is the tool_use block with its input cut short (a JSON fragment, streamed as
// input_json_delta fragments) and stop reason max_tokens. A call the model would choose itself
// is not made: the answer is text.
func TestToolMaxTokensCut(t *testing.T) {
	e := newEngine(t, config.Sim{})
	for _, choice := range []llm.ToolChoice{{Type: llm.ToolNamed, Name: "search_docs"}, {Type: llm.ToolAny}} {
		req := toolReq("search_docs please", choice)
		full := mustGenerate(t, e, req)
		if full.Stop != llm.StopToolUse || len(full.Content) != 1 {
			t.Fatalf("%v: with room: %+v, want one complete call", choice.Type, full)
		}
		for _, maxTokens := range []int{1, 2, 5} {
			req.MaxTokens = maxTokens
			rec, err := generate(t, e, req)
			if err != nil {
				t.Fatal(err)
			}
			resp := rec.coll.Response
			if resp.Stop != llm.StopMaxTokens || resp.Usage.OutputTokens != maxTokens || len(resp.Content) != 1 {
				t.Fatalf("%v, max_tokens %d: stop %v after %d tokens, %d blocks; want max_tokens after %d tokens, 1 block",
					choice.Type, maxTokens, resp.Stop, resp.Usage.OutputTokens, len(resp.Content), maxTokens)
			}
			call := resp.Content[0]
			if call.Type != llm.BlockToolUse || call.Name != "search_docs" || !toolIDRE.MatchString(call.ID) {
				t.Errorf("%v, max_tokens %d: block %+v, want a search_docs tool_use", choice.Type, maxTokens, call)
			}
			// The input is a strict prefix of the complete call's (the same seed writes the same
			// input), so it is not valid JSON yet.
			if in := string(call.Input); in == "" || len(in) >= len(full.Content[0].Input) ||
				!strings.HasPrefix(string(full.Content[0].Input), in) || json.Valid(call.Input) {
				t.Errorf("%v, max_tokens %d: input %q, want a strict prefix of %s", choice.Type, maxTokens, in, full.Content[0].Input)
			}
			var fragments int
			for _, ev := range rec.events {
				switch ev.Kind {
				case llm.EventToolDelta:
					fragments++
				case llm.EventTextDelta:
					t.Errorf("%v, max_tokens %d: text delta %q, want none", choice.Type, maxTokens, ev.Text)
				}
			}
			if fragments == 0 || fragments > maxTokens {
				t.Errorf("%v, max_tokens %d: %d input fragments, want 1 to %d", choice.Type, maxTokens, fragments, maxTokens)
			}
		}
	}
	// tool_choice auto: the preface fits, the call does not; the model answers in text.
	req := toolReq("Ask search_docs.", llm.ToolChoice{})
	req.MaxTokens = 12
	resp := mustGenerate(t, e, req)
	if resp.Stop != llm.StopMaxTokens || len(resp.Content) != 1 || resp.Content[0].Type != llm.BlockText || resp.Usage.OutputTokens != 12 {
		t.Errorf("auto, max_tokens 12: %+v, want 12 tokens of text and max_tokens", resp)
	}
}

func TestToolStopSequenceInPreface(t *testing.T) {
	req := toolReq("ask get_weather", llm.ToolChoice{})
	req.StopSequences = []string{"the get"}
	resp := mustGenerate(t, newEngine(t, config.Sim{}), req)
	if resp.Stop != llm.StopSequence || len(resp.Content) != 1 || textOf(resp) != "I'll use " {
		t.Errorf("got %+v, want the preface cut before %q and no call", resp, "the get")
	}
}
