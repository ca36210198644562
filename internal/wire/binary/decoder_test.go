package binary

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/vocab"
)

type copiedFrame struct {
	Type    FrameType
	Payload string
}

// decodeAll decodes a whole stream, failing the test on an error.
func decodeAll(t testing.TB, v Version, stream []byte) []copiedFrame {
	t.Helper()
	frames, err := decodeChunks(v, stream)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return frames
}

// decodeChunks feeds the chunks to a Decoder and returns the frames (copied) and the error.
func decodeChunks(v Version, chunks ...[]byte) ([]copiedFrame, error) {
	d := NewDecoder(v)
	var out []copiedFrame
	for _, c := range chunks {
		d.Write(c)
		for {
			f, ok, err := d.Next()
			if err != nil {
				return out, err
			}
			if !ok {
				break
			}
			out = append(out, copiedFrame{f.Type, string(f.Payload)})
		}
	}
	return out, nil
}

// TestSplitAtEveryByte decodes every stream vector cut in two at every byte, and one byte at a
// time: the frames, and what ReadStream makes of them, are the same as for the whole stream.
func TestSplitAtEveryByte(t *testing.T) {
	for _, v := range streamVectors() {
		stream := joined(v.parts)
		whole := decodeAll(t, v.mode.Version, stream)
		for cut := range len(stream) + 1 {
			got, err := decodeChunks(v.mode.Version, stream[:cut], stream[cut:])
			if err != nil {
				t.Fatalf("%s: cut at %d: %v", v.name, cut, err)
			}
			if diff := cmp.Diff(whole, got); diff != "" {
				t.Fatalf("%s: cut at %d (-whole +split):\n%s", v.name, cut, diff)
			}
		}
		var bytesOne [][]byte
		for i := range stream {
			bytesOne = append(bytesOne, stream[i:i+1])
		}
		got, err := decodeChunks(v.mode.Version, bytesOne...)
		if err != nil || !cmp.Equal(whole, got) {
			t.Fatalf("%s: one byte at a time: %v (equal %v)", v.name, err, cmp.Equal(whole, got))
		}
		all := collect(t, v.mode, bytes.NewReader(stream))
		oneByte := collect(t, v.mode, iotest.OneByteReader(bytes.NewReader(stream)))
		if diff := cmp.Diff(all, oneByte); diff != "" {
			t.Errorf("%s: ReadStream one byte per read (-whole +split):\n%s", v.name, diff)
		}
	}
}

