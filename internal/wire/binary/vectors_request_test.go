package binary

import (
	"encoding/json"

	"github.com/layer0ai/layer0/internal/llm"
)

// requestVector is a valid request and what it decodes to.
type requestVector struct {
	name   string
	header map[string]string
	mode   Mode
	parts  []part
	want   *llm.Request
}

func ptrF(f float64) *float64 { return &f }
func ptrI(i int) *int         { return &i }

const weatherSchema = `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`

func requestVectors() []requestVector {
	text := func(s string) []llm.Block { return []llm.Block{{Type: llm.BlockText, Text: s}} }
	return []requestVector{
		{
			name:   "v1 system and user",
			header: map[string]string{"Content-Type": MediaType},
			mode:   Mode{Version: V1},
			parts: cat(
				txt("ANTH", "magic"),
				u8(22, "model name length"), txt("claude35sonnet20240620", "model name (dashes stripped; matched ignoring - . and case)"),
				u8(2, "message count"),
				u8(2, "messages[0].role system"), u16(9, "messages[0].content length"), txt("Be brief.", "messages[0].content"),
				u8(0, "messages[1].role user"), u16(2, "messages[1].content length"), txt("Hi", "messages[1].content"),
				u16(100, "max_tokens"),
			),
			want: &llm.Request{
				Model:     "claude35sonnet20240620",
				System:    text("Be brief."),
				Messages:  []llm.Message{{Role: llm.RoleUser, Content: text("Hi")}},
				MaxTokens: 100,
			},
		},
		{
			name:   "v1 multi-turn UTF-8",
			header: map[string]string{"Content-Type": MediaType},
			mode:   Mode{Version: V1},
			parts: cat(
				txt("ANTH", "magic"),
				u8(3, "model name length"), txt("sim", "model name"),
				u8(3, "message count"),
				u8(0, "messages[0].role user"), u16(6, "messages[0].content length"), txt("你好", "messages[0].content"),
				u8(1, "messages[1].role assistant"), u16(6, "messages[1].content length"), txt("Hello!", "messages[1].content"),
				u8(0, "messages[2].role user"), u16(3, "messages[2].content length"), txt("°C", "messages[2].content"),
				u16(65535, "max_tokens (the version-1 maximum)"),
			),
			want: &llm.Request{
				Model: "sim",
				Messages: []llm.Message{
					{Role: llm.RoleUser, Content: text("你好")},
					{Role: llm.RoleAssistant, Content: text("Hello!")},
					{Role: llm.RoleUser, Content: text("°C")},
				},
				MaxTokens: 65535,
			},
		},
		{
			name:   "v2 minimal, version by header",
			header: map[string]string{"Content-Type": MediaType, VersionHeader: "2"},
			mode:   Mode{Version: V2},
			parts: cat(
				txt("ANTH", "magic"), u8(2, "version"),
				str("sim", "model"),
				uv(300, "max_tokens"),
				uv(1, "message count"),
				u8(0, "messages[0].role user"), uv(1, "messages[0].block count"),
				u8(0, "messages[0].content[0].type text"), str("Hi", "messages[0].content[0].text"),
			),
			want: &llm.Request{
				Model:     "sim",
				Messages:  []llm.Message{{Role: llm.RoleUser, Content: text("Hi")}},
				MaxTokens: 300,
			},
		},
		{
			name:   "v2 every parameter, tool round trip, text output",
			header: map[string]string{"Content-Type": MediaType + "; version=2"},
			mode:   Mode{Version: V2, Text: true},
			parts: cat(
				txt("ANTH", "magic"), u8(2, "version"),
				str("claude-3-5-sonnet-20240620", "model"),
				uv(1024, "max_tokens"),
				uv(3, "message count"),
				u8(0, "messages[0].role user"), uv(2, "messages[0].block count"),
				u8(0, "messages[0].content[0].type text"), str("Weather in Paris?", "messages[0].content[0].text"),
				u8(1, "messages[0].content[1].type image"), u8(1, "messages[0].content[1].source url"),
				str("https://example.com/paris.png", "messages[0].content[1].url"),
				u8(1, "messages[1].role assistant"), uv(1, "messages[1].block count"),
				u8(2, "messages[1].content[0].type tool_use"), str("toolu_01", "messages[1].content[0].id"),
				str("get_weather", "messages[1].content[0].name"), str(`{"city":"Paris"}`, "messages[1].content[0].input"),
				u8(0, "messages[2].role user"), uv(1, "messages[2].block count"),
				u8(3, "messages[2].content[0].type tool_result"), str("toolu_01", "messages[2].content[0].tool_use_id"),
				u8(0, "messages[2].content[0].is_error"), uv(1, "messages[2].content[0].block count"),
				u8(0, "messages[2].content[0].content[0].type text"), str("18°C, sunny", "messages[2].content[0].content[0].text"),
				u8(0x01, "param tag system"), uv(14, "param length"), txt("You are terse.", "system"),
				u8(0x02, "param tag temperature"), uv(8, "param length"), f64(0.5, "temperature"),
				u8(0x03, "param tag top_p"), uv(8, "param length"), f64(0.9, "top_p"),
				u8(0x04, "param tag top_k"), uv(1, "param length"), uv(40, "top_k"),
				u8(0x05, "param tag stop_sequence"), uv(8, "param length"), txt("\n\nHuman:", "stop_sequences[0]"),
				u8(0x06, "param tag tool"), uv(1+11+1+26+1+len(weatherSchema), "param length"),
				str("get_weather", "tools[0].name"), str("Current weather for a city", "tools[0].description"),
				str(weatherSchema, "tools[0].input_schema"),
				u8(0x07, "param tag tool_choice"), uv(2, "param length"), u8(0, "tool_choice.type auto"),
				u8(1, "tool_choice.disable_parallel_tool_use"),
				u8(0x08, "param tag user_id"), uv(7, "param length"), txt("user-42", "metadata.user_id"),
				u8(0x09, "param tag output"), uv(1, "param length"), u8(1, "output text frames"),
			),
			want: &llm.Request{
				Model:  "claude-3-5-sonnet-20240620",
				System: text("You are terse."),
				Messages: []llm.Message{
					{Role: llm.RoleUser, Content: []llm.Block{
						{Type: llm.BlockText, Text: "Weather in Paris?"},
						{Type: llm.BlockImage, URL: "https://example.com/paris.png"},
					}},
					{Role: llm.RoleAssistant, Content: []llm.Block{
						{Type: llm.BlockToolUse, ID: "toolu_01", Name: "get_weather", Input: json.RawMessage(`{"city":"Paris"}`)},
					}},
					{Role: llm.RoleUser, Content: []llm.Block{
						{Type: llm.BlockToolResult, ToolUseID: "toolu_01", Content: text("18°C, sunny")},
					}},
				},
				MaxTokens:     1024,
				Temperature:   ptrF(0.5),
				TopP:          ptrF(0.9),
				TopK:          ptrI(40),
				StopSequences: []string{"\n\nHuman:"},
				Tools:         []llm.Tool{{Name: "get_weather", Description: "Current weather for a city", InputSchema: json.RawMessage(weatherSchema)}},
				ToolChoice:    llm.ToolChoice{Type: llm.ToolAuto, DisableParallelToolUse: true},
				UserID:        "user-42",
			},
		},
	}
}

