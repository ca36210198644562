package anthropic

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, rewriting it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", path, diff)
	}
}

// recorder is an io.Writer that counts writes and flushes.
type recorder struct {
	buf     bytes.Buffer
	writes  int
	flushes int
	err     error // returned by Write when set
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	r.writes++
	return r.buf.Write(p)
}

func (r *recorder) flush() error { r.flushes++; return nil }

// step is one call on a sink: an event, a flush, or (for StreamWriter) an error to write.
type step struct {
	ev    *llm.Event
	flush bool
	err   *apierr.Error
}

func evs(events ...*llm.Event) []step {
	out := make([]step, len(events))
	for i, e := range events {
		out[i] = step{ev: e}
	}
	return out
}

var flushStep = step{flush: true}

var textStream = []step{
	{ev: &llm.Event{Kind: llm.EventStart, ID: "engine-id", Model: "claude-test", Usage: llm.Usage{InputTokens: 12, CacheReadInputTokens: 4}}},
	{ev: &llm.Event{Kind: llm.EventBlockStart, Index: 0, Block: llm.BlockText}},
	{ev: &llm.Event{Kind: llm.EventTextDelta, Index: 0, Text: "Hello"}},
	flushStep,
	{ev: &llm.Event{Kind: llm.EventTextDelta, Index: 0, Text: ", world"}},
	{ev: &llm.Event{Kind: llm.EventTextDelta, Index: 0, Text: "\n\"quoted\" \\ tab\t ctl\x01 sep\u2028 é 😀"}},
	flushStep,
	{ev: &llm.Event{Kind: llm.EventBlockStop, Index: 0}},
	{ev: &llm.Event{Kind: llm.EventStop, Stop: llm.StopEndTurn, Usage: llm.Usage{InputTokens: 12, OutputTokens: 5, CacheReadInputTokens: 4}}},
}

var toolStream = []step{
	{ev: &llm.Event{Kind: llm.EventStart, Model: "claude-test", Usage: llm.Usage{InputTokens: 30, CacheCreationInputTokens: 7}}},
	{ev: &llm.Event{Kind: llm.EventBlockStart, Index: 0, Block: llm.BlockText}},
	{ev: &llm.Event{Kind: llm.EventTextDelta, Index: 0, Text: "Let me check."}},
	{ev: &llm.Event{Kind: llm.EventBlockStop, Index: 0}},
	flushStep,
	{ev: &llm.Event{Kind: llm.EventBlockStart, Index: 1, Block: llm.BlockToolUse, ID: "toolu_01A", Name: "get_weather"}},
	{ev: &llm.Event{Kind: llm.EventToolDelta, Index: 1, Text: `{"city":`}},
	{ev: &llm.Event{Kind: llm.EventToolDelta, Index: 1, Text: ` "Paris"}`}},
	{ev: &llm.Event{Kind: llm.EventBlockStop, Index: 1}},
	{ev: &llm.Event{Kind: llm.EventStop, Stop: llm.StopToolUse, Usage: llm.Usage{InputTokens: 30, OutputTokens: 21, CacheCreationInputTokens: 7}}},
}

var errorStream = []step{
	{ev: &llm.Event{Kind: llm.EventStart, Model: "claude-test", Usage: llm.Usage{InputTokens: 3}}},
	{ev: &llm.Event{Kind: llm.EventBlockStart, Index: 0, Block: llm.BlockText}},
	{ev: &llm.Event{Kind: llm.EventTextDelta, Index: 0, Text: "Partial"}},
	flushStep,
	{ev: &llm.Event{Kind: llm.EventTextDelta, Index: 0, Text: " answer"}},
	{err: apierr.New(apierr.Overloaded, "Overloaded")},
}

// play runs the steps against a StreamWriter and returns what it wrote.
func play(t *testing.T, steps []step) *recorder {
	t.Helper()
	rec := &recorder{}
	sw := NewStreamWriter("msg_test01", rec, rec.flush)
	for i, s := range steps {
		var err error
		switch {
		case s.ev != nil:
			err = sw.Send(s.ev)
		case s.flush:
			err = sw.Flush()
		default:
			err = sw.WriteError(s.err)
		}
		if err != nil {
			t.Fatalf("step %d: got error %v, want none", i, err)
		}
	}
	return rec
}