func TestDecoderErrors(t *testing.T) {
	tests := []struct {
		name   string
		v      Version
		stream string
		want   error
	}{
		{"bad magic", V1, "ANTX", ErrBadMagic},
		{"v2 without version byte", V2, "ANTH\x00\x03\x00", ErrBadMagic},
		{"v1 unknown frame", V1, "ANTH\x07\x00\x00", ErrUnknownFrame},
		{"v2 frame too large", V2, "ANTH\x02\x00\x80\x80\x80\x10", ErrFrameTooLarge},
		{"v2 endless length varint", V2, "ANTH\x02\x00\x80\x80\x80\x80\x80\x80", ErrFrameTooLarge},
		{"v2 non-minimal length", V2, "ANTH\x02\x00\x80\x00", ErrPayload},
		{"done with payload", V1, "ANTH\x03\x00\x01x", ErrPayload},
		{"bytes after done", V1, "ANTH\x03\x00\x00\x00", ErrAfterDone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeChunks(tc.v, []byte(tc.stream))
			if !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestReaderEnds(t *testing.T) {
	ok := "ANTH\x00\x00\x02\x00\x01\x01\x00\x0c" + strings.Repeat("\x00", 12) + "\x03\x00\x00"
	tests := []struct {
		name   string
		stream string
		want   error // nil: io.EOF after the frames
	}{
		{"complete", ok, nil},
		{"ends inside a frame", ok[:8], io.ErrUnexpectedEOF},
		{"ends before done", ok[:len(ok)-3], io.ErrUnexpectedEOF},
		{"empty", "", io.ErrUnexpectedEOF},
		{"bytes after done", ok + "\x00", ErrAfterDone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(strings.NewReader(tc.stream), V1)
			var err error
			for range 10 {
				if _, err = r.Next(); err != nil {
					break
				}
			}
			want := tc.want
			if want == nil {
				want = io.EOF
			}
			if !errors.Is(err, want) {
				t.Errorf("got %v, want %v", err, want)
			}
		})
	}
}

func TestPayloadParsers(t *testing.T) {
	if _, err := AppendTokens(nil, V1, []byte{1, 2, 3}); !errors.Is(err, ErrPayload) {
		t.Errorf("odd v1 token payload: got %v, want ErrPayload", err)
	}
	if _, err := AppendTokens(nil, V2, []byte{0x80}); !errors.Is(err, ErrPayload) {
		t.Errorf("truncated v2 token varint: got %v, want ErrPayload", err)
	}
	if _, err := ParseUsage(V1, make([]byte, 11)); !errors.Is(err, ErrPayload) {
		t.Errorf("short v1 usage: got %v, want ErrPayload", err)
	}
	if _, err := ParseUsage(V2, []byte{1, 2, 3, 4, 5}); !errors.Is(err, ErrPayload) {
		t.Errorf("v2 usage with extra bytes: got %v, want ErrPayload", err)
	}
	if _, err := ParseError(V1, []byte{1}); !errors.Is(err, ErrPayload) {
		t.Errorf("short v1 error: got %v, want ErrPayload", err)
	}
	if _, err := ParseError(V2, []byte{0xc8, 0x03, 9, 'x'}); !errors.Is(err, ErrPayload) {
		t.Errorf("v2 error with a type beyond the payload: got %v, want ErrPayload", err)
	}
	if _, err := ParseBlockStart([]byte{5}); !errors.Is(err, ErrPayload) {
		t.Errorf("block kind 5: got %v, want ErrPayload", err)
	}
	if _, _, err := ParseStop([]byte{9}); !errors.Is(err, ErrPayload) {
		t.Errorf("stop reason 9: got %v, want ErrPayload", err)
	}
	if _, err := ParseStart([]byte{5, 'a'}); !errors.Is(err, ErrPayload) {
		t.Errorf("start with a short id: got %v, want ErrPayload", err)
	}
}

// randScript is a random response: a text block of random deltas (multi-byte characters
// included, split anywhere), sometimes a tool_use block, random flushes.
func randScript(r *rand.Rand) ([]streamStep, llm.Response) {
	want := llm.Response{ID: "msg_r", Model: "m", Usage: llm.Usage{InputTokens: r.IntN(1000), OutputTokens: r.IntN(1000), CacheReadInputTokens: r.IntN(1000)}}
	s := []streamStep{
		ev(llm.Event{Kind: llm.EventStart, ID: want.ID, Model: want.Model, Usage: llm.Usage{InputTokens: want.Usage.InputTokens, CacheReadInputTokens: want.Usage.CacheReadInputTokens}}),
		ev(llm.Event{Kind: llm.EventBlockStart, Block: llm.BlockText}),
	}
	text := randText(r, 400)
	for rest := text; len(rest) > 0; {
		n := 1 + r.IntN(min(len(rest), 12))
		s = append(s, ev(llm.Event{Kind: llm.EventTextDelta, Text: rest[:n]}))
		rest = rest[n:]
		if r.IntN(3) == 0 {
			s = append(s, flushStep)
		}
	}
	s = append(s, ev(llm.Event{Kind: llm.EventBlockStop}))
	want.Content = []llm.Block{{Type: llm.BlockText, Text: text}}
	want.Stop = llm.StopEndTurn
	if r.IntN(2) == 0 {
		s = append(s, ev(llm.Event{Kind: llm.EventBlockStart, Index: 1, Block: llm.BlockToolUse, ID: "toolu_r", Name: "f"}))
		input := `{"q":"` + strings.Repeat("é", r.IntN(30)) + `"}`
		for rest := input; len(rest) > 0; {
			n := 1 + r.IntN(min(len(rest), 7))
			s = append(s, ev(llm.Event{Kind: llm.EventToolDelta, Index: 1, Text: rest[:n]}))
			rest = rest[n:]
			if r.IntN(2) == 0 {
				s = append(s, flushStep)
			}
		}
		s = append(s, ev(llm.Event{Kind: llm.EventBlockStop, Index: 1}))
		want.Content = append(want.Content, llm.Block{Type: llm.BlockToolUse, ID: "toolu_r", Name: "f", Input: []byte(input)})
		want.Stop = llm.StopToolUse
	}
	return append(s, ev(llm.Event{Kind: llm.EventStop, Stop: want.Stop, Usage: want.Usage}), flushStep), want
}

// TestStreamRoundTrip is a property test: any response written by a StreamWriter reads back
// the same through ReadStream, with whatever the version carries, at any read chunking; and
// every text delta a client sees is valid UTF-8.
func TestStreamRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	for i := range 300 {
		script, want := randScript(r)
		for _, mode := range allModes {
			stream, _ := runScript(t, mode, script)
			var c llm.Collector
			sink := &utf8Sink{inner: &c}
			chunked := iotest.HalfReader(bytes.NewReader(stream))
			if err := ReadStream(chunked, mode, vocab.Default(), sink); err != nil {
				t.Fatalf("#%d %+v: ReadStream: %v", i, mode, err)
			}
			if sink.bad != "" {
				t.Fatalf("#%d %+v: a text delta is not valid UTF-8: %q", i, mode, sink.bad)
			}
			w := want
			if mode.Version == V1 { // no ids, tools, stop reasons or cache counts
				w = llm.Response{Content: want.Content[:1], Usage: llm.Usage{InputTokens: want.Usage.InputTokens, OutputTokens: want.Usage.OutputTokens}}
			}
			if diff := cmp.Diff(w, c.Response); diff != "" {
				t.Fatalf("#%d %+v: (-want +got):\n%s", i, mode, diff)
			}
		}
	}
}

type utf8Sink struct {
	inner llm.Sink
	bad   string
}

func (s *utf8Sink) Send(ev *llm.Event) error {
	if ev.Kind == llm.EventTextDelta && !utf8Valid(ev.Text) && s.bad == "" {
		s.bad = ev.Text
	}
	return s.inner.Send(ev)
}

func (s *utf8Sink) Flush() error { return s.inner.Flush() }

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// TestDecodeAllocs guards the client's hot path: decoding a frame allocates nothing.
func TestDecodeAllocs(t *testing.T) {
	for _, v := range []Version{V1, V2} {
		stream, _ := runScript(t, Mode{Version: v}, helloScript(true, llm.Usage{}))
		d := NewDecoder(v)
		var ids []uint32
		n := testing.AllocsPerRun(200, func() {
			d.Reset(v)
			d.Write(stream)
			for {
				f, ok, err := d.Next()
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				if f.Type == FrameToken {
					ids, _ = AppendTokens(ids[:0], v, f.Payload)
				}
			}
		})
		if n != 0 {
			t.Errorf("v%d: %v allocs per stream, want 0", v, n)
		}
	}
}

func FuzzDecodeStream(f *testing.F) {
	for _, v := range streamVectors() {
		f.Add(joined(v.parts), v.mode.Version == V2, v.mode.Text, uint16(7))
	}
	f.Fuzz(func(t *testing.T, stream []byte, v2, text bool, cut uint16) {
		mode := Mode{Version: V1}
		if v2 {
			mode = Mode{Version: V2, Text: text}
		}
		c := min(int(cut), len(stream))
		whole, errWhole := decodeChunks(mode.Version, stream)
		split, errSplit := decodeChunks(mode.Version, stream[:c], stream[c:])
		if !cmp.Equal(whole, split) || (errWhole == nil) != (errSplit == nil) {
			t.Fatalf("split at %d differs: %v / %v", c, errWhole, errSplit)
		}
		// Decoding the events never panics, at any chunking.
		var col llm.Collector
		_ = ReadStream(iotest.HalfReader(bytes.NewReader(stream)), mode, vocab.Default(), &col)
	})
}
