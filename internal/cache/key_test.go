package cache_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/layer0ai/layer0/internal/cache"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/anthropic"
	"github.com/layer0ai/layer0/internal/wire/openai"
)

func decodeAnthropic(t testing.TB, body string) *llm.Request {
	t.Helper()
	r, err := anthropic.DecodeRequest([]byte(body))
	if err != nil {
		t.Fatalf("anthropic decode: %v\n%s", err, body)
	}
	return r
}

func decodeOpenAI(t testing.TB, body string) *llm.Request {
	t.Helper()
	r, err := openai.DecodeRequest([]byte(body))
	if err != nil {
		t.Fatalf("openai decode: %v\n%s", err, body)
	}
	return r
}

// The same conversation — a system prompt, a tool, a tool call and its result — in both client
// formats and in several JSON spellings has one key.
func TestKeyEqualAcrossFormatsAndSpellings(t *testing.T) {
	anth := []string{
		`{"model":"m","max_tokens":100,"temperature":0,"top_p":0.5,"stop_sequences":["END"],
		  "system":"Be brief.",
		  "tools":[{"name":"get_weather","description":"Weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],
		  "messages":[{"role":"user","content":"Weather in Paris?"},
		    {"role":"assistant","content":[{"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Paris"}}]},
		    {"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"sunny"}]}]}`,
		// Keys reordered, whitespace, the system as a block list, the text as a block, the
		// stream flag, other JSON spellings of the same values.
		`{ "messages" : [ {"content":[{"text":"Weather in Paris?","type":"text"}],"role":"user"},
		    {"role":"assistant","content":[{"input":{ "city" : "Par\u0069s" },"name":"get_weather","id":"call_1","type":"tool_use"}]},
		    {"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":[{"type":"text","text":"sunny"}]}]}],
		  "stream": true, "stop_sequences":["END"], "top_p":5e-1, "temperature":0.0,
		  "system":[{"type":"text","text":"Be brief."}],
		  "tools":[{"input_schema":{"properties":{"city":{"type":"string"}},"type":"object"},"description":"Weather","name":"get_weather"}],
		  "max_tokens":100, "model":"m"}`,
	}
	oai := []string{
		`{"model":"m","max_tokens":100,"temperature":0,"top_p":0.5,"stop":["END"],
		  "tools":[{"type":"function","function":{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],
		  "messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Weather in Paris?"},
		    {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},
		    {"role":"tool","tool_call_id":"call_1","content":"sunny"}]}`,
		`{"messages":[{"content":"Be brief.","role":"system"},{"content":[{"type":"text","text":"Weather in Paris?"}],"role":"user"},
		    {"tool_calls":[{"function":{"arguments":"{\"city\":\"Paris\"}","name":"get_weather"},"type":"function","id":"call_1"}],"role":"assistant"},
		    {"content":"sunny","tool_call_id":"call_1","role":"tool"}],
		  "stop":"END","top_p":0.50,"temperature":0,"stream":true,"max_completion_tokens":100,"model":"m",
		  "tools":[{"function":{"parameters":{"properties":{"city":{"type":"string"}},"type":"object"},"description":"Weather","name":"get_weather"},"type":"function"}]}`,
	}
	var reqs []*llm.Request
	for _, b := range anth {
		reqs = append(reqs, decodeAnthropic(t, b))
	}
	for _, b := range oai {
		reqs = append(reqs, decodeOpenAI(t, b))
	}
	want := cache.KeyOf("", "m", reqs[0])
	for i, r := range reqs[1:] {
		if got := cache.KeyOf("", "m", r); got != want {
			a, _ := json.Marshal(reqs[0])
			b, _ := json.Marshal(r)
			t.Errorf("request %d: key %s, want %s\nfirst: %s\nthis:  %s", i+1, got, want, a, b)
		}
	}
}