func TestStreamWriterGolden(t *testing.T) {
	for _, tt := range []struct {
		name         string
		steps        []step
		wantFlushes  int
		wantEndsWith string
	}{
		{"text_stream.golden", textStream, 3, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"},
		{"tool_use_stream.golden", toolStream, 2, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"},
		{"error_stream.golden", errorStream, 2, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := play(t, tt.steps)
			golden(t, tt.name, rec.buf.Bytes())
			if rec.flushes != tt.wantFlushes || rec.writes != tt.wantFlushes {
				t.Errorf("got %d writes and %d flushes, want %d of each (one per Flush, end or error)", rec.writes, rec.flushes, tt.wantFlushes)
			}
			if got := rec.buf.String(); !strings.HasSuffix(got, tt.wantEndsWith) {
				t.Errorf("stream ends with %q, want %q", got[max(0, len(got)-len(tt.wantEndsWith)):], tt.wantEndsWith)
			}
		})
	}
}

// TestStreamWriterOrder checks the event order the Anthropic API fixes, on the golden streams.
func TestStreamWriterOrder(t *testing.T) {
	for name, steps := range map[string][]step{"text": textStream, "tool": toolStream} {
		out := play(t, steps).buf.String()
		var names []string
		for _, line := range strings.Split(out, "\n") {
			if n, ok := strings.CutPrefix(line, "event: "); ok {
				names = append(names, n)
			}
		}
		if names[0] != "message_start" || names[1] != "content_block_start" || names[2] != "ping" ||
			names[len(names)-2] != "message_delta" || names[len(names)-1] != "message_stop" {
			t.Errorf("%s: got events %v, want message_start, content_block_start, ping, …, message_delta, message_stop", name, names)
		}
		if n := strings.Count(out, "event: ping"); n != 1 {
			t.Errorf("%s: got %d pings, want 1", name, n)
		}
	}
}

func TestStreamWriterWritesOnlyOnFlush(t *testing.T) {
	rec := &recorder{}
	sw := NewStreamWriter("msg_1", rec, rec.flush)
	for _, ev := range textStream[:3] {
		if err := sw.Send(ev.ev); err != nil {
			t.Fatal(err)
		}
	}
	if rec.writes != 0 || rec.flushes != 0 {
		t.Fatalf("before Flush: got %d writes, %d flushes, want 0, 0", rec.writes, rec.flushes)
	}
	if err := sw.Flush(); err != nil {
		t.Fatal(err)
	}
	if rec.writes != 1 || rec.flushes != 1 {
		t.Errorf("after Flush: got %d writes, %d flushes, want 1, 1", rec.writes, rec.flushes)
	}
	if err := sw.Flush(); err != nil {
		t.Fatal(err)
	}
	if rec.writes != 1 || rec.flushes != 1 {
		t.Errorf("after an empty Flush: got %d writes, %d flushes, want 1, 1", rec.writes, rec.flushes)
	}
}

func TestStreamWriterRepairs(t *testing.T) {
	// No EventStart, and a block left open at the stop.
	rec := play(t, evs(
		&llm.Event{Kind: llm.EventBlockStart, Index: 0, Block: llm.BlockText},
		&llm.Event{Kind: llm.EventTextDelta, Index: 0, Text: "x"},
		&llm.Event{Kind: llm.EventTextDelta, Index: 0, Text: ""},
		&llm.Event{Kind: llm.EventStop, Stop: llm.StopMaxTokens, StopSequence: "", Usage: llm.Usage{OutputTokens: 1}},
	))
	got := rec.buf.String()
	for _, want := range []string{
		`event: message_start` + "\n" + `data: {"type":"message_start","message":{"id":"msg_test01","type":"message","role":"assistant","model":"","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}`,
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta",
		`"stop_reason":"max_tokens","stop_sequence":null`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("stream lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "event: content_block_delta"); n != 1 {
		t.Errorf("got %d deltas, want 1 (empty deltas are dropped)", n)
	}
}

func TestStreamWriterStopSequence(t *testing.T) {
	rec := play(t, evs(
		&llm.Event{Kind: llm.EventStart},
		&llm.Event{Kind: llm.EventStop, Stop: llm.StopSequence, StopSequence: "END\n"},
	))
	if want := `"delta":{"stop_reason":"stop_sequence","stop_sequence":"END\n"}`; !strings.Contains(rec.buf.String(), want) {
		t.Errorf("stream lacks %q:\n%s", want, rec.buf.String())
	}
}

func TestStreamWriterErrors(t *testing.T) {
	rec := &recorder{}
	sw := NewStreamWriter("msg_1", rec, nil)
	stop := &llm.Event{Kind: llm.EventStop}
	if err := sw.Send(stop); err != nil {
		t.Fatal(err)
	}
	if err := sw.Send(stop); !errors.Is(err, errStreamDone) {
		t.Errorf("Send after the stop: got %v, want %v", err, errStreamDone)
	}

	broken := errors.New("connection reset")
	sw.Reset("msg_2", &recorder{err: broken}, nil)
	if err := sw.Send(&llm.Event{Kind: llm.EventStart}); err != nil {
		t.Fatalf("Send before any write: got %v, want nil", err)
	}
	if err := sw.Flush(); !errors.Is(err, broken) {
		t.Errorf("Flush to a broken writer: got %v, want it to wrap %v", err, broken)
	}
	if err := sw.Send(&llm.Event{Kind: llm.EventBlockStart}); !errors.Is(err, broken) {
		t.Errorf("Send after a failed write: got %v, want it to wrap %v", err, broken)
	}
	if err := sw.WriteError(apierr.New(apierr.API, "x")); !errors.Is(err, broken) {
		t.Errorf("WriteError after a failed write: got %v, want it to wrap %v", err, broken)
	}

	// Reset makes a used writer as good as new.
	rec = &recorder{}
	sw.Reset("msg_test01", rec, rec.flush)
	for _, s := range textStream {
		if s.ev != nil {
			if err := sw.Send(s.ev); err != nil {
				t.Fatal(err)
			}
		}
	}
	if want := play(t, textStream).buf.String(); rec.buf.String() != want {
		t.Errorf("after Reset: got\n%s\nwant\n%s", rec.buf.String(), want)
	}
}

func TestStreamWriterBoundsItsBuffer(t *testing.T) {
	rec := &recorder{}
	sw := NewStreamWriter("msg_1", rec, rec.flush)
	delta := &llm.Event{Kind: llm.EventTextDelta, Text: strings.Repeat("x", 1000)}
	for range 200 {
		if err := sw.Send(delta); err != nil {
			t.Fatal(err)
		}
	}
	if rec.writes == 0 || rec.flushes != 0 {
		t.Errorf("after 200 KB without Flush: got %d writes, %d flushes, want some writes and no flush", rec.writes, rec.flushes)
	}
	if cap(sw.buf) > 4096 {
		t.Errorf("buffer grew to %d bytes, want its first 4096", cap(sw.buf))
	}
}

func TestStreamWriterAllocs(t *testing.T) {
	sw := NewStreamWriter("msg_1", io.Discard, func() error { return nil })
	if err := sw.Send(&llm.Event{Kind: llm.EventStart, Model: "m"}); err != nil {
		t.Fatal(err)
	}
	if err := sw.Send(&llm.Event{Kind: llm.EventBlockStart}); err != nil {
		t.Fatal(err)
	}
	delta := &llm.Event{Kind: llm.EventTextDelta, Text: "Hello, \"world\"\n"}
	allocs := testing.AllocsPerRun(1000, func() {
		_ = sw.Send(delta)
		_ = sw.Flush()
	})
	if allocs != 0 {
		t.Errorf("Send+Flush of a text delta: got %.1f allocs, want 0", allocs)
	}
}

// TestStreamRoundTrip reads what StreamWriter writes back with ReadStream: the collected
// responses must agree.
func TestStreamRoundTrip(t *testing.T) {
	for name, steps := range map[string][]step{"text": textStream, "tool": toolStream} {
		t.Run(name, func(t *testing.T) {
			var direct llm.Collector
			for _, s := range steps {
				if s.ev != nil {
					_ = direct.Send(s.ev)
				}
			}
			direct.Response.ID = "msg_test01"

			var back llm.Collector
			if err := ReadStream(&play(t, steps).buf, &back); err != nil {
				t.Fatalf("ReadStream: got error %v, want none", err)
			}
			if diff := cmp.Diff(direct.Response, back.Response); diff != "" {
				t.Errorf("round trip mismatch (-sent +read):\n%s", diff)
			}
		})
	}
}

func BenchmarkStreamWriterTextDelta(b *testing.B) {
	sw := NewStreamWriter("msg_1", io.Discard, func() error { return nil })
	_ = sw.Send(&llm.Event{Kind: llm.EventStart, Model: "m"})
	_ = sw.Send(&llm.Event{Kind: llm.EventBlockStart})
	delta := &llm.Event{Kind: llm.EventTextDelta, Text: " token"}
	b.ReportAllocs()
	for b.Loop() {
		_ = sw.Send(delta)
		_ = sw.Flush()
	}
}
