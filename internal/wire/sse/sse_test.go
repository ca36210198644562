package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
)

// sseEvent is what Reader.Next returned, copied.
type sseEvent struct{ Raw, Name, Data string }

func readEvents(r *Reader) ([]sseEvent, error) { return readEventsAsking(r, false) }

// readEventsAsking reads as readEvents, asking Buffered before each event when ask is set (as
// a forwarding loop does), which must change nothing Next returns.
func readEventsAsking(r *Reader, ask bool) ([]sseEvent, error) {
	var out []sseEvent
	for {
		if ask {
			r.Buffered()
		}
		raw, name, data, err := r.Next()
		if errors.Is(err, io.EOF) {
			return append(out, sseEvent{string(raw), "EOF", ""}), nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, sseEvent{string(raw), string(name), string(data)})
	}
}

// FuzzReader checks Next's fast path (events whole in the buffer) against its general path
// (taken when the input arrives a byte at a time): both must return the same events.
func FuzzReader(f *testing.F) {
	f.Add([]byte("event: a\ndata: {\"x\":1}\n\n: c\n\ndata: 1\ndata: 2\n\n\n\nevent: b\r\ndata:x\r\n\r\nevent: tail"))
	f.Add([]byte("data: [DONE]\n\n"))
	f.Add([]byte("id: 1\nretry: 10\ndata: {}\n\n\x8f\x00garbage\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		fast, errFast := readEvents(NewReader(bytes.NewReader(in)))
		slow, errSlow := readEvents(NewReader(iotest.OneByteReader(bytes.NewReader(in))))
		if (errFast == nil) != (errSlow == nil) {
			t.Fatalf("errors differ: %v and %v", errFast, errSlow)
		}
		if diff := cmp.Diff(slow, fast); diff != "" {
			t.Fatalf("fast path differs (-general +fast):\n%s", diff)
		}
		asked, errAsked := readEventsAsking(NewReader(bytes.NewReader(in)), true)
		if (errAsked == nil) != (errFast == nil) {
			t.Fatalf("asking Buffered: errors %v and %v", errAsked, errFast)
		}
		if diff := cmp.Diff(fast, asked); diff != "" {
			t.Fatalf("asking Buffered changes the events (-not asked +asked):\n%s", diff)
		}
		// Lenient: the same, with lines that are no field skipped rather than refused.
		lf, ls := NewReader(bytes.NewReader(in)), NewReader(iotest.OneByteReader(bytes.NewReader(in)))
		lf.Lenient, ls.Lenient = true, true
		fast, errFast = readEvents(lf)
		slow, errSlow = readEvents(ls)
		if (errFast == nil) != (errSlow == nil) || errors.Is(errFast, ErrNotSSE) {
			t.Fatalf("lenient: errors %v and %v", errFast, errSlow)
		}
		if diff := cmp.Diff(slow, fast); diff != "" {
			t.Fatalf("lenient: fast path differs (-general +fast):\n%s", diff)
		}
	})
}

// anthropicEvents is a 100-token Messages API stream.
func anthropicEvents() []byte {
	var b bytes.Buffer
	b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n")
	b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	for range 100 {
		b.WriteString("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" word\"}}\n\n")
	}
	b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
	b.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":100}}\n\n")
	b.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	return b.Bytes()
}

func BenchmarkReader(b *testing.B) {
	in := anthropicEvents()
	src := bytes.NewReader(in)
	br := bufio.NewReaderSize(src, 16<<10)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		src.Reset(in)
		br.Reset(src)
		r := NewReader(br)
		n := 0
		for {
			_, _, _, err := r.Next()
			if err != nil {
				break
			}
			n++
		}
		if n != 105 {
			b.Fatalf("got %d events, want 105", n)
		}
	}
}

