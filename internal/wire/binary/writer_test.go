package binary

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/vocab"
)

var allModes = []Mode{{Version: V1}, {Version: V2}, {Version: V2, Text: true}}

// recorder records each write separately.
type recorder struct {
	writes  [][]byte
	flushes int
	fail    error
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.fail != nil {
		return 0, r.fail
	}
	r.writes = append(r.writes, append([]byte(nil), p...))
	return len(p), nil
}

func (r *recorder) flush() error { r.flushes++; return nil }

// TestCoalescing checks the writer's contract: nothing is written before Flush, each Flush
// writes once, and the text deltas sent between two flushes share one frame.
func TestCoalescing(t *testing.T) {
	for _, mode := range allModes {
		rec := &recorder{}
		sw, err := NewStreamWriter(rec, rec.flush, mode, vocab.Default())
		if err != nil {
			t.Fatal(err)
		}
		send := func(e llm.Event) {
			if err := sw.Send(&e); err != nil {
				t.Fatal(err)
			}
		}
		send(llm.Event{Kind: llm.EventStart, ID: "msg_1", Model: "m"})
		send(llm.Event{Kind: llm.EventBlockStart})
		send(llm.Event{Kind: llm.EventTextDelta, Text: "one"})
		send(llm.Event{Kind: llm.EventTextDelta, Text: " two"})
		if len(rec.writes) != 0 || sw.Wrote() {
			t.Fatalf("%+v: %d writes before Flush, want 0", mode, len(rec.writes))
		}
		if err := sw.Flush(); err != nil {
			t.Fatal(err)
		}
		send(llm.Event{Kind: llm.EventTextDelta, Text: " three"})
		if err := sw.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := sw.Flush(); err != nil { // nothing new: no write
			t.Fatal(err)
		}
		if got, want := len(rec.writes), 2; got != want {
			t.Fatalf("%+v: got %d writes, want %d", mode, got, want)
		}
		if rec.flushes != 2 || !sw.Wrote() {
			t.Errorf("%+v: got %d flushes (wrote %v), want 2 (true)", mode, rec.flushes, sw.Wrote())
		}
		// The first write holds one text frame with "one two", the second one with " three".
		var texts []string
		d := NewDecoder(mode.Version)
		for _, w := range rec.writes {
			d.Write(w)
			var got []string
			for {
				f, ok, err := d.Next()
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					break
				}
				if f.Type == FrameToken || f.Type == FrameText {
					got = append(got, frameText(t, mode, f))
				}
			}
			texts = append(texts, strings.Join(got, "|"))
		}
		if diff := cmp.Diff([]string{"one two", " three"}, texts); diff != "" {
			t.Errorf("%+v: text frames per write (-want +got):\n%s", mode, diff)
		}
	}
}

