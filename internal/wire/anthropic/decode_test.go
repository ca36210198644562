package anthropic

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

func f64(v float64) *float64 { return &v }
func intp(v int) *int        { return &v }

func text(s string) llm.Block { return llm.Block{Type: llm.BlockText, Text: s} }

func TestDecodeRequest(t *testing.T) {
	tests := []struct {
		name string
		body string
		want *llm.Request
	}{
		{
			name: "minimal",
			body: `{"model":"claude-x","max_tokens":16,"messages":[{"role":"user","content":"Hello"}]}`,
			want: &llm.Request{Model: "claude-x", MaxTokens: 16,
				Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{text("Hello")}}}},
		},
		{
			name: "whitespace and member order as the Go SDK sends it",
			body: " \n{ \"max_tokens\" : 1024 , \"messages\" : [ { \"content\" : [ { \"text\" : \"Hi\" , \"type\" : \"text\" } ] , \"role\" : \"user\" } ] , \"model\" : \"m\" }\t",
			want: &llm.Request{Model: "m", MaxTokens: 1024,
				Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{text("Hi")}}}},
		},
		{
			name: "every field",
			body: `{
				"model": "claude-sonnet",
				"max_tokens": 1024.0,
				"system": [{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}},{"text":"Be kind.","type":"text"}],
				"messages": [
					{"role":"user","content":[
						{"type":"text","text":"What is in this image?","citations":null},
						{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},
						{"type":"image","source":{"type":"url","url":"https://example.com/a.jpg"},"cache_control":{"type":"ephemeral"}},
						{"type":"document","source":{"type":"text","media_type":"text/plain","data":"A plain document."},"title":"t"}
					]},
					{"role":"assistant","content":[
						{"type":"thinking","thinking":"hmm","signature":"sig"},
						{"type":"redacted_thinking","data":"xyz"},
						{"type":"text","text":"Let me check."},
						{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{ "city" : "Paris", "units": ["c", "f"] }},
						{"type":"tool_use","id":"toolu_02","name":"get_weather","input":{"city":"Lyon"}},
						{"type":"tool_use","id":"toolu_03","name":"noop","input":{}}
					]},
					{"role":"user","content":[
						{"type":"tool_result","tool_use_id":"toolu_01","content":"18 degrees"},
						{"type":"tool_result","tool_use_id":"toolu_02","is_error":true,"content":[{"type":"text","text":"failed"},{"type":"document","source":{"type":"content","content":[{"type":"text","text":"doc text"}]}}]},
						{"type":"tool_result","tool_use_id":"toolu_03"}
					]}
				],
				"temperature": 0.5,
				"top_p": 1,
				"top_k": 40,
				"stop_sequences": ["\n\nHuman:", "END"],
				"stream": true,
				"tools": [{"name":"get_weather","description":"Get the weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},"cache_control":{"type":"ephemeral"}},
				          {"type":"custom","name":"noop","input_schema":{"type":"object"},"strict":true}],
				"tool_choice": {"type":"tool","name":"get_weather","disable_parallel_tool_use":true},
				"metadata": {"user_id":"user-42"},
				"thinking": {"type":"enabled","budget_tokens":2048},
				"service_tier": "auto",
				"container": null
			}`,
			want: &llm.Request{
				Ignored:   "thinking",
				Model:     "claude-sonnet",
				MaxTokens: 1024,
				System:    []llm.Block{text("Be brief."), text("Be kind.")},
				Messages: []llm.Message{
					{Role: llm.RoleUser, Content: []llm.Block{
						text("What is in this image?"),
						{Type: llm.BlockImage, MediaType: "image/png", Data: "iVBORw0KGgo="},
						{Type: llm.BlockImage, URL: "https://example.com/a.jpg"},
						text("A plain document."),
					}},
					{Role: llm.RoleAssistant, Content: []llm.Block{
						text("Let me check."),
						{Type: llm.BlockToolUse, ID: "toolu_01", Name: "get_weather", Input: json.RawMessage(`{"city":"Paris","units":["c","f"]}`)},
						{Type: llm.BlockToolUse, ID: "toolu_02", Name: "get_weather", Input: json.RawMessage(`{"city":"Lyon"}`)},
						{Type: llm.BlockToolUse, ID: "toolu_03", Name: "noop", Input: json.RawMessage(`{}`)},
					}},
					{Role: llm.RoleUser, Content: []llm.Block{
						{Type: llm.BlockToolResult, ToolUseID: "toolu_01", Content: []llm.Block{text("18 degrees")}},
						{Type: llm.BlockToolResult, ToolUseID: "toolu_02", IsError: true, Content: []llm.Block{text("failed"), text("doc text")}},
						{Type: llm.BlockToolResult, ToolUseID: "toolu_03"},
					}},
				},
				Temperature:   f64(0.5),
				TopP:          f64(1),
				TopK:          intp(40),
				StopSequences: []string{"\n\nHuman:", "END"},
				Stream:        true,
				Tools: []llm.Tool{
					{Name: "get_weather", Description: "Get the weather", InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)},
					{Name: "noop", InputSchema: json.RawMessage(`{"type":"object"}`)},
				},
				ToolChoice: llm.ToolChoice{Type: llm.ToolNamed, Name: "get_weather", DisableParallelToolUse: true},
				UserID:     "user-42",
			},
		},
		{
			name: "nulls mean not given",
			body: `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"system":null,"temperature":null,"top_p":null,"top_k":null,"stop_sequences":null,"tools":null,"tool_choice":null,"metadata":{"user_id":null},"stream":null}`,
			want: &llm.Request{Model: "m", MaxTokens: 1, Messages: []llm.Message{{Content: []llm.Block{text("x")}}}},
		},
		{
			name: "escapes",
			body: `{"model":"m","max_tokens":1e3,"system":"sys\ttab","messages":[{"role":"user","content":"line\nnew \"q\" \\ \/ \u00e9 \ud83d\ude00 lone \ud800 end é😀"}]}`,
			want: &llm.Request{Model: "m", MaxTokens: 1000, System: []llm.Block{text("sys\ttab")},
				Messages: []llm.Message{{Content: []llm.Block{text("line\nnew \"q\" \\ / é 😀 lone \uFFFD end é😀")}}}},
		},
		{
			name: "escaped member names",
			body: `{"mod\u0065l":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`,
			want: &llm.Request{Model: "m", MaxTokens: 1, Messages: []llm.Message{{Content: []llm.Block{text("x")}}}},
		},
		{
			name: "final assistant message may be empty (prefill)",
			body: `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":""}]}`,
			want: &llm.Request{Model: "m", MaxTokens: 1, Messages: []llm.Message{
				{Content: []llm.Block{text("x")}}, {Role: llm.RoleAssistant}}},
		},
		{
			name: "system messages in place, and the fields current agents send",
			body: `{"model":"m","max_tokens":32000,"stream":true,
				"messages":[
					{"role":"user","content":[{"type":"text","text":"reminder"},{"type":"text","text":"read the file"}]},
					{"role":"system","content":[{"type":"text","text":"environment","cache_control":{"type":"ephemeral"}}]},
					{"role":"assistant","content":[{"type":"tool_use","id":"toolu_01","name":"Read","input":{"file_path":"/x"}}]},
					{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","content":"contents","cache_control":{"type":"ephemeral"}}]},
					{"role":"system","content":"seen until the next user message","clear_at":"next_user_message"},
					{"role":"system","content":[],"output_config":{"effort":"low"}},
					{"role":"assistant","content":"ok"},
					{"role":"user","content":"and now?"},
					{"role":"system","content":"kept: no user message after it","clear_at":"next_user_message","output_config":{}}
				],
				"thinking":{"type":"adaptive","display":"omitted"},
				"output_config":{"effort":"high"},
				"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},
				"metadata":{"user_id":"{\"device_id\":\"d\",\"session_id\":\"s\"}"}
			}`,
			want: &llm.Request{Model: "m", MaxTokens: 32000, Stream: true, UserID: `{"device_id":"d","session_id":"s"}`,
				Ignored: "messages.5.output_config", // the first such field, before the top-level ones
				Messages: []llm.Message{
					{Role: llm.RoleUser, Content: []llm.Block{text("reminder"), text("read the file")}},
					{Role: llm.RoleSystem, Content: []llm.Block{text("environment")}},
					{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockToolUse, ID: "toolu_01", Name: "Read", Input: json.RawMessage(`{"file_path":"/x"}`)}}},
					{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockToolResult, ToolUseID: "toolu_01", Content: []llm.Block{text("contents")}}}},
					{Role: llm.RoleAssistant, Content: []llm.Block{text("ok")}},
					{Role: llm.RoleUser, Content: []llm.Block{text("and now?")}},
					{Role: llm.RoleSystem, Content: []llm.Block{text("kept: no user message after it")}},
				}},
		},
		{
			name: "budgeted thinking",
			body: `{"model":"m","max_tokens":4096,"messages":[{"role":"system","content":"first"},{"role":"user","content":"x"}],"thinking":{"type":"enabled","budget_tokens":2048}}`,
			want: &llm.Request{Model: "m", MaxTokens: 4096, Ignored: "thinking", Messages: []llm.Message{
				{Role: llm.RoleSystem, Content: []llm.Block{text("first")}}, {Content: []llm.Block{text("x")}}}},
		},
		{
			name: "tool choice kinds and empty lists",
			body: `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tools":[],"stop_sequences":[],"system":[],"tool_choice":{"type":"any","disable_parallel_tool_use":false}}`,
			want: &llm.Request{Model: "m", MaxTokens: 1, Messages: []llm.Message{{Content: []llm.Block{text("x")}}},
				ToolChoice: llm.ToolChoice{Type: llm.ToolAny}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeRequest([]byte(tt.body))
			if err != nil {
				t.Fatalf("DecodeRequest: got error %v, want none", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("DecodeRequest mismatch (-want +got):\n%s", diff)
			}
			roundTrip(t, got)
		})
	}
}

