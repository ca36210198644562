package binary

import (
	"bytes"
	ebin "encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/vocab"
)

// The test vectors of docs/protocol.md live in testdata/binary/vectors.json at the repository
// root, where every client implementation reads them. They are written from the definitions
// below with `go test ./internal/wire/binary -run TestVectors -update`; without -update the
// test checks the file matches, byte for byte.
var update = flag.Bool("update", false, "rewrite testdata/binary/vectors.json and the golden files")

const vectorsPath = "../../../testdata/binary/vectors.json"

// part is a run of bytes and what it means; a vector's bytes are its parts' concatenation.
type part struct {
	Hex     string `json:"hex"`
	Meaning string `json:"meaning"`
}

func spaced(b []byte) string {
	var s strings.Builder
	for i, c := range b {
		if i > 0 {
			s.WriteByte(' ')
		}
		fmt.Fprintf(&s, "%02x", c)
	}
	return s.String()
}

// Part builders: an encoder of the test's own, so the vectors check the package's encoder.
func raw(b []byte, meaning string) part { return part{spaced(b), meaning} }
func bs(hexs, meaning string) part {
	b, err := hex.DecodeString(strings.ReplaceAll(hexs, " ", ""))
	if err != nil {
		panic(err)
	}
	return raw(b, meaning)
}
func txt(s, meaning string) part { return raw([]byte(s), fmt.Sprintf("%s %q", meaning, s)) }
func u8(n int, meaning string) part {
	return raw([]byte{byte(n)}, fmt.Sprintf("%s %d", meaning, n))
}
func u16(n int, meaning string) part {
	return raw(ebin.BigEndian.AppendUint16(nil, uint16(n)), fmt.Sprintf("%s %d (uint16)", meaning, n))
}
func u32(n int, meaning string) part {
	return raw(ebin.BigEndian.AppendUint32(nil, uint32(n)), fmt.Sprintf("%s %d (uint32)", meaning, n))
}
func uv(n int, meaning string) part {
	return raw(ebin.AppendUvarint(nil, uint64(n)), fmt.Sprintf("%s %d (uvarint)", meaning, n))
}
func f64(f float64, meaning string) part {
	return raw(ebin.BigEndian.AppendUint64(nil, math.Float64bits(f)), fmt.Sprintf("%s %v (float64)", meaning, f))
}

// str is a version-2 str: uvarint length and bytes, as two parts.
func str(s, meaning string) []part {
	return []part{uv(len(s), meaning+" length"), txt(s, meaning)}
}

// tokens1 is a version-1 token frame of the IDs encoding texts (one entry per ID).
func tokenFrame(v Version, meaning string, texts ...string) []part {
	voc := vocab.Default()
	var ids []uint32
	var names []string
	for _, t := range texts {
		for _, id := range voc.Append(nil, t) {
			ids = append(ids, id)
			names = append(names, fmt.Sprintf("%d %q", id, voc.Bytes(id)))
		}
	}
	var payload []byte
	for _, id := range ids {
		if v == V1 {
			payload = ebin.BigEndian.AppendUint16(payload, uint16(id))
		} else {
			payload = ebin.AppendUvarint(payload, uint64(id))
		}
	}
	return []part{
		frameHeader(v, FrameToken, len(payload), meaning),
		raw(payload, fmt.Sprintf("token IDs: %s", strings.Join(names, ", "))),
	}
}

// byteToken is the version-1 token ID of the entry that is the single byte b.
func byteToken(b byte, meaning string) part {
	id := vocab.Default().Append(nil, string([]byte{b}))[0]
	return raw(ebin.BigEndian.AppendUint16(nil, uint16(id)), fmt.Sprintf("token ID %d, byte %02x: %s", id, b, meaning))
}

func frameHeader(v Version, t FrameType, n int, meaning string) part {
	b := []byte{byte(t)}
	if v == V1 {
		b = ebin.BigEndian.AppendUint16(b, uint16(n))
		return raw(b, fmt.Sprintf("frame type %d (%s), length %d (uint16): %s", t, t, n, meaning))
	}
	b = ebin.AppendUvarint(b, uint64(n))
	return raw(b, fmt.Sprintf("frame type %d (%s), length %d (uvarint): %s", t, t, n, meaning))
}

