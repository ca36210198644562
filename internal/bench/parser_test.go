package bench

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0/internal/wire/binary"
)

// parsed is what a parser concluded about a body.
type parsed struct {
	Tokens, Usage        int
	Done, Failed, Broken bool
	ErrMsg               string
}

// parseAll parses a body given in pieces; binary bodies are of version v.
func parseAll(kind parserKind, v binary.Version, pieces ...[]byte) parsed {
	var p parser
	p.reset(kind, v)
	n := 0
	for _, b := range pieces {
		n += p.feed(b)
	}
	n += p.finish()
	if n != p.tokens {
		return parsed{Tokens: -1, ErrMsg: "feed and finish returned a different total than the parser holds"}
	}
	return parsed{p.tokens, p.usage, p.done, p.failed, p.broken, string(p.errMsg)}
}

func sseEvents(evs ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(evs); i += 2 {
		b.WriteString("event: " + evs[i] + "\ndata: " + evs[i+1] + "\n\n")
	}
	return b.String()
}

func binaryBody(frames ...[]byte) []byte {
	b := []byte(binary.Magic)
	for _, f := range frames {
		b = append(b, f...)
	}
	return b
}

func frame(typ byte, payload ...byte) []byte {
	return append([]byte{typ, byte(len(payload) >> 8), byte(len(payload))}, payload...)
}

type parserCase struct {
	name string
	kind parserKind
	ver  binary.Version // of binary bodies
	body []byte
	want parsed
}