// roundTrip checks that AppendRequest is the inverse of DecodeRequest for r.
func roundTrip(t *testing.T, r *llm.Request) {
	t.Helper()
	body := AppendRequest(nil, r)
	if !json.Valid(body) {
		t.Fatalf("AppendRequest wrote invalid JSON: %s", body)
	}
	back, err := DecodeRequest(body)
	if err != nil {
		t.Fatalf("DecodeRequest(AppendRequest(r)): got error %v, want none; body %s", err, body)
	}
	want := *r
	want.Ignored = "" // a field the request does not carry is not written
	if diff := cmp.Diff(&want, back); diff != "" {
		t.Errorf("round trip mismatch (-decoded +re-decoded):\n%s\nbody %s", diff, body)
	}
}

func TestDecodeRequestDoesNotAliasBody(t *testing.T) {
	body := []byte(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hello"}],"metadata":{"user_id":"u"}}`)
	r, err := DecodeRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	for i := range body {
		body[i] = 'X'
	}
	if got := r.Messages[0].Content[0].Text; got != "hello" {
		t.Errorf("text after the body was overwritten: got %q, want %q", got, "hello")
	}
	if r.Model != "m" || r.UserID != "u" {
		t.Errorf("model, user_id after the body was overwritten: got %q, %q, want m, u", r.Model, r.UserID)
	}
}

func TestDecodeCountTokens(t *testing.T) {
	body := `{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"name":"t","input_schema":{"type":"object"}}]}`
	r, err := DecodeCountTokens([]byte(body))
	if err != nil {
		t.Fatalf("DecodeCountTokens: got error %v, want none", err)
	}
	if r.MaxTokens != 0 || len(r.Tools) != 1 {
		t.Errorf("got max_tokens %d, %d tools, want 0, 1", r.MaxTokens, len(r.Tools))
	}
	if _, err := DecodeRequest([]byte(body)); err == nil || err.(*apierr.Error).Message != "max_tokens: field required" {
		t.Errorf("DecodeRequest without max_tokens: got %v, want max_tokens: field required", err)
	}
	_, err = DecodeCountTokens([]byte(`{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]}`))
	if err == nil {
		t.Errorf("DecodeCountTokens with max_tokens 0: got no error, want one")
	}
}

const okMsgs = `"messages":[{"role":"user","content":"hi"}]`

// req builds a body from the given members plus model and max_tokens.
func req(members string) string { return `{"model":"m","max_tokens":8,` + members + `}` }

func TestDecodeRequestErrors(t *testing.T) {
	deep := strings.Repeat("[", 300) + strings.Repeat("]", 300)
	tests := []struct {
		name string
		body string
		want string // the full message; its field is what precedes the first ": "
	}{
		{"empty body", ``, "body: request body is empty; want a JSON object"},
		{"whitespace body", " \n ", "body: request body is empty; want a JSON object"},
		{"array body", `[]`, "body: must be a JSON object, got array"},
		{"string body", `"x"`, "body: must be a JSON object, got string"},
		{"garbage", `hello`, "body: invalid JSON at byte offset 0: unexpected 'h', expected a JSON object"},
		{"truncated", `{"model":`, "model: invalid JSON at byte offset 9: unexpected end of input, expected a string"},
		{"trailing comma", `{"model":"m",}`, "body: invalid JSON at byte offset 13: unexpected '}', expected a member name in double quotes"},
		{"missing comma", `{"model":"m" "max_tokens":1}`, "body: invalid JSON at byte offset 13: unexpected '\"', expected ',' or '}'"},
		{"trailing data", req(okMsgs) + ` {}`, "body: invalid JSON at byte offset 73: unexpected data after the top-level value"},
		{"bad escape", req(`"messages":[{"role":"user","content":"a\x"}]`), "messages.0.content: invalid JSON at byte offset 67: invalid escape in string"},
		{"raw control character", req("\"messages\":[{\"role\":\"user\",\"content\":\"a\x01\"}]"), "messages.0.content: invalid JSON at byte offset 67: control character in string"},
		{"bad number", req(okMsgs + `,"temperature":-}`), "temperature: invalid JSON at byte offset 87: invalid number"},
		{"leading zero", req(okMsgs + `,"top_k":01}`), "body: invalid JSON at byte offset 81: unexpected '1', expected ',' or '}'"},
		{"broken null", req(okMsgs + `,"temperature":nul`), "temperature: invalid JSON at byte offset 86: invalid literal"},
		{"broken string where a number goes", req(`"top_k":"abc`), "top_k: invalid JSON at byte offset 41: unterminated string"},
		{"too deep", req(okMsgs + `,"thinking":` + deep), "thinking: invalid JSON at byte offset 338: nesting too deep"},

		{"invalid UTF-8 in text", req("\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\xff\"}]}]"), "messages.0.content.0.text: string is not valid UTF-8 (byte offset 90)"},
		{"invalid UTF-8 in model", "{\"model\":\"\xc3\",\"max_tokens\":1," + okMsgs + "}", "model: string is not valid UTF-8 (byte offset 10)"},
		{"invalid UTF-8 in an ignored field", req(okMsgs + ",\"thinking\":{\"x\":\"\xed\xa0\x80\"}"), "thinking: string is not valid UTF-8 (byte offset 89)"},
		{"invalid UTF-8 in a member name", req(okMsgs + ",\"\xff\":1"), "body: string is not valid UTF-8 (byte offset 73)"},

		{"unknown field", req(okMsgs + `,"foo":1`), "foo: extra inputs are not permitted"},
		{"duplicate model", req(okMsgs + `,"model":"b"`), "model: duplicate key: each field may be given only once"},
		{"duplicate model, escaped", req(okMsgs + `,"mod\u0065l":"b"`), "model: duplicate key: each field may be given only once"},
		{"duplicate messages", req(okMsgs + `,` + okMsgs), "messages: duplicate key: each field may be given only once"},
		{"duplicate ignored field", req(okMsgs + `,"thinking":{},"thinking":{}`), "thinking: duplicate key: each field may be given only once"},
		{"duplicate content in a message", req(`"messages":[{"role":"user","content":"many many words","content":"small"}]`), "messages.0.content: duplicate key: each field may be given only once"},
		{"duplicate role, escaped", req(`"messages":[{"role":"user","content":"hi","\u0072ole":"user"}]`), "messages.0.role: duplicate key: each field may be given only once"},
		{"duplicate text in a block", req(`"messages":[{"role":"user","content":[{"type":"text","text":"big","text":"s"}]}]`), "messages.0.content.0.text: duplicate key: each field may be given only once"},
		{"duplicate source member", req(`"messages":[{"role":"user","content":[{"type":"document","source":{"type":"text","data":"big","data":"s"}}]}]`), "messages.0.content.0.source.data: duplicate key: each field may be given only once"},
		{"duplicate inside a tool input", req(`"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"a":[{"b":1,"b":2}]}}]}]`), "messages.1.content.0.input.a.0.b: duplicate key: each field may be given only once"},
		{"duplicate in a schema's properties", req(okMsgs + `,"tools":[{"name":"f","input_schema":{"type":"object","properties":{"x":{},"x":{"type":"string"}}}}]`), "tools.0.input_schema.properties.x: duplicate key: each field may be given only once"},
		{"duplicate schema type", req(okMsgs + `,"tools":[{"name":"f","input_schema":{"type":"object","type":"object"}}]`), "tools.0.input_schema.type: duplicate key: each field may be given only once"},
		{"duplicate tool name", req(okMsgs + `,"tools":[{"name":"f","name":"g","input_schema":{}}]`), "tools.0.name: duplicate key: each field may be given only once"},
		{"duplicate tool_choice type", req(okMsgs + `,"tool_choice":{"type":"auto","type":"any"}`), "tool_choice.type: duplicate key: each field may be given only once"},
		{"duplicate user_id", req(okMsgs + `,"metadata":{"user_id":"a","user_id":"b"}`), "metadata.user_id: duplicate key: each field may be given only once"},
		{"duplicate inside an ignored field", req(okMsgs + `,"context_management":{"edits":[{"type":"a","type":"b"}]}`), "context_management.edits.0.type: duplicate key: each field may be given only once"},
		{"duplicate inside a cache_control", req(`"messages":[{"role":"user","content":[{"type":"text","text":"t","cache_control":{"type":"ephemeral","type":"x"}}]}]`), "messages.0.content.0.cache_control.type: duplicate key: each field may be given only once"},
		{"model missing", `{"max_tokens":1,` + okMsgs + `}`, "model: field required"},
		{"model number", `{"model":7,"max_tokens":1,` + okMsgs + `}`, "model: must be a string, got number"},
		{"model empty", `{"model":"","max_tokens":1,` + okMsgs + `}`, "model: must not be empty"},
		{"model null", `{"model":null,"max_tokens":1,` + okMsgs + `}`, "model: must be a string, got null"},
		{"max_tokens missing", `{"model":"m",` + okMsgs + `}`, "max_tokens: field required"},
		{"max_tokens string", `{"model":"m","max_tokens":"8",` + okMsgs + `}`, "max_tokens: must be an integer, got string"},
		{"max_tokens fraction", `{"model":"m","max_tokens":1.5,` + okMsgs + `}`, "max_tokens: must be an integer, got 1.5"},
		{"max_tokens zero", `{"model":"m","max_tokens":0,` + okMsgs + `}`, "max_tokens: must be at least 1, got 0"},
		{"max_tokens negative", `{"model":"m","max_tokens":-5,` + okMsgs + `}`, "max_tokens: must be at least 1, got -5"},
		{"max_tokens huge", `{"model":"m","max_tokens":99999999999999999999999,` + okMsgs + `}`, "max_tokens: must be at most 2147483647, got 99999999999999999999999"},
		{"max_tokens just over int32", `{"model":"m","max_tokens":2147483648,` + okMsgs + `}`, "max_tokens: must be at most 2147483647, got 2147483648"},
		{"max_tokens exponent", `{"model":"m","max_tokens":1e300,` + okMsgs + `}`, "max_tokens: must be at most 2147483647, got 1e300"},

		{"messages missing", req(`"stream":true`), "messages: field required"},
		{"messages object", req(`"messages":{}`), "messages: must be an array, got object"},
		{"messages empty", req(`"messages":[]`), "messages: at least one message is required"},
		{"message not an object", req(`"messages":[1]`), "messages.0: must be an object, got number"},
		{"role missing", req(`"messages":[{"content":"x"}]`), "messages.0.role: field required"},
		{"role tool", req(`"messages":[{"role":"tool","content":"x"}]`), `messages.0.role: must be "user", "assistant" or "system", got "tool"`},
		{"system message image", req(`"messages":[{"role":"user","content":"x"},{"role":"system","content":[{"type":"image","source":{"type":"url","url":"https://x"}}]}]`), `messages.1.content: a system message holds text blocks only`},
		{"system message tool result", req(`"messages":[{"role":"system","content":[{"type":"tool_result","tool_use_id":"t"}]}]`), `messages.0.content: a system message holds text blocks only`},
		{"clear_at on a user message", req(`"messages":[{"role":"user","content":"x","clear_at":"never"}]`), `messages.0.clear_at: only permitted on system messages`},
		{"output_config on an assistant message", req(`"messages":[{"role":"user","content":"x"},{"role":"assistant","content":"y","output_config":{}}]`), `messages.1.output_config: only permitted on system messages`},
		{"clear_at unknown", req(`"messages":[{"role":"system","content":"x","clear_at":"soon"}]`), `messages.0.clear_at: must be "next_user_message" or "never", got "soon"`},
		{"empty user message last, after a dropped system message", req(`"messages":[{"role":"system","content":""},{"role":"user","content":""}]`), `messages.1.content: all messages must have non-empty content except for the optional final assistant message`},
		{"system message only", req(`"messages":[{"role":"system","content":""}]`), `messages: at least one message is required`},
		{"role unknown", req(`"messages":[{"role":"bot","content":"x"}]`), `messages.0.role: must be "user", "assistant" or "system", got "bot"`},
		{"message extra member", req(`"messages":[{"role":"user","content":"x","name":"n"}]`), "messages.0.name: extra inputs are not permitted"},
		{"content missing", req(`"messages":[{"role":"user"}]`), "messages.0.content: field required"},
		{"content number", req(`"messages":[{"role":"user","content":5}]`), "messages.0.content: must be a string or an array of content blocks, got number"},
		{"content empty in the middle", req(`"messages":[{"role":"user","content":""},{"role":"assistant","content":"x"}]`), "messages.0.content: all messages must have non-empty content except for the optional final assistant message"},
		{"final user content empty", req(`"messages":[{"role":"user","content":[]}]`), "messages.0.content: all messages must have non-empty content except for the optional final assistant message"},
		{"text missing in second message", req(`"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"text"}]}]`), "messages.1.content.0.text: field required"},
		{"text empty", req(`"messages":[{"role":"user","content":[{"type":"text","text":""}]}]`), "messages.0.content.0.text: text content blocks must be non-empty"},
		{"text not a string", req(`"messages":[{"role":"user","content":[{"type":"text","text":["a"]}]}]`), "messages.0.content.0.text: must be a string, got array"},
		{"block type missing", req(`"messages":[{"role":"user","content":[{"text":"a"}]}]`), "messages.0.content.0.type: field required"},
		{"block type unknown", req(`"messages":[{"role":"user","content":[{"type":"video"}]}]`), `messages.0.content.0.type: must be one of "text", "image", "tool_use", "tool_result", "document", "thinking" or "redacted_thinking", got "video"`},
		{"block extra member", req(`"messages":[{"role":"user","content":[{"type":"text","text":"a","foo":1}]}]`), "messages.0.content.0.foo: extra inputs are not permitted"},
		{"member of another block type, before type", req(`"messages":[{"role":"user","content":[{"source":{},"type":"text","text":"a"}]}]`), "messages.0.content.0.source: extra inputs are not permitted"},
		{"image media type", req(`"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/bmp","data":"AAAA"}}]}]`), `messages.0.content.0.source.media_type: must be one of image/jpeg, image/png, image/gif, image/webp, got "image/bmp"`},
		{"image bad base64", req(`"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"not base64!"}}]}]`), "messages.0.content.0.source.data: must be non-empty base64 (standard alphabet, padded)"},
		{"image source missing", req(`"messages":[{"role":"user","content":[{"type":"image"}]}]`), "messages.0.content.0.source: field required"},
		{"image url scheme", req(`"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"file:///etc/passwd"}}]}]`), "messages.0.content.0.source.url: must be an http or https URL"},
		{"image source type", req(`"messages":[{"role":"user","content":[{"type":"image","source":{"type":"s3"}}]}]`), `messages.0.content.0.source.type: must be "base64" or "url", got "s3"`},
		{"tool_use in a user message", req(`"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"tool_use","id":"t1","name":"f","input":{}}]}]`), "messages.0.content.1: tool_use blocks are only allowed in assistant messages"},
		{"tool_result in an assistant message", req(`"messages":[{"role":"user","content":"a"},{"content":[{"type":"tool_result","tool_use_id":"t1"}],"role":"assistant"}]`), "messages.1.content.0: tool_result blocks are only allowed in user messages"},
		{"tool_use input not an object", req(`"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":[1]}]}]`), "messages.1.content.0.input: must be an object, got array"},
		{"tool_use id missing", req(`"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"tool_use","name":"f","input":{}}]}]`), "messages.1.content.0.id: field required"},
		{"tool_use id pattern", req(`"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"tool_use","id":"a b","name":"f","input":{}}]}]`), `messages.1.content.0.id: must match ^[a-zA-Z0-9_-]+$, got "a b"`},
		{"tool_use input missing", req(`"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f"}]}]`), "messages.1.content.0.input: field required"},
		{"tool_result id missing", req(`"messages":[{"role":"user","content":[{"type":"tool_result","content":"x"}]}]`), "messages.0.content.0.tool_use_id: field required"},
		{"tool_result is_error type", req(`"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","is_error":"yes"}]}]`), "messages.0.content.0.is_error: must be a boolean, got string"},
		{"tool_result holding tool_use", req(`"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"tool_use","id":"x","name":"f","input":{}}]}]}]`), `messages.0.content.0.content.0.type: must be "text", "image" or "document", got "tool_use"`},
		{"tool_result nested content", req(`"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"content":[],"type":"text","text":"a"}]}]}]`), "messages.0.content.0.content.0.content: extra inputs are not permitted"},
		{"document pdf", req(`"messages":[{"role":"user","content":[{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERi0="}}]}]`), `messages.0.content.0.source.type: document source "base64" is not supported; send the document as text (source type "text" or "content")`},

		{"system number", req(okMsgs + `,"system":5`), "system: must be a string or an array of text blocks, got number"},
		{"system image", req(okMsgs + `,"system":[{"type":"image","source":{"type":"url","url":"https://x"}}]`), `system.0.type: must be "text", got "image"`},
		{"system empty text", req(okMsgs + `,"system":[{"type":"text","text":""}]`), "system.0.text: text content blocks must be non-empty"},
		{"temperature too high", req(okMsgs + `,"temperature":1.5`), "temperature: must be between 0 and 1, got 1.5"},
		{"temperature string", req(okMsgs + `,"temperature":"hot"`), "temperature: must be a number, got string"},
		{"top_p negative", req(okMsgs + `,"top_p":-0.1`), "top_p: must be between 0 and 1, got -0.1"},
		{"top_p overflow", req(okMsgs + `,"top_p":1e999`), "top_p: must be between 0 and 1, got 1e999"},
		{"top_k negative", req(okMsgs + `,"top_k":-1`), "top_k: must be at least 0, got -1"},
		{"top_k fraction", req(okMsgs + `,"top_k":2.5`), "top_k: must be an integer, got 2.5"},
		{"stop_sequences string", req(okMsgs + `,"stop_sequences":"END"`), "stop_sequences: must be an array, got string"},
		{"stop_sequences element", req(okMsgs + `,"stop_sequences":["a",1]`), "stop_sequences.1: must be a string, got number"},
		{"stop_sequences empty element", req(okMsgs + `,"stop_sequences":[""]`), "stop_sequences.0: must be non-empty"},
		{"stream string", req(okMsgs + `,"stream":"yes"`), "stream: must be a boolean, got string"},
		{"metadata extra", req(okMsgs + `,"metadata":{"session":"s"}`), "metadata.session: extra inputs are not permitted"},
		{"metadata user_id number", req(okMsgs + `,"metadata":{"user_id":5}`), "metadata.user_id: must be a string, got number"},

		{"tools object", req(okMsgs + `,"tools":{}`), "tools: must be an array, got object"},
		{"tool name pattern", req(okMsgs + `,"tools":[{"name":"get weather","input_schema":{"type":"object"}}]`), `tools.0.name: must match ^[a-zA-Z0-9_-]{1,128}$, got "get weather"`},
		{"tool name too long", req(okMsgs + `,"tools":[{"name":"` + strings.Repeat("a", 129) + `","input_schema":{"type":"object"}}]`), `tools.0.name: must match ^[a-zA-Z0-9_-]{1,128}$, got "` + strings.Repeat("a", 64) + `..."`},
		{"tool name missing", req(okMsgs + `,"tools":[{"input_schema":{"type":"object"}}]`), "tools.0.name: field required"},
		{"tool schema missing", req(okMsgs + `,"tools":[{"name":"f"}]`), "tools.0.input_schema: field required"},
		{"tool schema string", req(okMsgs + `,"tools":[{"name":"f","input_schema":"{}"}]`), "tools.0.input_schema: must be an object, got string"},
		{"tool schema type", req(okMsgs + `,"tools":[{"name":"f","input_schema":{"type":"array"}}]`), `tools.0.input_schema.type: must be "object", got "array"`},
		{"tool schema bad JSON", req(okMsgs + `,"tools":[{"name":"f","input_schema":{"properties":{"a":tru}}}]`), "tools.0.input_schema.properties: invalid JSON at byte offset 127: invalid literal"},
		{"tool extra member", req(okMsgs + `,"tools":[{"name":"f","input_schema":{},"parameters":{}}]`), "tools.0.parameters: extra inputs are not permitted"},
		{"server tool", req(okMsgs + `,"tools":[{"type":"web_search_20250305","name":"web_search"}]`), `tools.0.type: tool type "web_search_20250305" is not supported; only custom tools (name, description, input_schema) are`},
		{"duplicate tool names", req(okMsgs + `,"tools":[{"name":"f","input_schema":{}},{"name":"f","input_schema":{}}]`), `tools.1.name: tool names must be unique; "f" is also tools.0.name`},
		{"tool_choice type", req(okMsgs + `,"tool_choice":{"type":"required"}`), `tool_choice.type: must be one of "auto", "any", "tool" or "none", got "required"`},
		{"tool_choice type missing", req(okMsgs + `,"tool_choice":{"name":"f"}`), "tool_choice.type: field required"},
		{"tool_choice tool without name", req(okMsgs + `,"tool_choice":{"type":"tool"}`), "tool_choice.name: field required"},
		{"tool_choice auto with name", req(okMsgs + `,"tool_choice":{"type":"auto","name":"f"}`), "tool_choice.name: extra inputs are not permitted"},
		{"tool_choice none with parallel flag", req(okMsgs + `,"tool_choice":{"type":"none","disable_parallel_tool_use":true}`), "tool_choice.disable_parallel_tool_use: extra inputs are not permitted"},
		{"tool_choice string", req(okMsgs + `,"tool_choice":"auto"`), "tool_choice: must be an object, got string"},
		// Rules llm.Request.Validate holds for every front.
		{"tool_choice names no tool", req(okMsgs + `,"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"tool","name":"g"}`), `tool_choice.name: no tool named "g" in tools`},
		{"tool_choice names a tool without tools", req(okMsgs + `,"tool_choice":{"type":"tool","name":"g"}`), `tool_choice.name: no tool named "g" in tools`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := DecodeRequest([]byte(tt.body))
			if err == nil {
				t.Fatalf("DecodeRequest: got %+v, want error %q", r, tt.want)
			}
			var e *apierr.Error
			if !errors.As(err, &e) {
				t.Fatalf("got error %T %v, want *apierr.Error", err, err)
			}
			if got := e.Status(); got != http.StatusBadRequest {
				t.Errorf("got status %d, want 400", got)
			}
			if got := e.Kind.AnthropicType(); got != "invalid_request_error" {
				t.Errorf("got type %q, want invalid_request_error", got)
			}
			if e.Message != tt.want {
				t.Errorf("got message\n%s\nwant\n%s", e.Message, tt.want)
			}
			field, _, _ := strings.Cut(tt.want, ": ")
			if e.Param != field {
				t.Errorf("got param %q, want %q", e.Param, field)
			}
			if !utf8.ValidString(e.Message) {
				t.Errorf("message is not valid UTF-8: %q", e.Message)
			}
		})
	}
}

