package binary

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/engine/sim"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/vocab"
	"github.com/layer0ai/layer0/internal/wire/anthropic"
	"github.com/layer0ai/layer0/internal/wire/openai"
)

// The same 100-token response in every format: the sim in echo mode repeats a long message,
// capped at max_tokens 100, one delta per model token.
const echoText = "The binary protocol sends token IDs instead of JSON events. A server that " +
	"streams text to a browser or to another gateway spends most of its bytes and much of its " +
	"time on the envelope around each token: the event name, the JSON object, the quotes and the " +
	"escapes, the index of the content block and the type of the delta. Here a token costs two " +
	"bytes, and the tokens that are ready together share one frame header, so a whole answer fits " +
	"in a few hundred bytes while the same answer as server-sent events takes about twelve kilobytes."

var (
	respOnce sync.Once
	resp100  []llm.Event
)

// eventLog is a sink that keeps a copy of every event.
type eventLog struct{ evs []llm.Event }

func (l *eventLog) Send(ev *llm.Event) error { l.evs = append(l.evs, *ev); return nil }
func (l *eventLog) Flush() error             { return nil }

func response100(tb testing.TB) []llm.Event {
	respOnce.Do(func() {
		e, err := sim.New(config.Sim{Mode: "echo"}, nil)
		if err != nil {
			tb.Fatal(err)
		}
		req := &llm.Request{Model: "sim", MaxTokens: 100, Stream: true,
			Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: echoText}}}}}
		var l eventLog
		if err := e.Generate(context.Background(), req, &l); err != nil {
			tb.Fatal(err)
		}
		resp100 = l.evs
	})
	last := resp100[len(resp100)-1]
	if last.Kind != llm.EventStop || last.Usage.OutputTokens != 100 {
		tb.Fatalf("the sim's answer ends with %+v, want a stop after 100 output tokens", last)
	}
	return resp100
}

