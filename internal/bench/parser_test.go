package bench

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// parsed is what a parser concluded about a body.
type parsed struct {
	Tokens               int
	Done, Failed, Broken bool
	ErrMsg               string
}

func parseAll(kind parserKind, pieces ...[]byte) parsed {
	var p parser
	p.reset(kind)
	n := 0
	for _, b := range pieces {
		n += p.feed(b)
	}
	n += p.finish()
	if n != p.tokens {
		return parsed{Tokens: -1, ErrMsg: "feed and finish returned a different total than the parser holds"}
	}
	return parsed{p.tokens, p.done, p.failed, p.broken, string(p.errMsg)}
}

func sseEvents(evs ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(evs); i += 2 {
		b.WriteString("event: " + evs[i] + "\ndata: " + evs[i+1] + "\n\n")
	}
	return b.String()
}

func binaryBody(frames ...[]byte) []byte {
	b := append([]byte(nil), binaryMagic[:]...)
	for _, f := range frames {
		b = append(b, f...)
	}
	return b
}

func frame(typ byte, payload ...byte) []byte {
	return append([]byte{typ, byte(len(payload) >> 8), byte(len(payload))}, payload...)
}

func parserCases(t testing.TB) []struct {
	name string
	kind parserKind
	body []byte
	want parsed
} {
	up, err := NewUpstream(UpstreamConfig{Tokens: 7})
	if err != nil {
		t.Fatal(err)
	}
	body := func(r upstreamResponse) []byte { return bytes.Join(up.parts[r], nil) }
	delta := `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`
	return []struct {
		name string
		kind parserKind
		body []byte
		want parsed
	}{
		{"anthropic sse", parseAnthropicSSE, body(upAnthropicSSE), parsed{Tokens: 7, Done: true}},
		{"anthropic sse crlf", parseAnthropicSSE, []byte(strings.ReplaceAll(string(body(upAnthropicSSE)), "\n", "\r\n")), parsed{Tokens: 7, Done: true}},
		{"anthropic sse without event lines", parseAnthropicSSE,
			[]byte("data: " + delta + "\n\ndata: " + delta + "\n\ndata: {\"type\":\"message_stop\"}\n\n"),
			parsed{Tokens: 2, Done: true}},
		{"anthropic sse tool delta is not a token", parseAnthropicSSE,
			[]byte(sseEvents("content_block_delta", `{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{"}}`,
				"message_stop", `{"type":"message_stop"}`)),
			parsed{Done: true}},
		{"anthropic sse error event", parseAnthropicSSE,
			[]byte(sseEvents("content_block_delta", delta, "error", `{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`)),
			parsed{Tokens: 1, Failed: true, ErrMsg: `{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`}},
		{"anthropic sse truncated", parseAnthropicSSE, []byte(sseEvents("content_block_delta", delta, "content_block_delta", delta)),
			parsed{Tokens: 2}},
		{"anthropic sse last line without newline", parseAnthropicSSE, []byte("event: message_stop\ndata: {}"), parsed{Done: true}},
		{"openai sse", parseOpenAISSE, body(upOpenAISSE), parsed{Tokens: 7, Done: true}},
		{"openai sse error chunk", parseOpenAISSE,
			[]byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"error\":{\"message\":\"boom\"}}\n\n"),
			parsed{Tokens: 1, Failed: true, ErrMsg: `{"error":{"message":"boom"}}`}},
		{"openai sse null error and spaces", parseOpenAISSE,
			[]byte("data: {\"error\": null, \"choices\": [{\"delta\": {\"content\": \"a\"}}]}\n\ndata: [DONE]\n\n"),
			parsed{Tokens: 1, Done: true}},
		{"openai sse empty content and escapes", parseOpenAISSE,
			[]byte("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n" +
				"data: {\"choices\":[{\"delta\":{\"content\":\"\\\"q\\\"\"}}]}\n\ndata: [DONE]\n\n"),
			parsed{Tokens: 1, Done: true}},
		{"binary", parseBinary, body(upBinary), parsed{Tokens: 7, Done: true}},
		{"binary several tokens per frame", parseBinary,
			binaryBody(frame(frameToken, 0, 1, 0, 2, 0, 3), frame(9, 1, 2), frame(frameDone)),
			parsed{Tokens: 3, Done: true}},
		{"binary error frame", parseBinary,
			binaryBody(frame(frameToken, 0, 1), frame(frameError, []byte("\x00\x05overloaded")...)),
			parsed{Tokens: 1, Failed: true, ErrMsg: "\x00\x05overloaded"}},
		{"binary bad magic", parseBinary, []byte("ANTX\x00\x00\x02\x00\x01"),
			parsed{Failed: true, Broken: true, ErrMsg: "binary: bad magic"}},
		{"binary truncated frame", parseBinary, binaryBody(frame(frameToken, 0, 1), []byte{frameToken, 0, 4, 0}),
			parsed{Tokens: 1}},
		{"binary bytes after done ignored", parseBinary, binaryBody(frame(frameDone), frame(frameToken, 0, 1)),
			parsed{Done: true}},
		{"anthropic json", parseAnthropicJSON, body(upAnthropicJSON), parsed{Tokens: 7, Done: true}},
		{"openai json", parseOpenAIJSON, body(upOpenAIJSON), parsed{Tokens: 7, Done: true}},
		{"json without usage", parseAnthropicJSON, []byte(`{"oops":1}`), parsed{Failed: true, ErrMsg: `{"oops":1}`}},
	}
}

func TestParserWholeBody(t *testing.T) {
	for _, tt := range parserCases(t) {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, parseAll(tt.kind, tt.body)); diff != "" {
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
				if diff := cmp.Diff(tt.want, parseAll(tt.kind, tt.body[:i], tt.body[i:])); diff != "" {
					t.Fatalf("split at %d (-want +got):\n%s", i, diff)
				}
			}
			var pieces [][]byte
			for i := range tt.body {
				pieces = append(pieces, tt.body[i:i+1])
			}
			if diff := cmp.Diff(tt.want, parseAll(tt.kind, pieces...)); diff != "" {
				t.Fatalf("byte by byte (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParserLongLineKeepsItsStart(t *testing.T) {
	long := `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` +
		strings.Repeat("x", 3*maxLine) + `"}}` + "\n\nevent: message_stop\ndata: {}\n\n"
	got := parseAll(parseAnthropicSSE, []byte(long[:maxLine/2]), []byte(long[maxLine/2:]))
	if diff := cmp.Diff(parsed{Tokens: 1, Done: true}, got); diff != "" {
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
		p.reset(tt.kind)
		p.feed(tt.body) // grow the buffers once
		p.finish()
		allocs := testing.AllocsPerRun(100, func() {
			p.reset(tt.kind)
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
		f.Add(uint8(tt.kind), tt.body, uint16(len(tt.body)/3))
	}
	f.Fuzz(func(t *testing.T, kind uint8, body []byte, split uint16) {
		k := parserKind(kind % 5)
		i := min(int(split), len(body))
		whole, pieces := parseAll(k, body), parseAll(k, body[:i], body[i:])
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
		{"anthropic-json", parseAnthropicJSON, upAnthropicJSON},
	} {
		body := bytes.Join(up.parts[bc.r], nil)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			var p parser
			for b.Loop() {
				p.reset(bc.kind)
				p.feed(body)
				if p.finish(); p.tokens != 100 {
					b.Fatalf("got %d tokens, want 100", p.tokens)
				}
			}
		})
	}
}