// Every field that can change the answer changes the key.
func TestKeyDiffersForEveryFieldThatMatters(t *testing.T) {
	base := `{"model":"m","max_tokens":100,"temperature":0,"top_p":0.5,"top_k":40,"stop_sequences":["END"],
	  "system":"Be brief.","tool_choice":{"type":"auto"},
	  "tools":[{"name":"f","description":"d","input_schema":{"type":"object"}}],
	  "messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]},
	    {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok"}]}]}`
	variants := map[string]string{
		"system":          `"system":"Be long."`,
		"no system":       `"system":""`,
		"message text":    `"content":"hello"`,
		"role":            `{"role":"assistant","content":"hi"},{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]}`,
		"tool input":      `"input":{"a":2}`,
		"tool use id":     `"t2"`,
		"tool result":     `"content":"not ok"`,
		"tool error":      `"tool_use_id":"t1","is_error":true`,
		"tool name":       `"name":"g","description"`,
		"tool desc":       `"description":"e"`,
		"tool schema":     `"input_schema":{"type":"object","properties":{}}`,
		"tool choice":     `"tool_choice":{"type":"any"}`,
		"tool choice one": `"tool_choice":{"type":"tool","name":"f"}`,
		"max_tokens":      `"max_tokens":101`,
		"temperature":     `"temperature":0.1`,
		"no temperature":  `"temperature":null`,
		"top_p":           `"top_p":0.6`,
		"top_k":           `"top_k":41`,
		"stop":            `"stop_sequences":["FIN"]`,
		"no stop":         `"stop_sequences":[]`,
		"image":           `"content":[{"type":"text","text":"hi"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]`,
	}
	// Each variant replaces one piece of base.
	pieces := map[string]string{
		"system": `"system":"Be brief."`, "no system": `"system":"Be brief."`, "message text": `"content":"hi"`,
		"role":        `{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]}`,
		"tool input":  `"input":{"a":1}`,
		"tool use id": `"t1"`,
		"tool result": `"content":"ok"`, "tool error": `"tool_use_id":"t1"`, "tool name": `"name":"f","description"`,
		"tool desc": `"description":"d"`, "tool schema": `"input_schema":{"type":"object"}`,
		"tool choice": `"tool_choice":{"type":"auto"}`, "tool choice one": `"tool_choice":{"type":"auto"}`,
		"max_tokens": `"max_tokens":100`, "temperature": `"temperature":0`, "no temperature": `"temperature":0`,
		"top_p": `"top_p":0.5`, "top_k": `"top_k":40`, "stop": `"stop_sequences":["END"]`, "no stop": `"stop_sequences":["END"]`,
		"image": `"content":"hi"`,
	}
	want := cache.KeyOf("", "m", decodeAnthropic(t, base))
	if other := cache.KeyOf("", "other", decodeAnthropic(t, base)); other == want {
		t.Error("model: the same key for another model")
	}
	seen := map[cache.Key]string{}
	for name, v := range variants {
		body := strings.Replace(base, pieces[name], v, 1)
		if name == "tool use id" { // the call and its result change together
			body = strings.ReplaceAll(base, `"t1"`, `"t2"`)
		}
		if body == base {
			t.Fatalf("%s: the variant did not change the body", name)
		}
		got := cache.KeyOf("", "m", decodeAnthropic(t, body))
		if got == want {
			t.Errorf("%s: the same key as the base request", name)
		}
		if prev, ok := seen[got]; ok {
			t.Errorf("%s: the same key as variant %s", name, prev)
		}
		seen[got] = name
	}
}

// The response format is part of the key: JSON mode, and each schema, is another answer.
func TestKeyDiffersForResponseFormat(t *testing.T) {
	base := decodeAnthropic(t, `{"model":"m","max_tokens":10,"temperature":0,"messages":[{"role":"user","content":"hi"}]}`)
	plain := cache.KeyOf("", "m", base)
	obj := *base
	obj.ResponseFormat = llm.ResponseFormat{Type: llm.ResponseJSONObject}
	schema := *base
	schema.ResponseFormat = llm.ResponseFormat{Type: llm.ResponseJSONSchema, Name: "s", Schema: json.RawMessage(`{"type":"object"}`)}
	other := schema
	other.ResponseFormat.Schema = json.RawMessage(`{"type":"array"}`)
	spaced := schema
	spaced.ResponseFormat.Schema = json.RawMessage(`{ "type" : "object" }`)
	keys := []cache.Key{plain, cache.KeyOf("", "m", &obj), cache.KeyOf("", "m", &schema), cache.KeyOf("", "m", &other)}
	for i := range keys {
		for j := i + 1; j < len(keys); j++ {
			if keys[i] == keys[j] {
				t.Errorf("response formats %d and %d share a key", i, j)
			}
		}
	}
	if cache.KeyOf("", "m", &spaced) != keys[2] {
		t.Error("the same schema spelled with spaces is another key")
	}
}

