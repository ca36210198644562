package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

func TestDecodeRequestMalformed(t *testing.T) {
	tests := []struct {
		name, body, param string
	}{
		{"not json", `{`, ""},
		{"array body", `[]`, ""},
		{"string body", `"x"`, ""},
		{"no model", `{"messages":[{"role":"user","content":"hi"}]}`, "model"},
		{"duplicate model", `{"model":"a","messages":[{"role":"user","content":"hi"}],"model":"b"}`, "model"},
		{"duplicate model in another case", `{"model":"a","messages":[{"role":"user","content":"hi"}],"Model":"b"}`, "Model"},
		{"duplicate model, escaped", `{"model":"a","messages":[{"role":"user","content":"hi"}],"mod\u0065l":"b"}`, "model"},
		{"duplicate unknown field", `{"model":"a","seed":1,"messages":[{"role":"user","content":"hi"}],"seed":2}`, "seed"},
		{"duplicate past 32 fields", `{"model":"a","x0":0,"x1":1,"x2":2,"x3":3,"x4":4,"x5":5,"x6":6,"x7":7,"x8":8,"x9":9,"x10":10,"x11":11,"x12":12,"x13":13,"x14":14,"x15":15,"x16":16,"x17":17,"x18":18,"x19":19,"x20":20,"x21":21,"x22":22,"x23":23,"x24":24,"x25":25,"x26":26,"x27":27,"x28":28,"x29":29,"x30":30,"x31":31,"x32":32,"x33":33,"x34":34,"x35":35,"x36":36,"x37":37,"x38":38,"x39":39,"messages":[{"role":"user","content":"hi"}],"x7":1}`, "x7"},
		{"duplicate past 32 fields, first ones", `{"model":"a","x0":0,"x1":1,"x2":2,"x3":3,"x4":4,"x5":5,"x6":6,"x7":7,"x8":8,"x9":9,"x10":10,"x11":11,"x12":12,"x13":13,"x14":14,"x15":15,"x16":16,"x17":17,"x18":18,"x19":19,"x20":20,"x21":21,"x22":22,"x23":23,"x24":24,"x25":25,"x26":26,"x27":27,"x28":28,"x29":29,"x30":30,"x31":31,"x32":32,"x33":33,"x34":34,"x35":35,"x36":36,"x37":37,"x38":38,"x39":39,"messages":[{"role":"user","content":"hi"}],"MODEL":"b"}`, "MODEL"},
		{"duplicate content in a message", `{"model":"m","messages":[{"role":"user","content":"many many words","content":"small"}]}`, "messages[0].content"},
		{"duplicate content in another case", `{"model":"m","messages":[{"role":"user","content":"many many words","Content":"small"}]}`, "messages[0].Content"},
		{"duplicate text in a part", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"big","t\u0065xt":"s"}]}]}`, "messages[0].content[0].text"},
		{"duplicate image url", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://a/x.png","URL":"https://b/y.png"}}]}]}`, "messages[0].content[0].image_url.URL"},
		{"duplicate in tool call arguments", `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":{\"b\":[{\"c\":1,\"c\":2}]}}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}]}`, "messages[1].tool_calls[0].function.arguments.a.b[0].c"},
		{"duplicate function name in a tool call", `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","NAME":"g","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c","content":"r"}]}`, "messages[1].tool_calls[0].function.NAME"},
		{"duplicate in a tool schema", `{"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"x":{},"x":{"type":"string"}}}}}],"messages":[{"role":"user","content":"hi"}]}`, "tools[0].function.parameters.properties.x"},
		{"duplicate in a response schema", `{"model":"m","response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"required":[],"required":["a"]}}},"messages":[{"role":"user","content":"hi"}]}`, "response_format.json_schema.schema.required"},
		{"duplicate tool_choice function", `{"model":"m","tool_choice":{"type":"function","function":{"name":"f"},"Function":{"name":"g"}},"messages":[{"role":"user","content":"hi"}]}`, "tool_choice.Function"},
		{"duplicate in metadata", `{"model":"m","metadata":{"model":"x","model":"y"},"messages":[{"role":"user","content":"hi"}]}`, "metadata.model"},
		{"duplicate include_usage", `{"model":"m","stream":true,"stream_options":{"include_usage":true,"include_usage":false},"messages":[{"role":"user","content":"hi"}]}`, "stream_options.include_usage"},
		{"empty model", `{"model":"","messages":[{"role":"user","content":"hi"}]}`, "model"},
		{"model not string", `{"model":3,"messages":[{"role":"user","content":"hi"}]}`, "model"},
		{"no messages", `{"model":"m"}`, "messages"},
		{"empty messages", `{"model":"m","messages":[]}`, "messages"},
		{"messages not array", `{"model":"m","messages":"hi"}`, "messages"},
		{"only system", `{"model":"m","messages":[{"role":"system","content":"s"}]}`, "messages"},
		{"no role", `{"model":"m","messages":[{"content":"hi"}]}`, "messages[0].role"},
		{"bad role", `{"model":"m","messages":[{"role":"robot","content":"hi"}]}`, "messages[0].role"},
		{"function role", `{"model":"m","messages":[{"role":"function","name":"f","content":"x"}]}`, "messages[0].role"},
		{"role not string", `{"model":"m","messages":[{"role":1,"content":"hi"}]}`, "messages.role"},
		{"user no content", `{"model":"m","messages":[{"role":"user"}]}`, "messages[0].content"},
		{"user content number", `{"model":"m","messages":[{"role":"user","content":5}]}`, "messages[0].content"},
		{"user empty parts", `{"model":"m","messages":[{"role":"user","content":[]}]}`, "messages[0].content"},
		{"part no type", `{"model":"m","messages":[{"role":"user","content":[{"text":"x"}]}]}`, "messages[0].content[0].type"},
		{"part audio", `{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]}`, "messages[0].content[0].type"},
		{"text part no text", `{"model":"m","messages":[{"role":"user","content":[{"type":"text"}]}]}`, "messages[0].content[0].text"},
		{"image no url", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]}`, "messages[0].content[0].image_url.url"},
		{"image bad scheme", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"ftp://x/y.png"}}]}]}`, "messages[0].content[0].image_url.url"},
		{"image data not base64", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png,abc"}}]}]}`, "messages[0].content[0].image_url.url"},
		{"image data not image", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:text/plain;base64,YQ=="}}]}]}`, "messages[0].content[0].image_url.url"},
		{"image data URL not base64", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,!!!"}}]}]}`, "messages[0].content[0].image_url.url"},
		{"image data URL unpadded", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,aGVsbG8"}}]}]}`, "messages[0].content[0].image_url.url"},
		{"image data URL media type", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/svg+xml;base64,PHN2Zy8+"}}]}]}`, "messages[0].content[0].image_url.url"},
		{"image file URL", `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"file:///etc/passwd"}}]}]}`, "messages[0].content[0].image_url.url"},
		{"metadata too many pairs", `{"model":"m","metadata":{"k0": "v", "k1": "v", "k2": "v", "k3": "v", "k4": "v", "k5": "v", "k6": "v", "k7": "v", "k8": "v", "k9": "v", "k10": "v", "k11": "v", "k12": "v", "k13": "v", "k14": "v", "k15": "v", "k16": "v"},"messages":[{"role":"user","content":"hi"}]}`, "metadata"},
		{"metadata long key", `{"model":"m","metadata":{"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk": "v"},"messages":[{"role":"user","content":"hi"}]}`, "metadata"},
		{"metadata long value", `{"model":"m","metadata":{"a": "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"},"messages":[{"role":"user","content":"hi"}]}`, "metadata"},
		{"metadata number value", `{"model":"m","metadata":{"a":1},"messages":[{"role":"user","content":"hi"}]}`, "metadata"},
		{"metadata nested value", `{"model":"m","metadata":{"x":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]},"messages":[{"role":"user","content":"hi"}]}`, "metadata"},
		{"metadata array", `{"model":"m","metadata":["a"],"messages":[{"role":"user","content":"hi"}]}`, "metadata"},
		{"metadata string", `{"model":"m","metadata":"a","messages":[{"role":"user","content":"hi"}]}`, "metadata"},
		{"system image part", `{"model":"m","messages":[{"role":"system","content":[{"type":"image_url","image_url":{"url":"https://x"}}]},{"role":"user","content":"hi"}]}`, "messages[0].content[0].type"},
		{"tool no id", `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"tool","content":"r"}]}`, "messages[1].tool_call_id"},
		{"tool no content", `{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"call_1"}]}`, "messages[1].content"},
		{"tool call no id", `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}]}`, "messages[0].tool_calls[0].id"},
		{"tool call no name", `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"arguments":"{}"}}]}]}`, "messages[0].tool_calls[0].function.name"},
		{"tool call bad type", `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"custom","function":{"name":"f"}}]}]}`, "messages[0].tool_calls[0].type"},
		{"tool call bad args", `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{oops"}}]}]}`, "messages[0].tool_calls[0].function.arguments"},
		{"tool call args array", `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"[1]"}}]}]}`, "messages[0].tool_calls[0].function.arguments"},
		{"assistant image", `{"model":"m","messages":[{"role":"assistant","content":[{"type":"image_url","image_url":{"url":"https://x"}}]}]}`, "messages[0].content[0]"},
		{"n=2", `{"model":"m","n":2,"messages":[{"role":"user","content":"hi"}]}`, "n"},
		{"n=0", `{"model":"m","n":0,"messages":[{"role":"user","content":"hi"}]}`, "n"},
		{"max_tokens 0", `{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`, "max_tokens"},
		{"max_tokens string", `{"model":"m","max_tokens":"10","messages":[{"role":"user","content":"hi"}]}`, "max_tokens"},
		{"max_completion_tokens negative", `{"model":"m","max_completion_tokens":-1,"messages":[{"role":"user","content":"hi"}]}`, "max_completion_tokens"},
		{"temperature high", `{"model":"m","temperature":2.5,"messages":[{"role":"user","content":"hi"}]}`, "temperature"},
		{"top_p high", `{"model":"m","top_p":1.5,"messages":[{"role":"user","content":"hi"}]}`, "top_p"},
		{"top_k negative", `{"model":"m","top_k":-3,"messages":[{"role":"user","content":"hi"}]}`, "top_k"},
		{"stop number", `{"model":"m","stop":5,"messages":[{"role":"user","content":"hi"}]}`, "stop"},
		{"stop mixed list", `{"model":"m","stop":["a",1],"messages":[{"role":"user","content":"hi"}]}`, "stop"},
		{"stream string", `{"model":"m","stream":"yes","messages":[{"role":"user","content":"hi"}]}`, "stream"},
		{"tool bad type", `{"model":"m","tools":[{"type":"retrieval"}],"messages":[{"role":"user","content":"hi"}]}`, "tools[0].type"},
		{"tool no name", `{"model":"m","tools":[{"type":"function","function":{}}],"messages":[{"role":"user","content":"hi"}]}`, "tools[0].function.name"},
		{"tool params not object", `{"model":"m","tools":[{"type":"function","function":{"name":"f","parameters":[1]}}],"messages":[{"role":"user","content":"hi"}]}`, "tools[0].function.parameters"},
		{"tool_choice bad string", `{"model":"m","tool_choice":"always","messages":[{"role":"user","content":"hi"}]}`, "tool_choice"},
		{"tool_choice unknown tool", `{"model":"m","tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}},"messages":[{"role":"user","content":"hi"}]}`, "tool_choice.function.name"},
		{"tool_choice bad type", `{"model":"m","tool_choice":{"type":"x"},"messages":[{"role":"user","content":"hi"}]}`, "tool_choice.type"},
		{"tool_choice number", `{"model":"m","tool_choice":3,"messages":[{"role":"user","content":"hi"}]}`, "tool_choice"},
		{"functions", `{"model":"m","functions":[{"name":"f"}],"messages":[{"role":"user","content":"hi"}]}`, "functions"},
		// The rules every front shares (llm.Request.Validate), named as OpenAI spells the fields.
		{"user content empty", `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":""}]}`, "messages[1].content"},
		{"user text parts empty", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":""}]}]}`, "messages[0].content"},
		{"assistant empty in the middle", `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":""},{"role":"system","content":"s"},{"role":"user","content":"b"}]}`, "messages[1].content"},
		{"assistant empty before a tool result", `{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":null},{"role":"tool","tool_call_id":"c","content":"r"}]}`, "messages[1].content"},
		{"max_tokens above int32", `{"model":"m","max_tokens":2147483648,"messages":[{"role":"user","content":"hi"}]}`, "max_tokens"},
		{"max_completion_tokens above int32", `{"model":"m","max_completion_tokens":9999999999,"messages":[{"role":"user","content":"hi"}]}`, "max_completion_tokens"},
		{"top_k above int32", `{"model":"m","top_k":2147483648,"messages":[{"role":"user","content":"hi"}]}`, "top_k"},
		{"temperature NaN-like", `{"model":"m","temperature":-0.5,"messages":[{"role":"user","content":"hi"}]}`, "temperature"},
		{"tool name with a space", `{"model":"m","tools":[{"type":"function","function":{"name":"get weather"}}],"messages":[{"role":"user","content":"hi"}]}`, "tools[0].function.name"},
		{"tool names duplicated", `{"model":"m","tools":[{"type":"function","function":{"name":"f"}},{"type":"function","function":{"name":"f"}}],"messages":[{"role":"user","content":"hi"}]}`, "tools[1].function.name"},
	}
	if len(tests) < 30 {
		t.Fatalf("got %d malformed cases, want at least 30", len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := DecodeRequest([]byte(tt.body))
			if err == nil {
				t.Fatalf("got request %+v, want an error", r)
			}
			var e *apierr.Error
			if !errors.As(err, &e) {
				t.Fatalf("got %T %v, want *apierr.Error", err, err)
			}
			if e.Kind != apierr.InvalidRequest {
				t.Errorf("got kind %v, want InvalidRequest", e.Kind)
			}
			if e.Param != tt.param {
				t.Errorf("got param %q, want %q (message %q)", e.Param, tt.param, e.Message)
			}
			if e.Message == "" {
				t.Error("got an empty message")
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestDecodeRequest(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		want  *llm.Request
		extra Extras
	}{
		{
			name: "minimal",
			body: `{"model":"gpt","messages":[{"role":"user","content":"hi"}]}`,
			want: &llm.Request{Model: "gpt", Format: llm.FormatOpenAI, Messages: []llm.Message{
				{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "hi"}}}}},
		},
		{
			name: "parameters",
			body: `{"model":"gpt","stream":true,"stream_options":{"include_usage":true},"max_tokens":5,
				"max_completion_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":40,"n":1,"stop":"END",
				"user":"u1","seed":3,"logprobs":false,"response_format":{"type":"text"},
				"messages":[{"role":"developer","content":"be brief"},{"role":"system","content":[{"type":"text","text":"s2"}]},
				{"role":"user","content":"hi","name":"bob"}]}`,
			want: &llm.Request{Model: "gpt", Format: llm.FormatOpenAI, Stream: true, MaxTokens: 7, Ignored: "seed",
				Temperature: ptr(0.5), TopP: ptr(0.9), TopK: ptr(40), StopSequences: []string{"END"}, UserID: "u1",
				System:   []llm.Block{{Type: llm.BlockText, Text: "be brief"}, {Type: llm.BlockText, Text: "s2"}},
				Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "hi"}}}}},
			extra: Extras{IncludeUsage: true},
		},
		{
			name: "tools round",
			body: `{"model":"gpt","stop":["a","b"],"parallel_tool_calls":false,
				"tools":[{"type":"function","function":{"name":"get","description":"d","parameters":{"type":"object"}}}],
				"tool_choice":{"type":"function","function":{"name":"get"}},
				"messages":[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBO","detail":"low"}},{"type":"image_url","image_url":{"url":"https://x/y.jpg"}}]},
				{"role":"assistant","content":"calling","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get","arguments":"{\"q\":1}"}},{"id":"call_2","type":"function","function":{"name":"get","arguments":""}}]},
				{"role":"tool","tool_call_id":"call_1","content":"one"},
				{"role":"tool","tool_call_id":"call_2","content":[{"type":"text","text":"two"}]},
				{"role":"user","content":"thanks"}]}`,
			want: &llm.Request{Model: "gpt", Format: llm.FormatOpenAI, StopSequences: []string{"a", "b"},
				Tools:      []llm.Tool{{Name: "get", Description: "d", InputSchema: json.RawMessage(`{"type":"object"}`)}},
				ToolChoice: llm.ToolChoice{Type: llm.ToolNamed, Name: "get", DisableParallelToolUse: true},
				Messages: []llm.Message{
					{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "look"},
						{Type: llm.BlockImage, MediaType: "image/png", Data: "iVBO"}, {Type: llm.BlockImage, URL: "https://x/y.jpg"}}},
					{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockText, Text: "calling"},
						{Type: llm.BlockToolUse, ID: "call_1", Name: "get", Input: json.RawMessage(`{"q":1}`)},
						{Type: llm.BlockToolUse, ID: "call_2", Name: "get", Input: json.RawMessage(`{}`)}}},
					{Role: llm.RoleUser, Content: []llm.Block{
						{Type: llm.BlockToolResult, ToolUseID: "call_1", Content: []llm.Block{{Type: llm.BlockText, Text: "one"}}},
						{Type: llm.BlockToolResult, ToolUseID: "call_2", Content: []llm.Block{{Type: llm.BlockText, Text: "two"}}},
						{Type: llm.BlockText, Text: "thanks"}}},
				}},
		},
		{
			name: "tool choice strings and null fields",
			body: `{"model":"gpt","tool_choice":"required","stop":null,"top_k":-1,"stream_options":{"include_usage":true},
				"tools":[{"type":"function","function":{"name":"f"}}],
				"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"refusal":null}]}`,
			want: &llm.Request{Model: "gpt", Format: llm.FormatOpenAI,
				Tools:      []llm.Tool{{Name: "f", InputSchema: json.RawMessage(`{"type":"object","properties":{}}`)}},
				ToolChoice: llm.ToolChoice{Type: llm.ToolAny},
				Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "x"}}},
					{Role: llm.RoleAssistant}}},
		},
		{
			name: "empty text dropped, temperature up to 2",
			body: `{"model":"gpt","temperature":1.5,"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":""}]},
				{"role":"assistant","content":[{"type":"refusal","refusal":""},{"type":"text","text":"b"}]},
				{"role":"user","content":"c"},{"role":"assistant","content":""}]}`,
			want: &llm.Request{Model: "gpt", Format: llm.FormatOpenAI, Temperature: ptr(1.5),
				Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "a"}}},
					{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockText, Text: "b"}}},
					{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "c"}}},
					{Role: llm.RoleAssistant}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, x, err := DecodeRequestExtras([]byte(tt.body))
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("request mismatch (-want +got):\n%s", diff)
			}
			if x != tt.extra {
				t.Errorf("got extras %+v, want %+v", x, tt.extra)
			}
		})
	}
}