// frame is a frame with its header computed from its payload parts.
func frame(v Version, t FrameType, meaning string, payload ...part) []part {
	n := 0
	for _, p := range payload {
		n += len(mustHex(p.Hex))
	}
	return append([]part{frameHeader(v, t, n, meaning)}, payload...)
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		panic(err)
	}
	return b
}

func cat(groups ...any) []part {
	var out []part
	for _, g := range groups {
		switch g := g.(type) {
		case part:
			out = append(out, g)
		case []part:
			out = append(out, g...)
		default:
			panic(fmt.Sprintf("cat: %T", g))
		}
	}
	return out
}

func joined(ps []part) []byte {
	var b []byte
	for _, p := range ps {
		b = append(b, mustHex(p.Hex)...)
	}
	return b
}

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

// streamStep is one step of a stream script: an event, a flush, or an error.
type streamStep struct {
	ev    *llm.Event
	flush bool
	err   *apierr.Error
}

// streamVector is a response stream: its bytes, the script whose StreamWriter output they are
// (nil for decode-only vectors), and what a client decodes.
type streamVector struct {
	name   string
	mode   Mode
	parts  []part
	script []streamStep
	expect streamExpect
}

// streamExpect is what a client makes of a stream, in the shape the JavaScript client returns.
type streamExpect struct {
	ID           string        `json:"id"`
	Model        string        `json:"model"`
	Content      []expectBlock `json:"content"`
	StopReason   string        `json:"stop_reason"`
	StopSequence string        `json:"stop_sequence"`
	Usage        *expectUsage  `json:"usage"`
	Error        *expectError  `json:"error"`
}

type expectBlock struct {
	Type  string `json:"type"`
	Text  string `json:"text,omitempty"`
	ID    string `json:"id,omitempty"`
	Name  string `json:"name,omitempty"`
	Input string `json:"input,omitempty"`
}