// invalidVector is a request every server must refuse with 400 INVALID_BINARY; field is the
// Param the error names.
type invalidVector struct {
	name    string
	version Version
	header  map[string]string
	parts   []part
	field   string
	message string // filled from the golden file
}

func invalidVectors() []invalidVector {
	ct1 := map[string]string{"Content-Type": MediaType}
	ct2 := map[string]string{"Content-Type": MediaType + "; version=2"}
	model := cat(u8(3, "model name length"), txt("sim", "model name"))
	return []invalidVector{
		{name: "bad magic", version: V1, header: ct1, field: "magic",
			parts: cat(txt("ANTX", "magic, wrong"), model, u8(1, "count"), u8(0, "role"), u16(1, "length"), txt("x", "content"), u16(5, "max_tokens"))},
		{name: "truncated inside the model name", version: V1, header: ct1, field: "model name",
			parts: cat(txt("ANTH", "magic"), u8(40, "model name length"), txt("sim", "3 of 40 model bytes"))},
		{name: "zero messages", version: V1, header: ct1, field: "message count",
			parts: cat(txt("ANTH", "magic"), model, u8(0, "message count"), u16(5, "max_tokens"))},
		{name: "bad role", version: V1, header: ct1, field: "messages[0].role",
			parts: cat(txt("ANTH", "magic"), model, u8(1, "message count"), u8(7, "role, not 0-2"), u16(1, "length"), txt("x", "content"), u16(5, "max_tokens"))},
		{name: "content length beyond the body", version: V1, header: ct1, field: "messages[0].content",
			parts: cat(txt("ANTH", "magic"), model, u8(1, "message count"), u8(0, "role user"), u16(1000, "content length"), txt("short", "content"))},
		{name: "invalid UTF-8", version: V1, header: ct1, field: "messages[0].content",
			parts: cat(txt("ANTH", "magic"), model, u8(1, "message count"), u8(0, "role user"), u16(3, "content length"), bs("61 ff 62", "content with byte 0xff"), u16(5, "max_tokens"))},
		{name: "max_tokens zero", version: V1, header: ct1, field: "max_tokens",
			parts: cat(txt("ANTH", "magic"), model, u8(1, "message count"), u8(0, "role user"), u16(1, "length"), txt("x", "content"), u16(0, "max_tokens"))},
		{name: "trailing bytes", version: V1, header: ct1, field: "end",
			parts: cat(txt("ANTH", "magic"), model, u8(1, "message count"), u8(0, "role user"), u16(1, "length"), txt("x", "content"), u16(5, "max_tokens"), bs("00", "extra byte"))},
		{name: "wrong content type", version: V1, header: map[string]string{"Content-Type": "application/json"}, field: "Content-Type",
			parts: cat(txt("ANTH", "magic"), model, u8(1, "message count"), u8(0, "role user"), u16(1, "length"), txt("x", "content"), u16(5, "max_tokens"))},
		{name: "unsupported version", version: V1, header: map[string]string{"Content-Type": MediaType + "; version=9"}, field: "Content-Type version parameter",
			parts: cat(txt("ANTH", "magic"))},
		{name: "v2 version byte mismatch", version: V2, header: ct2, field: "version",
			parts: cat(txt("ANTH", "magic"), u8(1, "version, not 2"))},
		{name: "v2 system role", version: V2, header: ct2, field: "messages[0].role",
			parts: cat(txt("ANTH", "magic"), u8(2, "version"), str("sim", "model"), uv(5, "max_tokens"), uv(1, "message count"), u8(2, "role system"), uv(1, "block count"), u8(0, "type text"), str("x", "text"))},
		{name: "v2 non-minimal varint", version: V2, header: ct2, field: "max_tokens",
			parts: cat(txt("ANTH", "magic"), u8(2, "version"), str("sim", "model"), bs("85 00", "max_tokens 5 in two bytes"))},
		{name: "v2 unknown required param", version: V2, header: ct2, field: "param tag",
			parts: cat(txt("ANTH", "magic"), u8(2, "version"), str("sim", "model"), uv(5, "max_tokens"), uv(1, "message count"), u8(0, "role user"), uv(1, "block count"), u8(0, "type text"), str("x", "text"),
				u8(0x20, "param tag 0x20 (unknown, not optional)"), uv(0, "param length"))},
		{name: "v2 temperature above 1", version: V2, header: ct2, field: "temperature",
			parts: cat(txt("ANTH", "magic"), u8(2, "version"), str("sim", "model"), uv(5, "max_tokens"), uv(1, "message count"), u8(0, "role user"), uv(1, "block count"), u8(0, "type text"), str("x", "text"),
				u8(0x02, "param tag temperature"), uv(8, "param length"), f64(5, "temperature, above the JSON API's 1"))},
		{name: "v2 tool_use in a user message", version: V2, header: ct2, field: "messages[0].content[0].type",
			parts: cat(txt("ANTH", "magic"), u8(2, "version"), str("sim", "model"), uv(5, "max_tokens"), uv(1, "message count"), u8(0, "role user"), uv(1, "block count"),
				u8(2, "type tool_use, allowed in assistant messages only"), str("toolu_1", "id"), str("f", "name"), str("{}", "input"))},
	}
}