// TestRequestRoundTrip encodes canonical requests for an engine and decodes them back as a
// client request: what OpenAI can carry must survive.
func TestRequestRoundTrip(t *testing.T) {
	reqs := []*llm.Request{
		{Model: "m", MaxTokens: 100, Temperature: ptr(0.2), TopP: ptr(0.5), TopK: ptr(3), Stream: true,
			StopSequences: []string{"\n\n", "END"}, UserID: "user-7",
			System: []llm.Block{{Type: llm.BlockText, Text: "sys \"quoted\"\n"}},
			Messages: []llm.Message{
				{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "héllo\u2028<&>"}}},
				{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockText, Text: "ok"}}},
			}},
		{Model: "m",
			Tools:      []llm.Tool{{Name: "f", Description: "does f", InputSchema: json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}}}`)}},
			ToolChoice: llm.ToolChoice{Type: llm.ToolNamed, Name: "f", DisableParallelToolUse: true},
			Messages: []llm.Message{
				{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "a"}, {Type: llm.BlockImage, MediaType: "image/jpeg", Data: "/9j/4AAQ"}}},
				{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockToolUse, ID: "call_9", Name: "f", Input: json.RawMessage(`{"a":"x"}`)}}},
				{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockToolResult, ToolUseID: "call_9", Content: []llm.Block{{Type: llm.BlockText, Text: "res"}}}, {Type: llm.BlockText, Text: "more"}}},
			}},
	}
	for i, want := range reqs {
		want.Format = llm.FormatOpenAI
		body := AppendRequest(nil, want)
		if !json.Valid(body) {
			t.Fatalf("request %d: invalid JSON %s", i, body)
		}
		got, x, err := DecodeRequestExtras(body)
		if err != nil {
			t.Fatalf("request %d: got error %v for %s", i, err, body)
		}
		if x.IncludeUsage != want.Stream {
			t.Errorf("request %d: got include_usage %v, want %v", i, x.IncludeUsage, want.Stream)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("request %d mismatch (-want +got):\n%s\nbody %s", i, diff, body)
		}
	}
}

func TestAppendRequestToolIDs(t *testing.T) {
	r := &llm.Request{Model: "m", Messages: []llm.Message{
		{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "q"}}},
		{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockToolUse, ID: "toolu_01AB", Name: "f", Input: json.RawMessage(`{}`)}}},
		{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockToolResult, ToolUseID: "toolu_01AB", IsError: true,
			Content: []llm.Block{{Type: llm.BlockText, Text: "boom"}, {Type: llm.BlockImage, MediaType: "image/png", Data: "AA"}}}}},
	}}
	got := string(AppendRequest(nil, r))
	want := `{"model":"m","messages":[{"role":"user","content":"q"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_01AB","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"call_01AB","content":"boom"}]}`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// A system message inside the conversation is a system message at the same place.
func TestAppendRequestSystemMessages(t *testing.T) {
	text := func(s string) llm.Block { return llm.Block{Type: llm.BlockText, Text: s} }
	r := &llm.Request{Model: "m", System: []llm.Block{text("head")}, Messages: []llm.Message{
		{Role: llm.RoleUser, Content: []llm.Block{text("q")}},
		{Role: llm.RoleSystem, Content: []llm.Block{text("env"), text("more")}},
		{Role: llm.RoleAssistant, Content: []llm.Block{text("a")}},
		{Role: llm.RoleUser, Content: []llm.Block{text("q2")}},
	}}
	got := string(AppendRequest(nil, r))
	want := `{"model":"m","messages":[{"role":"system","content":"head"},{"role":"user","content":"q"},` +
		`{"role":"system","content":"env\n\nmore"},{"role":"assistant","content":"a"},{"role":"user","content":"q2"}]}`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestDecodeRequestUTF8(t *testing.T) {
	tests := []struct {
		name, body, param string
	}{
		{"model", "{\"model\":\"g\xffpt\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", "model"},
		{"user text", "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"b\xc3\"}]}", "messages[1].content"},
		{"text part", "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"ok\"},{\"type\":\"text\",\"text\":\"\xed\xa0\x80\"}]}]}", "messages[0].content[1].text"},
		{"after a nested object", "{\"model\":\"m\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"a\":[1,{\"b\":2}]}}}],\"user\":\"\xfe\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", "user"},
		{"stop element", "{\"model\":\"m\",\"stop\":[\"a\",\"\xff\"],\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", "stop[1]"},
		{"member name", "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\",\"n\xffme\":1}]}", "messages[0]"},
		{"top-level member name", "{\"\xff\":1}", "body"},
		{"outside any string", "{\"model\":\"m\"}\xff", "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeRequest([]byte(tt.body))
			var e *apierr.Error
			if !errors.As(err, &e) {
				t.Fatalf("got %v, want an *apierr.Error", err)
			}
			// The bodies are ASCII but for the bad bytes.
			off := strings.IndexFunc(tt.body, func(r rune) bool { return r >= utf8.RuneSelf })
			want := fmt.Sprintf("%s: string is not valid UTF-8 (byte offset %d)", tt.param, off)
			if e.Kind != apierr.InvalidRequest || e.Param != tt.param || e.Message != want {
				t.Errorf("got %v param %q %q, want a 400 about %q: %q", e.Kind, e.Param, e.Message, tt.param, want)
			}
		})
	}
}

func TestDecodeRequestStop(t *testing.T) {
	body := func(stop string) []byte {
		return []byte(`{"model":"m","stop":` + stop + `,"messages":[{"role":"user","content":"hi"}]}`)
	}
	r, err := DecodeRequest(body(`["a","b","c","d"]`))
	if err != nil {
		t.Fatalf("4 stop sequences: %v", err)
	}
	if diff := cmp.Diff([]string{"a", "b", "c", "d"}, r.StopSequences); diff != "" {
		t.Errorf("stop sequences (-want +got):\n%s", diff)
	}
	_, err = DecodeRequest(body(`["a","b","c","d","e"]`))
	var e *apierr.Error
	if !errors.As(err, &e) || e.Param != "stop" || e.Message != "stop: at most 4 stop sequences are allowed, got 5" {
		t.Errorf("5 stop sequences: got %v, want a 400 about stop", err)
	}
}

// TestDecodeRequestNestedKeys checks what is not a duplicate: the same name in two objects or
// inside a string, and names that differ in case where the JSON is passed on as it is (a schema,
// tool arguments, metadata), not read into a struct.
func TestDecodeRequestNestedKeys(t *testing.T) {
	body := `{"model":"m","metadata":{"k":"x","K":"y"},"tools":[{"type":"function","function":{"name":"f",` +
		`"parameters":{"type":"object","properties":{"a":{"type":"string"},"A":{"type":"string"}}}}}],` +
		`"messages":[{"role":"user","content":"\"model\":1,\"model\":2"},{"role":"assistant","tool_calls":` +
		`[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":{\"x\":1},\"A\":{\"x\":1}}"}}]},` +
		`{"role":"tool","tool_call_id":"c","content":"r"}]}`
	if _, err := DecodeRequest([]byte(body)); err != nil {
		t.Errorf("got %v, want decoded", err)
	}
}

// duplicateKey runs the decoder's check of repeated names over a whole body of shape s.
func duplicateKey(d *Decoder, s Shape) bool {
	d.Pos, d.Path, d.dup = 0, jsontext.Path{}, nil
	_ = d.Skip(s)
	return d.dup != nil
}

func TestDuplicateKeyAllocs(t *testing.T) {
	body := []byte(`{"model":"gpt","stream":true,"max_tokens":100,"messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"Tell me about the weather in Paris today, please."}]}`)
	d := NewDecoder(body)
	if n := testing.AllocsPerRun(100, func() { duplicateKey(d, shapeRequest) }); n != 0 {
		t.Errorf("the duplicate check allocates %v times on a request without escapes, want 0", n)
	}
}

