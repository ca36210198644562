package anthropic

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/layer0ai/layer0/internal/llm"

	"github.com/layer0ai/layer0/internal/engine/passthrough"
	"github.com/layer0ai/layer0/internal/upstream/fake"

	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

var textDeltaCases = []struct {
	data string
	fast bool // the shape's fast path accepts it
}{
	{`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`, true},
	{`{"type":"content_block_delta","index":12,"delta":{"type":"text_delta","text":"a \"quoted\" \u00e9 word\n"}}`, true},
	{`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":""}}`, true},
	{`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"é 日本"}}`, true},
	// Not the fast path's shape: checked whole (valid, or not).
	{`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}`, false},
	{`{"type":"content_block_delta", "index":0,"delta":{"type":"text_delta","text":"x"}}`, false},
	{`{"type":"content_block_delta","index":01,"delta":{"type":"text_delta","text":"x"}}`, false},
	{`{"type":"content_block_delta","index":,"delta":{"type":"text_delta","text":"x"}}`, false},
	{`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}} `, false},
	{`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}}`, false},
	{`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"},"extra":1}`, false},
	{"{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"raw\ncontrol\"}}", false},
	{"{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"bad \xff utf-8\"}}", false},
	{`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"bad \q escape"}}`, false},
	{`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"unterminated}}`, false},
}

// TestValidTextDelta: the text-delta fast path accepts the Messages API's own shape and
// nothing that jsontext.ValidObject refuses; validEvent's verdict is ValidObject's on every case.
func TestValidTextDelta(t *testing.T) {
	for _, c := range textDeltaCases {
		b := []byte(c.data)
		if got := validTextDelta(b); got != c.fast {
			t.Errorf("validTextDelta(%q) = %v, want %v", c.data, got, c.fast)
		}
		if got, want := validEvent(evBlockDelta, b), jsontext.ValidObject(b); got != want {
			t.Errorf("validEvent(%q) = %v, ValidObject %v", c.data, got, want)
		}
	}
}

// FuzzValidTextDelta: whatever the bytes, the fast path never accepts what ValidObject refuses.
func FuzzValidTextDelta(f *testing.F) {
	for _, c := range textDeltaCases {
		f.Add([]byte(c.data))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if validTextDelta(b) && !jsontext.ValidObject(b) {
			t.Fatalf("the fast path accepted %q, which ValidObject refuses", b)
		}
	})
}