// Length prefixes keep content from sliding between fields: two messages "ab","c" are not one
// message "a","bc".
func TestKeyBoundaries(t *testing.T) {
	txt := func(s ...string) []llm.Message {
		var ms []llm.Message
		for _, x := range s {
			ms = append(ms, llm.Message{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: x}}})
		}
		return ms
	}
	a := cache.KeyOf("", "m", &llm.Request{Messages: txt("ab", "c")})
	b := cache.KeyOf("", "m", &llm.Request{Messages: txt("a", "bc")})
	c := cache.KeyOf("", "m", &llm.Request{System: []llm.Block{{Text: "ab"}}, Messages: txt("c")})
	if a == b || a == c || b == c {
		t.Errorf("keys collide: %s %s %s", a, b, c)
	}
	zero, neg := 0.0, -0.0
	if cache.KeyOf("", "m", &llm.Request{Temperature: &zero}) != cache.KeyOf("", "m", &llm.Request{Temperature: &neg}) {
		t.Error("temperature -0 and 0 have different keys")
	}
}

// TestKeyTruncate checks that the truncate directive, which the request no longer shows once it
// is stripped, is in the key: on or off, and its budget.
func TestKeyTruncate(t *testing.T) {
	r := &llm.Request{Messages: []llm.Message{{Content: []llm.Block{{Text: "long"}}}}}
	seen := map[cache.Key]cache.Truncate{}
	for _, tr := range []cache.Truncate{{}, {On: true}, {On: true, Budget: 15}, {On: true, Budget: 16}} {
		c := cache.EncodeTruncated("", "m", r, tr)
		if prev, ok := seen[c.Key]; ok {
			t.Errorf("%+v has the key of %+v", tr, prev)
		}
		seen[c.Key] = tr
		c.Release()
	}
	if cache.KeyOf("", "m", r) != cache.EncodeTruncated("", "m", r, cache.Truncate{}).Key {
		t.Error("Encode differs from EncodeTruncated without a directive")
	}
}

// TestKeyLoneSurrogate checks that JSON values the engine is sent differently never share a key
// though they decode alike: a lone UTF-16 surrogate escape and U+FFFD, which it decodes to.
func TestKeyLoneSurrogate(t *testing.T) {
	input := func(raw string) *llm.Request {
		return &llm.Request{Messages: []llm.Message{{Role: llm.RoleAssistant,
			Content: []llm.Block{{Type: llm.BlockToolUse, ID: "t", Name: "f", Input: json.RawMessage(raw)}}}}}
	}
	for _, tt := range []struct {
		a, b string
		same bool
	}{
		{`{"s":"\ud800"}`, `{"s":"\ufffd"}`, false},
		{`{"s":"\udc00"}`, `{"s":"\ufffd"}`, false},
		{`{"s":"\ud800x"}`, `{"s":"\ufffdx"}`, false},
		{`{"s":"\ud800\u0041"}`, `{"s":"\ufffdA"}`, false},
		{`{"s":"\ud83d\ude00"}`, `{"s":"😀"}`, true},     // a pair is one character, in any spelling
		{`{"s":"\\ud800"}`, `{ "s": "\\ud800" }`, true}, // an escaped backslash, not an escape
		{`{"s":"\u00e9","t":1}`, `{"t":1,"s":"é"}`, true},
	} {
		if same := cache.KeyOf("", "m", input(tt.a)) == cache.KeyOf("", "m", input(tt.b)); same != tt.same {
			t.Errorf("%s and %s: same key %v, want %v", tt.a, tt.b, same, tt.same)
		}
	}
}

// FuzzKeyJSON checks that encoding any tool input never panics, and that an input and its
// spelling with a lone surrogate escape put in place of a U+FFFD never share a key.
func FuzzKeyJSON(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":"\ud800"}`, `{"a":"\\u"}`, `"\ud83d\ude00"`, `{"a":"x\u12`, `\`, `"\ufffd"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		req := func(s string) *llm.Request {
			return &llm.Request{Messages: []llm.Message{{Content: []llm.Block{{Type: llm.BlockToolUse, Input: json.RawMessage(s)}}}}}
		}
		k := cache.KeyOf("", "m", req(raw))
		if i := strings.Index(raw, `\ufffd`); i >= 0 {
			lone := raw[:i] + `\ud800` + raw[i+6:]
			if cache.KeyOf("", "m", req(lone)) == k {
				t.Errorf("%s and %s share a key", raw, lone)
			}
		}
	})
}