// smallRequest is a typical two-message request.
const smallRequest = `{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"Hello, Claude"},{"role":"assistant","content":[{"type":"text","text":"Hi! How can I help?"}]}],"temperature":0.7}`

// largeRequest is about 2 KB: a system prompt, a tool, a few turns with a tool call.
var largeRequest = func() string {
	var b strings.Builder
	b.WriteString(`{"model":"claude-sonnet-4-5","max_tokens":4096,"stream":true,"system":[{"type":"text","text":"You are a helpful assistant that answers questions about the weather. Keep answers short and precise, and use the tools when a location is mentioned.","cache_control":{"type":"ephemeral"}}],`)
	b.WriteString(`"tools":[{"name":"get_weather","description":"Get the current weather for a city.","input_schema":{"type":"object","properties":{"city":{"type":"string","description":"The city name"},"units":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city"]}}],"messages":[`)
	for i := range 6 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"role":"user","content":[{"type":"text","text":"Question %d: what is the weather like in Paris today, and should I take an umbrella with me when I go out this afternoon?"}]},`, i)
		fmt.Fprintf(&b, `{"role":"assistant","content":[{"type":"text","text":"Answer %d: it is mild and cloudy with a chance of light rain later, so an umbrella would be a good idea."}]}`, i)
	}
	b.WriteString(`,{"role":"user","content":"And tomorrow?"}]}`)
	return b.String()
}()

func TestDecodeRequestAllocs(t *testing.T) {
	body := []byte(smallRequest)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := DecodeRequest(body); err != nil {
			t.Fatal(err)
		}
	})
	// body copy, Request with its temperature, model, messages, two content slices.
	if allocs > 6 {
		t.Errorf("DecodeRequest of a 2-message request: got %.0f allocs, want <= 6", allocs)
	}
}

func BenchmarkDecodeRequest(b *testing.B) {
	for _, bm := range []struct{ name, body string }{{"small", smallRequest}, {"2KB", largeRequest}} {
		body := []byte(bm.body)
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				if _, err := DecodeRequest(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(smallRequest))
	f.Add([]byte(largeRequest))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := DecodeRequest(body)
		if err != nil {
			var e *apierr.Error
			if !errors.As(err, &e) || e.Kind != apierr.InvalidRequest || e.Param == "" ||
				!strings.HasPrefix(e.Message, e.Param+": ") {
				t.Fatalf("got error %#v, want an invalid_request_error naming its field", err)
			}
			if !utf8.ValidString(e.Message) {
				t.Fatalf("error message is not valid UTF-8: %q", e.Message)
			}
			return
		}
		if !json.Valid(body) || !utf8.Valid(body) {
			t.Fatalf("accepted a body that is not valid JSON in UTF-8: %q", body)
		}
		// The decoder validates with ValidateDecoded, which trusts it for the text's UTF-8:
		// what it accepts passes the whole check.
		if verr := r.Validate(); verr != nil {
			t.Fatalf("decoded request fails Validate: %v", verr)
		}
		roundTrip(t, r)
	})
}

// TestDecodeRequestNestedKeys: names are compared within one object, exactly: the same name in
// two objects, or names that differ in case, are not duplicates; a duplicate is found past the
// first sixteen members of an object too.
func TestDecodeRequestNestedKeys(t *testing.T) {
	var props strings.Builder
	for i := range 40 {
		fmt.Fprintf(&props, `"p%d":{"type":"string"},`, i)
	}
	ok := `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[` +
		`{"type":"tool_use","id":"t","name":"f","input":{"a":{"x":1},"b":{"x":1},"A":2}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t"}]}],` +
		`"tools":[{"name":"f","input_schema":{"type":"object","properties":{` + props.String() + `"P0":{}}}}]}`
	if _, err := DecodeRequest([]byte(ok)); err != nil {
		t.Fatalf("got %v, want decoded", err)
	}
	dup := strings.Replace(ok, `"P0":{}`, `"p33":{}`, 1)
	_, err := DecodeRequest([]byte(dup))
	var e *apierr.Error
	if !errors.As(err, &e) || e.Param != "tools.0.input_schema.properties.p33" {
		t.Fatalf("got %v, want a duplicate at tools.0.input_schema.properties.p33", err)
	}
}

// TestDecodeRequestIgnored checks that a top-level field accepted and dropped that can change the
// answer is named in Ignored (the cache then leaves the request alone), and that billing, routing
// and prompt-caching hints are not.
func TestDecodeRequestIgnored(t *testing.T) {
	const rest = `"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]`
	for _, tt := range []struct{ body, want string }{
		{`{` + rest + `}`, ""},
		{`{` + rest + `,"service_tier":"auto","cache_control":{"type":"ephemeral"},"inference_geo":"us"}`, ""},
		{`{` + rest + `,"thinking":{"type":"enabled","budget_tokens":1024}}`, "thinking"},
		{`{"output_config":{"effort":"low"},` + rest + `,"thinking":{"type":"adaptive"}}`, "output_config"},
		{`{` + rest + `,"context_management":{}}`, "context_management"},
		{`{` + rest + `,"container":null,"mcp_servers":null}`, ""}, // null says nothing
	} {
		r, err := DecodeRequest([]byte(tt.body))
		if err != nil {
			t.Errorf("%s: %v", tt.body, err)
			continue
		}
		if r.Ignored != tt.want {
			t.Errorf("%s: Ignored %q, want %q", tt.body, r.Ignored, tt.want)
		}
	}
}

// The one-block contents of string messages share an allocation; appending to one of them (as
// context planning or a directive may) must copy it, never write over the next message's block.
func TestStringContentsDoNotShareTails(t *testing.T) {
	body := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"one"},` +
		`{"role":"assistant","content":"two"},{"role":"user","content":"three"},` +
		`{"role":"assistant","content":"four"},{"role":"user","content":"five"}]}`
	r, err := DecodeRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"one", "two", "three", "four", "five"}
	for i := range r.Messages {
		r.Messages[i].Content = append(r.Messages[i].Content, llm.Block{Type: llm.BlockText, Text: "added"})
	}
	for i, m := range r.Messages {
		if len(m.Content) != 2 || m.Content[0].Text != want[i] || m.Content[1].Text != "added" {
			t.Fatalf("message %d after appends: %+v", i, m.Content)
		}
	}
}

// TestDecodeRequestManyMessages: a conversation longer than the decoder's stack scratch keeps its
// messages in order, with a system message cleared at the next user message dropped, whether it
// falls within the first sixteen or past them.
func TestDecodeRequestManyMessages(t *testing.T) {
	for _, n := range []int{15, 16, 17, 40} {
		var msgs []string
		var want []string
		for i := range n {
			role := [2]string{"user", "assistant"}[i%2]
			text := fmt.Sprintf("turn %d", i)
			msgs = append(msgs, fmt.Sprintf(`{"role":%q,"content":%q}`, role, text))
			want = append(want, role+": "+text)
			if i == 3 || i == n-4 {
				msgs = append(msgs, `{"role":"system","content":"hidden","clear_at":"next_user_message"}`)
			}
		}
		body := `{"model":"m","max_tokens":5,"temperature":0.5,"top_p":0.25,"top_k":7,"messages":[` + strings.Join(msgs, ",") + `]}`
		r, err := DecodeRequest([]byte(body))
		if err != nil {
			t.Fatalf("%d messages: %v", n, err)
		}
		var got []string
		for _, m := range r.Messages {
			got = append(got, m.Role.String()+": "+m.Content[0].Text)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%d messages (-want +got):\n%s", n, diff)
		}
		if *r.Temperature != 0.5 || *r.TopP != 0.25 || *r.TopK != 7 {
			t.Errorf("%d messages: temperature %v, top_p %v, top_k %v", n, *r.Temperature, *r.TopP, *r.TopK)
		}
	}
}