// BenchmarkValidEvent: a text delta checked by the fast path, and whole.
func BenchmarkValidEvent(b *testing.B) {
	data := []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" the quick brown fox jumps"}}`)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !validEvent(evBlockDelta, data) {
				b.Fatal("refused")
			}
		}
	})
	b.Run("whole", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !jsontext.ValidObject(data) {
				b.Fatal("refused")
			}
		}
	})
}

// benchStream is a 100-token Messages API stream as `layer0 bench upstream` writes it.
func benchStream() []byte {
	var b bytes.Buffer
	b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"bench\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n")
	b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	for i := range 100 {
		fmt.Fprintf(&b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"tok%d \"}}\n\n", i)
	}
	b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
	b.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":100}}\n\n")
	b.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	return b.Bytes()
}

// BenchmarkForwardStream: the gateway's own work on a 100-token stream passed through — split
// the events, check each, read usage, rename the model, copy them to the client — from a
// buffer that holds the whole answer, as a fast engine's arrives.
func BenchmarkForwardStream(b *testing.B) {
	stream := benchStream()
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	br := bufio.NewReaderSize(nil, 16<<10)
	for b.Loop() {
		br.Reset(bytes.NewReader(stream))
		src := passthrough.Source{Body: br, ContentType: "text/event-stream", Stream: true, ClientModel: "bench"}
		res, err := passthrough.Forward(&policy{}, &src, fake.Writer(io.Discard))
		if err != nil || res.Deltas != 100 {
			b.Fatalf("forward: %d deltas, %v", res.Deltas, err)
		}
	}
}

// plain is the anthropic policy without its Shortcut: every event split and checked by Event.
type plain struct{ p *policy }

func (w plain) Event(e *passthrough.Event, u *llm.Usage) error { return w.p.Event(e, u) }
func (w plain) End(partial []byte) error                       { return w.p.End(partial) }
func (w plain) Answer(b []byte, u *llm.Usage) (passthrough.Answer, error) {
	return w.p.Answer(b, u)
}

// forwardBoth passes stream through with the policy's shortcut and without, reading it in
// pieces of chunk bytes, and returns both outputs, results and errors.
func forwardBoth(stream []byte, chunk int) (fast, slow string, rf, rs passthrough.Result, ef, es error) {
	run := func(p passthrough.Policy) (string, passthrough.Result, error) {
		var out bytes.Buffer
		src := passthrough.Source{Body: iotest.HalfReader(&chunks{b: stream, n: chunk}), ContentType: "text/event-stream",
			Stream: true, ClientModel: "client-model"}
		res, err := passthrough.Forward(p, &src, fake.Writer(&out))
		return out.String(), res, err
	}
	fast, rf, ef = run(&policy{})
	slow, rs, es = run(plain{&policy{}})
	return
}

// chunks reads b in pieces of at most n bytes.
type chunks struct {
	b []byte
	n int
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), c.n, len(c.b))
	copy(p, c.b[:k])
	c.b = c.b[k:]
	return k, nil
}

// FuzzShortcut: whatever follows a stream's message_start, and however it is cut into reads,
// forwarding with the text-delta shortcut writes the same bytes, counts the same deltas and
// usage, and fails the same way as splitting and checking every event.
func FuzzShortcut(f *testing.F) {
	whole := benchStream()
	start := bytes.Index(whole, []byte("event: content_block_start"))
	f.Add(whole[start:], uint16(4096))
	f.Add(whole[start:], uint16(7))
	f.Add([]byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"bad\\q\"}}\n\n"), uint16(100))
	f.Add([]byte("event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\r\n\r\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"), uint16(3))
	f.Fuzz(func(t *testing.T, tail []byte, chunk uint16) {
		stream := append(whole[:start:start], tail...)
		n := int(chunk%8192) + 1
		fast, slow, rf, rs, ef, es := forwardBoth(stream, n)
		if (ef == nil) != (es == nil) {
			t.Fatalf("errors differ: shortcut %v, without %v", ef, es)
		}
		if fast != slow {
			t.Fatalf("outputs differ:\nshortcut %q\nwithout  %q", fast, slow)
		}
		if rf != rs {
			t.Fatalf("results differ: shortcut %+v, without %+v", rf, rs)
		}
	})
}

// TestShortcutMatchesOnlyWhole: the shortcut takes a text delta only once message_start was
// seen, only whole (its blank line in hand), and nothing of another shape.
func TestShortcutMatchesOnlyWhole(t *testing.T) {
	ev := "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":3,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n"
	pl := &policy{}
	if n := pl.Match([]byte(ev)).N; n != 0 {
		t.Fatalf("matched %d bytes before message_start", n)
	}
	pl.started = true
	if m := pl.Match([]byte(ev + "event: x")); m.N != len(ev) || !m.Delta || m.ModelEnd != 0 {
		t.Fatalf("Match = %+v; want %d bytes, a delta, no model", m, len(ev))
	}
	for _, in := range []string{ev[:len(ev)-1], ev[:len(ev)-2], strings.Replace(ev, "\n\n", "\r\n\r\n", 1),
		strings.Replace(ev, "data: ", "data:", 1), strings.Replace(ev, "text_delta", "input_json_delta", 1),
		strings.Replace(ev, `"hi"`, `"h\qi"`, 1), "\n" + ev} {
		if n := pl.Match([]byte(in)).N; n != 0 {
			t.Errorf("Match(%q) = %d, want 0", in, n)
		}
	}
	fast, slow, rf, rs, ef, es := forwardBoth(benchStream(), 4096)
	if ef != nil || es != nil || fast != slow || rf != rs || rf.Deltas != 100 {
		t.Fatalf("the bench stream: errors %v, %v; %d deltas; outputs equal %v", ef, es, rf.Deltas, fast == slow)
	}
}
