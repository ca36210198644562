package binary

import (
	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

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