// BenchmarkDuplicateKey is the duplicate check on the same body, read with names compared as
// the decoder compares them.
func BenchmarkDuplicateKey(b *testing.B) {
	body := []byte(`{"model":"gpt","stream":true,"max_tokens":100,"messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"Tell me about the weather in Paris today, please."}]}`)
	d := NewDecoder(body)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		duplicateKey(d, shapeRequest)
	}
}

// TestDecodeRequestIgnored checks that the first field the canonical request does not carry is
// named (the cache then leaves the request alone), at any depth, and that the fields read and
// dropped because they cannot change the answer are not.
func TestDecodeRequestIgnored(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	for _, tt := range []struct{ body, want string }{
		{`{"model":"m",` + msgs + `}`, ""},
		{`{"model":"m","temperature":0,"stop":"x","n":1,"user":"u","response_format":{"type":"text"},` + msgs + `}`, ""},
		{`{"model":"m","store":true,"service_tier":"auto","prompt_cache_key":"k","safety_identifier":"s","stream_options":null,` + msgs + `}`, ""},
		{`{"model":"m","seed":7,` + msgs + `}`, "seed"},
		{`{"model":"m",` + msgs + `,"logprobs":true,"top_logprobs":2}`, "logprobs"},
		{`{"model":"m","logit_bias":{"50256":-100},` + msgs + `}`, "logit_bias"},
		{`{"model":"m","presence_penalty":0.5,"frequency_penalty":0.5,` + msgs + `}`, "presence_penalty"},
		{`{"model":"m","min_p":0.1,` + msgs + `}`, "min_p"},
		{`{"model":"m","messages":[{"role":"user","name":"alice","content":"hi"}]}`, "name"},
		{`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"no","refusal":null},{"role":"user","content":"hi"}]}`, ""},
		{`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"no","refusal":"I won't"},{"role":"user","content":"hi"}]}`, "refusal"},
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
	// Decoding twice for an unknown field keeps json.Unmarshal's errors.
	for _, body := range []string{`{"model":"m","seed":1,"temperature":"hot",` + msgs + `}`, `{"model":"m",` + msgs + `} x`} {
		if _, err := DecodeRequest([]byte(body)); err == nil {
			t.Errorf("%s: decoded, want an error", body)
		}
	}
}

// TestDecodeRequestMetadata: metadata within OpenAI's bounds is accepted (and dropped).
func TestDecodeRequestMetadata(t *testing.T) {
	for _, tt := range []struct{ name, metadata string }{
		{"metadata null", `null`},
		{"metadata 16 pairs", `{"k0": "v", "k1": "v", "k2": "v", "k3": "v", "k4": "v", "k5": "v", "k6": "v", "k7": "v", "k8": "v", "k9": "v", "k10": "v", "k11": "v", "k12": "v", "k13": "v", "k14": "v", "k15": "v"}`},
		{"metadata long key and value", `{"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk": "éééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééé"}`},
		{"metadata escaped value", `{"a": "\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9"}`},
	} {
		body := `{"model":"m","metadata":` + tt.metadata + `,"messages":[{"role":"user","content":"hi"}]}`
		if _, err := DecodeRequest([]byte(body)); err != nil {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}