func parserCases(t testing.TB) []parserCase {
	up, err := NewUpstream(UpstreamConfig{Tokens: 7})
	if err != nil {
		t.Fatal(err)
	}
	body := func(r upstreamResponse) []byte { return bytes.Join(up.parts[r], nil) }
	delta := `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`
	const none = -1 // no usage seen
	v1, v2 := binary.V1, binary.V2
	return []parserCase{
		{"anthropic sse", parseAnthropicSSE, 0, body(upAnthropicSSE), parsed{Tokens: 7, Usage: 7, Done: true}},
		{"anthropic sse crlf", parseAnthropicSSE, 0, []byte(strings.ReplaceAll(string(body(upAnthropicSSE)), "\n", "\r\n")),
			parsed{Tokens: 7, Usage: 7, Done: true}},
		{"anthropic sse without event lines", parseAnthropicSSE, 0,
			[]byte("data: " + delta + "\n\ndata: " + delta + "\n\ndata: {\"type\":\"message_stop\"}\n\n"),
			parsed{Tokens: 2, Usage: none, Done: true}},
		{"anthropic sse tool delta is not a token", parseAnthropicSSE, 0,
			[]byte(sseEvents("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{"}}`,
				"message_stop", `{"type":"message_stop"}`)),
			parsed{Usage: none, Done: true}},
		{"anthropic sse error event", parseAnthropicSSE, 0,
			[]byte(sseEvents("content_block_delta", delta, "error", `{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`)),
			parsed{Tokens: 1, Usage: none, Failed: true, ErrMsg: `{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`}},
		{"anthropic sse truncated", parseAnthropicSSE, 0, []byte(sseEvents("content_block_delta", delta, "content_block_delta", delta)),
			parsed{Tokens: 2, Usage: none}},
		{"anthropic sse last line without newline", parseAnthropicSSE, 0, []byte("event: message_stop\ndata: {}"),
			parsed{Usage: none, Done: true}},
		{"openai sse", parseOpenAISSE, 0, body(upOpenAISSE), parsed{Tokens: 7, Usage: 7, Done: true}},
		{"openai sse error chunk", parseOpenAISSE, 0,
			[]byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"error\":{\"message\":\"boom\"}}\n\n"),
			parsed{Tokens: 1, Usage: none, Failed: true, ErrMsg: `{"error":{"message":"boom"}}`}},
		{"openai sse null error and spaces", parseOpenAISSE, 0,
			[]byte("data: {\"error\": null, \"choices\": [{\"delta\": {\"content\": \"a\"}}]}\n\ndata: [DONE]\n\n"),
			parsed{Tokens: 1, Usage: none, Done: true}},
		{"openai sse empty content and escapes", parseOpenAISSE, 0,
			[]byte("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n" +
				"data: {\"choices\":[{\"delta\":{\"content\":\"\\\"q\\\"\"}}]}\n\ndata: [DONE]\n\n"),
			parsed{Tokens: 1, Usage: none, Done: true}},
		{"binary", parseBinary, v1, body(upBinary), parsed{Tokens: 7, Usage: 7, Done: true}},
		{"binary v2", parseBinary, v2, body(upBinaryV2), parsed{Tokens: 7, Usage: 7, Done: true}},
		{"binary several tokens per frame", parseBinary, v1,
			binaryBody(frame(byte(binary.FrameToken), 0, 1, 0, 2, 0, 3), frame(byte(binary.FrameDone))),
			parsed{Tokens: 3, Usage: none, Done: true}},
		{"binary v2 text frames, unknown frame skipped", parseBinary, v2,
			[]byte("ANTH\x02\x04\x02hi\x04\x01x\x2a\x01\x00\x00\x02\x81\x01\x03\x00"),
			parsed{Tokens: 3, Usage: none, Done: true}},
		{"binary error frame", parseBinary, v1,
			binaryBody(frame(byte(binary.FrameToken), 0, 1), frame(byte(binary.FrameError), append([]byte{0x02, 0x11}, "overloaded"...)...),
				frame(byte(binary.FrameDone))),
			parsed{Tokens: 1, Usage: none, Failed: true, Done: true, ErrMsg: "error frame: status 529: overloaded"}},
		{"binary bad magic", parseBinary, v1, []byte("ANTX\x00\x00\x02\x00\x01"),
			parsed{Usage: none, Failed: true, Broken: true, ErrMsg: binary.ErrBadMagic.Error()}},
		{"binary truncated frame", parseBinary, v1, binaryBody(frame(byte(binary.FrameToken), 0, 1), []byte{0, 0, 4, 0}),
			parsed{Tokens: 1, Usage: none}},
		{"binary bytes after done", parseBinary, v1, binaryBody(frame(byte(binary.FrameDone)), frame(byte(binary.FrameToken), 0, 1)),
			parsed{Usage: none, Done: true, Failed: true, Broken: true, ErrMsg: binary.ErrAfterDone.Error()}},
		{"anthropic json", parseAnthropicJSON, 0, body(upAnthropicJSON), parsed{Tokens: 7, Usage: 7, Done: true}},
		{"openai json", parseOpenAIJSON, 0, body(upOpenAIJSON), parsed{Tokens: 7, Usage: 7, Done: true}},
		{"json without usage", parseAnthropicJSON, 0, []byte(`{"oops":1}`), parsed{Usage: none, Failed: true, ErrMsg: `{"oops":1}`}},
	}
}

func TestParserWholeBody(t *testing.T) {
	for _, tt := range parserCases(t) {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, parseAll(tt.kind, tt.ver, tt.body)); diff != "" {
				t.Errorf("parse (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParserChunkBoundaries feeds every body split at every byte, and byte by byte: the network
// may cut anywhere.
func TestParserChunkBoundaries(t *testing.T) {
	for _, tt := range parserCases(t) {
		t.Run(tt.name, func(t *testing.T) {
			for i := range len(tt.body) + 1 {
				if diff := cmp.Diff(tt.want, parseAll(tt.kind, tt.ver, tt.body[:i], tt.body[i:])); diff != "" {
					t.Fatalf("split at %d (-want +got):\n%s", i, diff)
				}
			}
			var pieces [][]byte
			for i := range tt.body {
				pieces = append(pieces, tt.body[i:i+1])
			}
			if diff := cmp.Diff(tt.want, parseAll(tt.kind, tt.ver, pieces...)); diff != "" {
				t.Fatalf("byte by byte (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParserLongLineKeepsItsStart(t *testing.T) {
	long := `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` +
		strings.Repeat("x", 3*maxLine) + `"}}` + "\n\nevent: message_stop\ndata: {}\n\n"
	got := parseAll(parseAnthropicSSE, 0, []byte(long[:maxLine/2]), []byte(long[maxLine/2:]))
	if diff := cmp.Diff(parsed{Tokens: 1, Usage: -1, Done: true}, got); diff != "" {
		t.Errorf("parse (-want +got):\n%s", diff)
	}
}

func TestParserFeedDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	for _, tt := range parserCases(t) {
		if tt.want.Failed {
			continue // the first error message is kept, once
		}
		var p parser
		p.reset(tt.kind, tt.ver)
		p.feed(tt.body) // grow the buffers once
		p.finish()
		allocs := testing.AllocsPerRun(100, func() {
			p.reset(tt.kind, tt.ver)
			half := len(tt.body) / 2
			p.feed(tt.body[:half])
			p.feed(tt.body[half:])
			p.finish()
		})
		if allocs != 0 {
			t.Errorf("%s: got %v allocs per body, want 0", tt.name, allocs)
		}
	}
}

func FuzzParser(f *testing.F) {
	for _, tt := range parserCases(f) {
		kind := uint8(tt.kind)
		if tt.ver == binary.V2 {
			kind = 5
		}
		f.Add(kind, tt.body, uint16(len(tt.body)/3))
	}
	f.Fuzz(func(t *testing.T, kind uint8, body []byte, split uint16) {
		k, v := parserKind(kind%6), binary.V1 // kind 5: binary version 2
		if k == 5 {
			k, v = parseBinary, binary.V2
		}
		i := min(int(split), len(body))
		whole, pieces := parseAll(k, v, body), parseAll(k, v, body[:i], body[i:])
		if diff := cmp.Diff(whole, pieces); diff != "" {
			t.Errorf("split at %d changes the result (-whole +split):\n%s", i, diff)
		}
		if whole.Tokens < 0 {
			t.Errorf("token count inconsistent: %s", whole.ErrMsg)
		}
	})
}

func BenchmarkParser(b *testing.B) {
	up, err := NewUpstream(UpstreamConfig{Tokens: 100})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		kind parserKind
		r    upstreamResponse
	}{
		{"anthropic-sse", parseAnthropicSSE, upAnthropicSSE},
		{"openai-sse", parseOpenAISSE, upOpenAISSE},
		{"binary", parseBinary, upBinary},
		{"binary-v2", parseBinary, upBinaryV2},
		{"anthropic-json", parseAnthropicJSON, upAnthropicJSON},
	} {
		body := bytes.Join(up.parts[bc.r], nil)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			var p parser
			v := binary.V1
			if bc.r == upBinaryV2 {
				v = binary.V2
			}
			for b.Loop() {
				p.reset(bc.kind, v)
				p.feed(body)
				if p.finish(); p.tokens != 100 {
					b.Fatalf("got %d tokens, want 100", p.tokens)
				}
			}
		})
	}
}