func TestReaderReadsLongEventsAcrossTheBuffer(t *testing.T) {
	long := strings.Repeat("y", 50<<10)
	in := "data: a\n\ndata: " + long + "\n\ndata: b\n\n"
	got, err := readEvents(NewReader(strings.NewReader(in)))
	if err != nil {
		t.Fatal(err)
	}
	want := []sseEvent{{"data: a\n\n", "", "a"}, {"data: " + long + "\n\n", "", long}, {"data: b\n\n", "", "b"}, {"", "EOF", ""}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestReaderRefusesGarbage: a line that is no SSE field is an error, on both paths; the
// fields engines send and comments are not.
func TestReaderRefusesGarbage(t *testing.T) {
	ok := "id: 1\nretry: 100\n: keep-alive\nevent: e\ndata: {}\n\n"
	for _, in := range []string{ok + "\x8f\x00\x13garbage\n\n", ok + "<html>\n\n", "datum: 1\n\n"} {
		for _, r := range []io.Reader{strings.NewReader(in), iotest.OneByteReader(strings.NewReader(in))} {
			evs, err := readEvents(NewReader(r))
			if !errors.Is(err, ErrNotSSE) {
				t.Errorf("%q: got %v, %v; want ErrNotSSE", in, evs, err)
			}
		}
	}
	if _, err := readEvents(NewReader(strings.NewReader(ok))); err != nil {
		t.Errorf("%q: %v", ok, err)
	}
}

func TestReaderSplitsEvents(t *testing.T) {
	long := strings.Repeat("x", 40<<10)
	in := "\n: comment\n\nevent: message_start\ndata: {\"a\":1}\n\ndata: one\r\ndata: two\r\n\r\ndata: " + long + "\n\nevent: tail\ndata: {\"b\":2}"
	got, err := readEvents(NewReader(strings.NewReader(in)))
	if err != nil {
		t.Fatal(err)
	}
	want := []sseEvent{
		{": comment\n\n", "", ""},
		{"event: message_start\ndata: {\"a\":1}\n\n", "message_start", `{"a":1}`},
		{"data: one\r\ndata: two\r\n\r\n", "", "one\ntwo"},
		{"data: " + long + "\n\n", "", long},
		{"event: tail\ndata: {\"b\":2}", "EOF", ""},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mismatch (-want +got):\n%s", diff)
	}
}

// TestReaderEOF: an event cut off by the end of the input comes back with io.EOF, its name and
// data located as far as they go, on both paths.
func TestReaderEOF(t *testing.T) {
	in := "data: 1\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}"
	for _, src := range []io.Reader{strings.NewReader(in), iotest.OneByteReader(strings.NewReader(in))} {
		r := NewReader(src)
		if _, _, data, err := r.Next(); err != nil || string(data) != "1" {
			t.Fatalf("first event: got %q, %v", data, err)
		}
		raw, name, data, err := r.Next()
		if err != io.EOF || string(raw) != in[9:] || string(name) != "message_stop" || string(data) != `{"type":"message_stop"}` {
			t.Errorf("got %q %q %q %v, want the partial event with io.EOF", raw, name, data, err)
		}
	}
}

// TestReaderFieldError: the refused line is kept for a decoder that reads it (llama.cpp's
// error: line).
func TestReaderFieldError(t *testing.T) {
	_, _, _, err := NewReader(strings.NewReader("error: {\"message\":\"boom\"}\r\n\r\n")).Next()
	var fe *FieldError
	if !errors.As(err, &fe) || !errors.Is(err, ErrNotSSE) || string(fe.Line) != `error: {"message":"boom"}` {
		t.Errorf("got %v, want a *FieldError with the line", err)
	}
}

// FuzzBuffered: when Buffered reports a whole event, Next returns it from the bytes in hand,
// without reading again (the source then fails the test).
func FuzzBuffered(f *testing.F) {
	f.Add([]byte("event: a\ndata: {}\n\n"))
	f.Add([]byte("\r\n\ndata: 1\r\n\r\n"))
	f.Add([]byte("\n\ndata: 1\n\r\r\n"))
	f.Add([]byte("data: 1\n\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		br := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(in), failReader{t}), BufferSize)
		_, _ = br.Peek(len(in)) // everything in hand; the next read fails
		r := NewReader(br)
		r.Lenient = true
		if !r.Buffered() {
			return
		}
		if _, _, _, err := r.Next(); err != nil {
			t.Fatalf("Buffered reported a whole event, Next: %v", err)
		}
	})
}

// failReader fails the test it is read in.
type failReader struct{ t *testing.T }

func (f failReader) Read([]byte) (int, error) {
	f.t.Fatal("read past the bytes Buffered reported whole")
	return 0, io.EOF
}

// TestReaderBuffered: Buffered is true exactly when a whole event is buffered; leading blank
// lines do not make a partial event whole.
func TestReaderBuffered(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"", false},
		{"data: 1\n", false},
		{"data: 1\n\n", true},
		{"data: 1\r\n\r\n", true},
		{"\n\n\r\n", false},
		{"\r\r\n\ndata: 1", false},
		{"\n\ndata: 1\n", false},
		{"\n\ndata: 1\n\n", true},
		{": c\n\n", true},
	}
	for _, tt := range tests {
		br := bufio.NewReaderSize(strings.NewReader(tt.in), BufferSize)
		_, _ = br.Peek(1) // fill
		if got := NewReader(br).Buffered(); got != tt.want {
			t.Errorf("%q: got %v, want %v", tt.in, got, tt.want)
		}
	}
}