type expectUsage struct {
	InputTokens              int    `json:"input_tokens"`
	OutputTokens             int    `json:"output_tokens"`
	CacheCreationInputTokens int    `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int    `json:"cache_read_input_tokens"`
	CacheHitRatio            uint32 `json:"cache_hit_ratio"`
}

type expectError struct {
	Status  int    `json:"status"`
	Type    string `json:"type"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func ev(e llm.Event) streamStep { return streamStep{ev: &e} }

var flushStep = streamStep{flush: true}

func helloScript(flushEach bool, usage llm.Usage) []streamStep {
	s := []streamStep{
		ev(llm.Event{Kind: llm.EventStart, ID: "msg_01", Model: "sim", Usage: llm.Usage{InputTokens: usage.InputTokens, CacheReadInputTokens: usage.CacheReadInputTokens}}),
		ev(llm.Event{Kind: llm.EventBlockStart, Index: 0, Block: llm.BlockText}),
	}
	for _, t := range []string{"Hello", ",", " world", "!"} {
		s = append(s, ev(llm.Event{Kind: llm.EventTextDelta, Text: t}))
		if flushEach {
			s = append(s, flushStep)
		}
	}
	return append(s,
		ev(llm.Event{Kind: llm.EventBlockStop, Index: 0}),
		ev(llm.Event{Kind: llm.EventStop, Stop: llm.StopEndTurn, Usage: usage}),
		flushStep)
}

func streamVectors() []streamVector {
	usage := llm.Usage{InputTokens: 12, OutputTokens: 4, CacheReadInputTokens: 8}
	hello := []expectBlock{{Type: "text", Text: "Hello, world!"}}
	v1usage := cat(frame(V1, FrameUsage, "usage", u32(12, "input_tokens"), u32(4, "output_tokens"), u32(40000, "cache_hit_ratio 40% (8 cached of 20 prompt tokens)")))
	v2start := frame(V2, FrameStart, "start", cat(str("msg_01", "id"), str("sim", "model"), uv(12, "input_tokens"), uv(0, "cache_creation_input_tokens"), uv(8, "cache_read_input_tokens"))...)
	v2end := cat(
		frame(V2, FrameBlockStop, "block_stop"),
		frame(V2, FrameStop, "stop", u8(0, "stop_reason end_turn")),
		frame(V2, FrameUsage, "usage", uv(12, "input_tokens"), uv(4, "output_tokens"), uv(0, "cache_creation_input_tokens"), uv(8, "cache_read_input_tokens")),
		frame(V2, FrameDone, "done"),
	)
	overloaded := &apierr.Error{Kind: apierr.Overloaded, Message: "engine overloaded, try again"}
	return []streamVector{
		{
			name: "v1 one token per frame",
			mode: Mode{Version: V1},
			parts: cat(txt("ANTH", "magic"),
				tokenFrame(V1, "token", "Hello"), tokenFrame(V1, "token", ","), tokenFrame(V1, "token", " world"), tokenFrame(V1, "token", "!"),
				v1usage, frame(V1, FrameDone, "done")),
			script: helloScript(true, usage),
			expect: streamExpect{Content: hello, StopReason: "end_turn",
				Usage: &expectUsage{InputTokens: 12, OutputTokens: 4, CacheHitRatio: 40000}},
		},
		{
			name: "v1 coalesced",
			mode: Mode{Version: V1},
			parts: cat(txt("ANTH", "magic"),
				tokenFrame(V1, "all four tokens were ready at one flush", "Hello", ",", " world", "!"),
				v1usage, frame(V1, FrameDone, "done")),
			script: helloScript(false, usage),
			expect: streamExpect{Content: hello, StopReason: "end_turn",
				Usage: &expectUsage{InputTokens: 12, OutputTokens: 4, CacheHitRatio: 40000}},
		},
		{
			name: "v1 UTF-8 split across frames",
			mode: Mode{Version: V1},
			parts: cat(txt("ANTH", "magic"),
				frame(V1, FrameToken, "token", byteToken(0xe4, "the first byte of 你 (e4 bd a0)")),
				frame(V1, FrameToken, "token", byteToken(0xbd, "the second byte"), byteToken(0xa0, "the last byte: 你 is complete")),
				frame(V1, FrameUsage, "usage", u32(3, "input_tokens"), u32(1, "output_tokens"), u32(0, "cache_hit_ratio")),
				frame(V1, FrameDone, "done")),
			expect: streamExpect{Content: []expectBlock{{Type: "text", Text: "你"}}, StopReason: "end_turn",
				Usage: &expectUsage{InputTokens: 3, OutputTokens: 1}},
		},
		{
			name: "v1 error after the first token",
			mode: Mode{Version: V1},
			parts: cat(txt("ANTH", "magic"),
				tokenFrame(V1, "token", "Hello"),
				frame(V1, FrameError, "error", u16(529, "status"), txt(overloaded.Message, "message")),
				frame(V1, FrameDone, "done")),
			script: []streamStep{
				ev(llm.Event{Kind: llm.EventStart}), ev(llm.Event{Kind: llm.EventBlockStart}),
				ev(llm.Event{Kind: llm.EventTextDelta, Text: "Hello"}), flushStep,
				{err: overloaded},
			},
			expect: streamExpect{Content: []expectBlock{{Type: "text", Text: "Hello"}},
				Error: &expectError{Status: 529, Type: "overloaded_error", Message: overloaded.Message}},
		},
		{
			name: "v2 tokens coalesced",
			mode: Mode{Version: V2},
			parts: cat(txt("ANTH", "magic"), u8(2, "version"), v2start,
				frame(V2, FrameBlockStart, "block_start", u8(0, "kind text")),
				tokenFrame(V2, "token", "Hello", ",", " world", "!"),
				v2end),
			script: helloScript(false, usage),
			expect: streamExpect{ID: "msg_01", Model: "sim", Content: hello, StopReason: "end_turn",
				Usage: &expectUsage{InputTokens: 12, OutputTokens: 4, CacheReadInputTokens: 8, CacheHitRatio: 40000}},
		},
		{
			name: "v2 text output with a tool call",
			mode: Mode{Version: V2, Text: true},
			parts: cat(txt("ANTH", "magic"), u8(2, "version"),
				frame(V2, FrameStart, "start", cat(str("msg_02", "id"), str("sim", "model"), uv(40, "input_tokens"), uv(0, "cache_creation_input_tokens"), uv(0, "cache_read_input_tokens"))...),
				frame(V2, FrameBlockStart, "block_start", u8(0, "kind text")),
				frame(V2, FrameText, "text", txt("Let me check.", "UTF-8")),
				frame(V2, FrameBlockStop, "block_stop"),
				frame(V2, FrameBlockStart, "block_start", cat(u8(1, "kind tool_use"), str("toolu_01", "id"), str("get_weather", "name"))...),
				frame(V2, FrameToolInput, "tool_input", txt(`{"city":`, "input JSON fragment")),
				frame(V2, FrameToolInput, "tool_input", txt(`"Paris"}`, "input JSON fragment")),
				frame(V2, FrameBlockStop, "block_stop"),
				frame(V2, FrameStop, "stop", u8(3, "stop_reason tool_use")),
				frame(V2, FrameUsage, "usage", uv(40, "input_tokens"), uv(9, "output_tokens"), uv(0, "cache_creation_input_tokens"), uv(0, "cache_read_input_tokens")),
				frame(V2, FrameDone, "done")),
			script: []streamStep{
				ev(llm.Event{Kind: llm.EventStart, ID: "msg_02", Model: "sim", Usage: llm.Usage{InputTokens: 40}}),
				ev(llm.Event{Kind: llm.EventBlockStart, Block: llm.BlockText}),
				ev(llm.Event{Kind: llm.EventTextDelta, Text: "Let me"}),
				ev(llm.Event{Kind: llm.EventTextDelta, Text: " check."}),
				ev(llm.Event{Kind: llm.EventBlockStop}),
				ev(llm.Event{Kind: llm.EventBlockStart, Index: 1, Block: llm.BlockToolUse, ID: "toolu_01", Name: "get_weather"}),
				ev(llm.Event{Kind: llm.EventToolDelta, Index: 1, Text: `{"city":`}), flushStep,
				ev(llm.Event{Kind: llm.EventToolDelta, Index: 1, Text: `"Paris"}`}),
				ev(llm.Event{Kind: llm.EventBlockStop, Index: 1}),
				ev(llm.Event{Kind: llm.EventStop, Stop: llm.StopToolUse, Usage: llm.Usage{InputTokens: 40, OutputTokens: 9}}),
				flushStep,
			},
			expect: streamExpect{ID: "msg_02", Model: "sim", StopReason: "tool_use",
				Content: []expectBlock{{Type: "text", Text: "Let me check."}, {Type: "tool_use", ID: "toolu_01", Name: "get_weather", Input: `{"city":"Paris"}`}},
				Usage:   &expectUsage{InputTokens: 40, OutputTokens: 9}},
		},
		{
			name: "v2 stop sequence, unknown frame skipped",
			mode: Mode{Version: V2, Text: true},
			parts: cat(txt("ANTH", "magic"), u8(2, "version"),
				frame(V2, FrameBlockStart, "block_start", u8(0, "kind text")),
				frame(V2, FrameText, "text", txt("one, two", "UTF-8")),
				frame(V2, FrameType(0x3f), "a frame type this client does not know: skipped", bs("01 02 03", "payload")),
				frame(V2, FrameBlockStop, "block_stop"),
				frame(V2, FrameStop, "stop", u8(2, "stop_reason stop_sequence"), txt(", three", "stop_sequence")),
				frame(V2, FrameUsage, "usage", uv(5, "input_tokens"), uv(3, "output_tokens"), uv(0, "cache_creation_input_tokens"), uv(0, "cache_read_input_tokens")),
				frame(V2, FrameDone, "done")),
			expect: streamExpect{StopReason: "stop_sequence", StopSequence: ", three",
				Content: []expectBlock{{Type: "text", Text: "one, two"}},
				Usage:   &expectUsage{InputTokens: 5, OutputTokens: 3}},
		},
		{
			name: "v2 error with type and code",
			mode: Mode{Version: V2},
			parts: cat(txt("ANTH", "magic"), u8(2, "version"), v2start,
				frame(V2, FrameError, "error", cat(uv(504, "status"), str("timeout_error", "type"), str("ENGINE_TIMEOUT", "code"), txt("engine timed out", "message"))...),
				frame(V2, FrameDone, "done")),
			script: []streamStep{
				helloScript(false, usage)[0], flushStep,
				{err: &apierr.Error{Kind: apierr.Timeout, Code: "ENGINE_TIMEOUT", Message: "engine timed out"}},
			},
			expect: streamExpect{ID: "msg_01", Model: "sim",
				Error: &expectError{Status: 504, Type: "timeout_error", Code: "ENGINE_TIMEOUT", Message: "engine timed out"}},
		},
	}
}

// vectorFile is testdata/binary/vectors.json.
type vectorFile struct {
	Comment         string        `json:"comment"`
	Vocab           vectorVocab   `json:"vocab"`
	Requests        []jsonRequest `json:"requests"`
	InvalidRequests []jsonInvalid `json:"invalid_requests"`
	Streams         []jsonStream  `json:"streams"`
}

type vectorVocab struct {
	Hash    string `json:"hash"`
	Entries int    `json:"entries"`
	File    string `json:"file"`
}

type jsonRequest struct {
	Name    string            `json:"name"`
	Version Version           `json:"version"`
	Output  string            `json:"output"`
	Headers map[string]string `json:"headers"`
	Hex     string            `json:"hex"`
	Parts   []part            `json:"parts"`
	Request json.RawMessage   `json:"request"`
}

type jsonInvalid struct {
	Name    string            `json:"name"`
	Version Version           `json:"version"`
	Headers map[string]string `json:"headers"`
	Hex     string            `json:"hex"`
	Parts   []part            `json:"parts"`
	Field   string            `json:"field"`
	Error   string            `json:"error"`
}

type jsonStream struct {
	Name    string       `json:"name"`
	Version Version      `json:"version"`
	Output  string       `json:"output"`
	Hex     string       `json:"hex"`
	Parts   []part       `json:"parts"`
	Expect  streamExpect `json:"expect"`
}

func output(m Mode) string {
	if m.Text {
		return "text"
	}
	return "tokens"
}

// requestShape is the request in the Anthropic-like JSON shape the JavaScript client encodes.
// JSON values (tool inputs, schemas) stay raw, so their key order survives into the file and a
// client that re-serializes them produces the vector's bytes.
func requestShape(r *llm.Request) map[string]any {
	var block func(b llm.Block) map[string]any
	block = func(b llm.Block) map[string]any {
		switch b.Type {
		case llm.BlockImage:
			if b.URL != "" {
				return map[string]any{"type": "image", "source": map[string]any{"type": "url", "url": b.URL}}
			}
			return map[string]any{"type": "image", "source": map[string]any{"type": "base64", "media_type": b.MediaType, "data": b.Data}}
		case llm.BlockToolUse:
			return map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": b.Input}
		case llm.BlockToolResult:
			m := map[string]any{"type": "tool_result", "tool_use_id": b.ToolUseID, "is_error": b.IsError}
			var c []any
			for _, x := range b.Content {
				c = append(c, block(x))
			}
			m["content"] = c
			return m
		}
		return map[string]any{"type": "text", "text": b.Text}
	}
	m := map[string]any{"model": r.Model, "max_tokens": r.MaxTokens}
	if len(r.System) > 0 {
		var s []any
		for _, b := range r.System {
			s = append(s, b.Text)
		}
		m["system"] = s
	}
	var msgs []any
	for _, msg := range r.Messages {
		var c []any
		for _, b := range msg.Content {
			c = append(c, block(b))
		}
		msgs = append(msgs, map[string]any{"role": msg.Role.String(), "content": c})
	}
	m["messages"] = msgs
	if r.Temperature != nil {
		m["temperature"] = *r.Temperature
	}
	if r.TopP != nil {
		m["top_p"] = *r.TopP
	}
	if r.TopK != nil {
		m["top_k"] = *r.TopK
	}
	if len(r.StopSequences) > 0 {
		m["stop_sequences"] = r.StopSequences
	}
	if len(r.Tools) > 0 {
		var ts []any
		for _, t := range r.Tools {
			ts = append(ts, map[string]any{"name": t.Name, "description": t.Description, "input_schema": t.InputSchema})
		}
		m["tools"] = ts
	}
	if tc := r.ToolChoice; tc != (llm.ToolChoice{}) {
		types := []string{"auto", "any", "tool", "none"}
		c := map[string]any{"type": types[tc.Type], "disable_parallel_tool_use": tc.DisableParallelToolUse}
		if tc.Type == llm.ToolNamed {
			c["name"] = tc.Name
		}
		m["tool_choice"] = c
	}
	if r.UserID != "" {
		m["metadata"] = map[string]any{"user_id": r.UserID}
	}
	return m
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func header(m map[string]string) http.Header {
	h := http.Header{}
	for k, v := range m {
		h.Set(k, v)
	}
	return h
}

// runScript writes a stream script through a StreamWriter, returning the bytes and the number
// of writes.
func runScript(t testing.TB, mode Mode, script []streamStep) ([]byte, int) {
	t.Helper()
	var out bytes.Buffer
	writes := 0
	sw, err := NewStreamWriter(&out, func() error { writes++; return nil }, mode, vocab.Default())
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range script {
		switch {
		case st.ev != nil:
			err = sw.Send(st.ev)
		case st.flush:
			err = sw.Flush()
		case st.err != nil:
			err = sw.WriteError(st.err)
		}
		if err != nil {
			t.Fatalf("script: %v", err)
		}
	}
	return out.Bytes(), writes
}

// collect reads a stream the way a Go client does and returns what it got.
func collect(t testing.TB, mode Mode, r io.Reader) streamExpect {
	t.Helper()
	var c llm.Collector
	err := ReadStream(r, mode, vocab.Default(), &c)
	got := expectOf(&c.Response)
	if err != nil {
		var e *apierr.Error
		if !errors.As(err, &e) {
			t.Fatalf("ReadStream: %v", err)
		}
		got.Usage, got.StopReason = nil, ""
		got.Error = &expectError{Status: e.Status(), Type: e.Kind.AnthropicType(), Code: e.Code, Message: e.Message}
	}
	return got
}

func expectOf(r *llm.Response) streamExpect {
	e := streamExpect{ID: r.ID, Model: r.Model, StopReason: r.Stop.String(), StopSequence: r.StopSequence,
		Usage: &expectUsage{InputTokens: r.Usage.InputTokens, OutputTokens: r.Usage.OutputTokens,
			CacheCreationInputTokens: r.Usage.CacheCreationInputTokens, CacheReadInputTokens: r.Usage.CacheReadInputTokens}}
	for _, b := range r.Content {
		switch b.Type {
		case llm.BlockToolUse:
			e.Content = append(e.Content, expectBlock{Type: "tool_use", ID: b.ID, Name: b.Name, Input: string(b.Input)})
		default:
			e.Content = append(e.Content, expectBlock{Type: "text", Text: b.Text})
		}
	}
	return e
}

// fixRatio fills the cache hit ratio a Go collector does not keep: version 1 sends it, version 2
// derives it from the counts.
func fixRatio(got *streamExpect, want streamExpect) {
	if got.Usage != nil && want.Usage != nil {
		got.Usage.CacheHitRatio = want.Usage.CacheHitRatio
	}
}

func TestVectors(t *testing.T) {
	file := vectorFile{
		Comment: "Test vectors of the layer0 binary protocol (docs/protocol.md). Generated by " +
			"`go test ./internal/wire/binary -run TestVectors -update`; every client implementation in the " +
			"repository checks against them. hex is the concatenation of parts.",
		Vocab: vectorVocab{Hash: vocab.Default().Hash(), Entries: vocab.Default().Len(), File: "internal/vocab/cl100k_65536.vocab"},
	}
	golden := map[string]string{}
	if !*update {
		var old vectorFile
		b, err := os.ReadFile(vectorsPath)
		if err != nil {
			t.Fatalf("%v (run with -update to create it)", err)
		}
		if err := json.Unmarshal(b, &old); err != nil {
			t.Fatal(err)
		}
		for _, v := range old.InvalidRequests {
			golden[v.Name] = v.Error
		}
	}

	for _, v := range requestVectors() {
		body := joined(v.parts)
		t.Run("request/"+v.name, func(t *testing.T) {
			got, mode, err := DecodeRequest(body, header(v.header))
			if err != nil {
				t.Fatalf("DecodeRequest: %v", err)
			}
			want := *v.want
			want.Format, want.Stream = llm.FormatBinary, true
			if diff := cmp.Diff(&want, got); diff != "" {
				t.Errorf("decoded request (-want +got):\n%s", diff)
			}
			if mode != v.mode {
				t.Errorf("mode = %+v, want %+v", mode, v.mode)
			}
			enc, err := AppendRequest(nil, v.want, v.mode)
			if err != nil {
				t.Fatalf("AppendRequest: %v", err)
			}
			if !bytes.Equal(enc, body) {
				t.Errorf("AppendRequest:\n got % x\nwant % x", enc, body)
			}
		})
		file.Requests = append(file.Requests, jsonRequest{Name: v.name, Version: v.mode.Version, Output: output(v.mode),
			Headers: v.header, Hex: hex.EncodeToString(body), Parts: v.parts, Request: mustJSON(t, requestShape(v.want))})
	}

	for _, v := range invalidVectors() {
		body := joined(v.parts)
		_, _, err := DecodeRequest(body, header(v.header))
		var e *apierr.Error
		if !errors.As(err, &e) {
			t.Fatalf("invalid/%s: DecodeRequest error = %v, want *apierr.Error", v.name, err)
		}
		if e.Status() != http.StatusBadRequest || e.Code != ErrorCode || e.Param != v.field {
			t.Errorf("invalid/%s: got status %d code %q param %q, want 400 %q %q", v.name, e.Status(), e.Code, e.Param, ErrorCode, v.field)
		}
		if !*update && e.Message != golden[v.name] {
			t.Errorf("invalid/%s: message %q, want %q", v.name, e.Message, golden[v.name])
		}
		file.InvalidRequests = append(file.InvalidRequests, jsonInvalid{Name: v.name, Version: v.version, Headers: v.header,
			Hex: hex.EncodeToString(body), Parts: v.parts, Field: v.field, Error: e.Message})
	}

	for _, v := range streamVectors() {
		stream := joined(v.parts)
		t.Run("stream/"+v.name, func(t *testing.T) {
			if v.script != nil {
				got, _ := runScript(t, v.mode, v.script)
				if !bytes.Equal(got, stream) {
					t.Errorf("StreamWriter output:\n got % x\nwant % x", got, stream)
				}
			}
			got := collect(t, v.mode, bytes.NewReader(stream))
			fixRatio(&got, v.expect)
			if diff := cmp.Diff(v.expect, got); diff != "" {
				t.Errorf("decoded stream (-want +got):\n%s", diff)
			}
		})
		file.Streams = append(file.Streams, jsonStream{Name: v.name, Version: v.mode.Version, Output: output(v.mode),
			Hex: hex.EncodeToString(stream), Parts: v.parts, Expect: v.expect})
	}

	b, err := json.MarshalIndent(file, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	if *update {
		if err := os.MkdirAll(filepath.Dir(vectorsPath), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(vectorsPath, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	old, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(old, b) {
		t.Errorf("%s is out of date: run go test ./internal/wire/binary -run TestVectors -update and review the diff", vectorsPath)
	}
}