// play sends the events to sink, flushing after every delta (one token per frame) or only at
// the end (every token ready at once: coalesced).
func play(tb testing.TB, evs []llm.Event, sink llm.Sink, flushEach bool) {
	for i := range evs {
		if err := sink.Send(&evs[i]); err != nil {
			tb.Fatal(err)
		}
		if flushEach && (evs[i].Kind == llm.EventTextDelta || evs[i].Kind == llm.EventToolDelta) {
			if err := sink.Flush(); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := sink.Flush(); err != nil {
		tb.Fatal(err)
	}
}

// countWriter counts bytes.
type countWriter struct{ n int }

func (c *countWriter) Write(p []byte) (int, error) { c.n += len(p); return len(p), nil }

// wireFormat makes the sink of one format writing to w.
type wireFormat struct {
	name      string
	flushEach bool
	sink      func(w io.Writer) llm.Sink
}

func binarySink(tb testing.TB, m Mode) func(io.Writer) llm.Sink {
	return func(w io.Writer) llm.Sink {
		sw, err := NewStreamWriter(w, nil, m, vocab.Default())
		if err != nil {
			tb.Fatal(err)
		}
		return sw
	}
}

func wireFormats(tb testing.TB) []wireFormat {
	anth := func(w io.Writer) llm.Sink { return anthropic.NewStreamWriter("msg_01XFDUDYJgAACzvnptvVoYEL", w, nil) }
	oai := func(w io.Writer) llm.Sink {
		s := openai.NewStreamWriter(w)
		s.ID, s.Model, s.Created, s.IncludeUsage = "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT", "sim", 1735689600, true
		return s
	}
	return []wireFormat{
		{"anthropic_sse", true, anth},
		{"openai_sse", true, oai},
		{"binary_v1_per_token", true, binarySink(tb, Mode{Version: V1})},
		{"binary_v1_coalesced", false, binarySink(tb, Mode{Version: V1})},
		{"binary_v2_per_token", true, binarySink(tb, Mode{Version: V2})},
		{"binary_v2_coalesced", false, binarySink(tb, Mode{Version: V2})},
		{"binary_v2_text_per_token", true, binarySink(tb, Mode{Version: V2, Text: true})},
		{"binary_v2_text_coalesced", false, binarySink(tb, Mode{Version: V2, Text: true})},
	}
}

// TestWireBytes measures the bytes on the wire of the same 100-token response in every format
// and checks the targets: binary with one token per frame at most 4% of the Anthropic
// SSE bytes (version 2; version 1's fixed layout lands at 4.1%), and all 100 tokens coalesced in
// at most 300 bytes.
func TestWireBytes(t *testing.T) {
	evs := response100(t)
	size := map[string]int{}
	var report strings.Builder
	for _, f := range wireFormats(t) {
		var c countWriter
		play(t, evs, f.sink(&c), f.flushEach)
		size[f.name] = c.n
	}
	sse := size["anthropic_sse"]
	for _, f := range wireFormats(t) {
		fmt.Fprintf(&report, "%26s: %6d bytes, %5.1f%% of Anthropic SSE\n", f.name, size[f.name], 100*float64(size[f.name])/float64(sse))
	}
	t.Logf("bytes on the wire for the same 100-token response:\n%s", report.String())
	if n := size["binary_v2_per_token"]; n*100 > sse*4 {
		t.Errorf("binary_v2_per_token: %d bytes, more than 4%% of Anthropic SSE's %d", n, sse)
	}
	// Version 1's layout is fixed: 5 bytes per one-ID token frame, plus the magic, the usage
	// frame and done. That floor is 4.1% of this response's SSE bytes: version 1 misses the 4%
	// target by design, version 2 meets it.
	ids := 0
	for _, ev := range evs {
		if ev.Kind == llm.EventTextDelta {
			ids += len(vocab.Default().Append(nil, ev.Text))
		}
	}
	if got, want := size["binary_v1_per_token"], 4+100*3+2*ids+15+3; got != want {
		t.Errorf("binary_v1_per_token: %d bytes, want the format's %d (100 frames, %d IDs)", got, want, ids)
	}
	for _, name := range []string{"binary_v1_coalesced", "binary_v2_coalesced"} {
		if size[name] > 300 {
			t.Errorf("%s: %d bytes, want at most 300", name, size[name])
		}
	}
}

// BenchmarkStream100 encodes the same 100-token response in each format: ns/token is the
// server's encoding CPU per streamed token, wire-B/response the bytes on the wire.
func BenchmarkStream100(b *testing.B) {
	evs := response100(b)
	for _, f := range wireFormats(b) {
		b.Run(f.name, func(b *testing.B) {
			var c countWriter
			b.ReportAllocs()
			for b.Loop() {
				c.n = 0
				play(b, evs, f.sink(&c), f.flushEach)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/100, "ns/token")
			b.ReportMetric(float64(c.n), "wire-B/response")
		})
	}
}

// BenchmarkEncodeFrame is one text delta encoded into a frame and written.
func BenchmarkEncodeFrame(b *testing.B) {
	for _, m := range allModes {
		b.Run(modeName(m), func(b *testing.B) {
			sw, _ := NewStreamWriter(io.Discard, func() error { return nil }, m, vocab.Default())
			ev := &llm.Event{Kind: llm.EventTextDelta, Text: " tokens"}
			b.ReportAllocs()
			for b.Loop() {
				sw.Send(ev)
				sw.Flush()
			}
		})
	}
}

func modeName(m Mode) string {
	if m.Text {
		return "v2_text"
	}
	return "v" + strconv.Itoa(int(m.Version))
}

// BenchmarkDecodeFrame decodes the frames of the 100-token response sent one per frame; the
// time is per frame.
func BenchmarkDecodeFrame(b *testing.B) {
	evs := response100(b)
	for _, m := range allModes {
		b.Run(modeName(m), func(b *testing.B) {
			var s strings.Builder
			play(b, evs, binarySink(b, m)(&s), true)
			stream := []byte(s.String())
			d := NewDecoder(m.Version)
			var ids []uint32
			frames := 0
			b.ReportAllocs()
			for b.Loop() {
				d.Reset(m.Version)
				d.Write(stream)
				for {
					f, ok, err := d.Next()
					if err != nil {
						b.Fatal(err)
					}
					if !ok {
						break
					}
					frames++
					if f.Type == FrameToken {
						ids, _ = AppendTokens(ids[:0], m.Version, f.Payload)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(frames), "ns/frame")
		})
	}
}

func BenchmarkDecodeRequest(b *testing.B) {
	for _, v := range requestVectors() {
		body := joined(v.parts)
		b.Run(strings.ReplaceAll(v.name, " ", "_"), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := DecodeRequestVersion(body, v.mode.Version); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