func frameText(t testing.TB, mode Mode, f Frame) string {
	t.Helper()
	if f.Type == FrameText {
		return string(f.Payload)
	}
	ids, err := AppendTokens(nil, mode.Version, f.Payload)
	if err != nil {
		t.Fatal(err)
	}
	b, err := vocab.Default().AppendDecoded(nil, ids)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLargeDeltaSplitsFrames sends more text than one version-1 frame holds.
func TestLargeDeltaSplitsFrames(t *testing.T) {
	text := strings.Repeat("汉", 50000) // 150,000 bytes, far over 32,767 IDs
	for _, mode := range allModes {
		var out bytes.Buffer
		sw, _ := NewStreamWriter(&out, nil, mode, vocab.Default())
		sw.Send(&llm.Event{Kind: llm.EventBlockStart})
		sw.Send(&llm.Event{Kind: llm.EventTextDelta, Text: text})
		sw.Send(&llm.Event{Kind: llm.EventStop})
		if err := sw.Flush(); err != nil {
			t.Fatal(err)
		}
		var c llm.Collector
		if err := ReadStream(&out, mode, vocab.Default(), &c); err != nil {
			t.Fatalf("%+v: ReadStream: %v", mode, err)
		}
		if got := c.Response.Content[0].Text; got != text {
			t.Errorf("%+v: got %d bytes of text, want %d", mode, len(got), len(text))
		}
	}
}

func TestStreamWriterEnds(t *testing.T) {
	for _, mode := range allModes {
		t.Run("close without stop", func(t *testing.T) {
			var out bytes.Buffer
			sw, _ := NewStreamWriter(&out, nil, mode, vocab.Default())
			sw.Send(&llm.Event{Kind: llm.EventBlockStart})
			sw.Send(&llm.Event{Kind: llm.EventTextDelta, Text: "cut"})
			if err := sw.Close(); err != nil {
				t.Fatal(err)
			}
			frames := decodeAll(t, mode.Version, out.Bytes())
			if last := frames[len(frames)-1]; last.Type != FrameDone {
				t.Errorf("last frame %s, want done", last.Type)
			}
			if err := sw.Send(&llm.Event{Kind: llm.EventTextDelta, Text: "late"}); !errors.Is(err, errStreamDone) {
				t.Errorf("Send after done: got %v, want errStreamDone", err)
			}
		})
		t.Run("error after stop is dropped", func(t *testing.T) {
			var out bytes.Buffer
			sw, _ := NewStreamWriter(&out, nil, mode, vocab.Default())
			sw.Send(&llm.Event{Kind: llm.EventStop})
			if err := sw.WriteError(apierr.New(apierr.API, "late")); err != nil {
				t.Fatal(err)
			}
			for _, f := range decodeAll(t, mode.Version, out.Bytes()) {
				if f.Type == FrameError {
					t.Errorf("got an error frame after done")
				}
			}
		})
		t.Run("write error is sticky", func(t *testing.T) {
			gone := errors.New("client went away")
			rec := &recorder{fail: gone}
			sw, _ := NewStreamWriter(rec, rec.flush, mode, vocab.Default())
			sw.Send(&llm.Event{Kind: llm.EventTextDelta, Text: "x"})
			if err := sw.Flush(); !errors.Is(err, gone) {
				t.Fatalf("Flush: got %v, want %v", err, gone)
			}
			if err := sw.Send(&llm.Event{Kind: llm.EventTextDelta, Text: "y"}); !errors.Is(err, gone) {
				t.Errorf("Send after a failed write: got %v, want %v", err, gone)
			}
			if err := sw.WriteError(apierr.New(apierr.API, "x")); !errors.Is(err, gone) {
				t.Errorf("WriteError after a failed write: got %v, want %v", err, gone)
			}
		})
	}
}

func TestVersion1ErrorMessageTruncated(t *testing.T) {
	var out bytes.Buffer
	sw, _ := NewStreamWriter(&out, nil, Mode{Version: V1}, vocab.Default())
	if err := sw.WriteError(apierr.New(apierr.API, "%s", strings.Repeat("m", 70000))); err != nil {
		t.Fatal(err)
	}
	frames := decodeAll(t, V1, out.Bytes())
	e, err := ParseError(V1, []byte(frames[0].Payload))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(e.Message), MaxPayloadV1-2; got != want {
		t.Errorf("got a message of %d bytes, want %d", got, want)
	}
}

func TestUnboundedEngineWritesEarly(t *testing.T) {
	rec := &recorder{}
	sw, _ := NewStreamWriter(rec, rec.flush, Mode{Version: V2, Text: true}, vocab.Default())
	chunk := strings.Repeat("x", 1000)
	for range 100 {
		sw.Send(&llm.Event{Kind: llm.EventTextDelta, Text: chunk})
	}
	if len(rec.writes) == 0 {
		t.Errorf("100 KB sent without Flush: got no write, want writes past %d bytes", writeThreshold)
	}
	if rec.flushes != 0 {
		t.Errorf("got %d flushes, want 0 (writing is not flushing)", rec.flushes)
	}
}

func TestCacheHitRatio(t *testing.T) {
	tests := []struct {
		u    llm.Usage
		want uint32
	}{
		{llm.Usage{}, 0},
		{llm.Usage{InputTokens: 77, CacheReadInputTokens: 923}, 92300},
		{llm.Usage{InputTokens: 10}, 0},
		{llm.Usage{CacheReadInputTokens: 10}, 100000},
		{llm.Usage{InputTokens: 1, CacheCreationInputTokens: 1, CacheReadInputTokens: 1}, 33333},
		{llm.Usage{InputTokens: -5, CacheReadInputTokens: 5}, 100000},
	}
	for _, tc := range tests {
		if got := CacheHitRatio(tc.u); got != tc.want {
			t.Errorf("CacheHitRatio(%+v) = %d, want %d", tc.u, got, tc.want)
		}
	}
}

func TestNewStreamWriterChecks(t *testing.T) {
	if _, err := NewStreamWriter(io.Discard, nil, Mode{Version: 3}, vocab.Default()); err == nil {
		t.Error("version 3: got nil error")
	}
	if sw, err := NewStreamWriter(io.Discard, nil, Mode{Version: V1, Text: true}, vocab.Default()); err != nil || sw.Mode().Text {
		t.Errorf("version 1 text: got %v, text %v; want nil, false (version 1 has no text frames)", err, sw.Mode().Text)
	}
}

// TestFrameAllocs guards the hot path: encoding a text delta into a frame and writing it
// allocates nothing, in every mode.
func TestFrameAllocs(t *testing.T) {
	for _, mode := range allModes {
		sw, _ := NewStreamWriter(io.Discard, func() error { return nil }, mode, vocab.Default())
		ev := &llm.Event{Kind: llm.EventTextDelta, Text: " tokens"}
		n := testing.AllocsPerRun(1000, func() {
			sw.Send(ev)
			sw.Flush()
		})
		if n != 0 {
			t.Errorf("%+v: %v allocs per frame, want 0", mode, n)
		}
	}
}
