package upstream

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

// sseEvent is what EventReader.Next returned, copied.
type sseEvent struct{ Raw, Name, Data string }

func readEvents(r *EventReader) ([]sseEvent, error) {
	var out []sseEvent
	for {
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

// FuzzEventReader checks Next's fast path (events whole in the buffer) against its general path
// (taken when the input arrives a byte at a time): both must return the same events.
func FuzzEventReader(f *testing.F) {
	f.Add([]byte("event: a\ndata: {\"x\":1}\n\n: c\n\ndata: 1\ndata: 2\n\n\n\nevent: b\r\ndata:x\r\n\r\nevent: tail"))
	f.Add([]byte("data: [DONE]\n\n"))
	f.Add([]byte("id: 1\nretry: 10\ndata: {}\n\n\x8f\x00garbage\n\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		fast, errFast := readEvents(NewEventReader(bytes.NewReader(in)))
		slow, errSlow := readEvents(NewEventReader(iotest.OneByteReader(bytes.NewReader(in))))
		if (errFast == nil) != (errSlow == nil) {
			t.Fatalf("errors differ: %v and %v", errFast, errSlow)
		}
		if diff := cmp.Diff(slow, fast); diff != "" {
			t.Fatalf("fast path differs (-general +fast):\n%s", diff)
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

func BenchmarkEventReader(b *testing.B) {
	in := anthropicEvents()
	src := bytes.NewReader(in)
	br := bufio.NewReaderSize(src, 16<<10)
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		src.Reset(in)
		br.Reset(src)
		r := NewEventReader(br)
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

func TestEventReaderReadsLongEventsAcrossTheBuffer(t *testing.T) {
	long := strings.Repeat("y", 50<<10)
	in := "data: a\n\ndata: " + long + "\n\ndata: b\n\n"
	got, err := readEvents(NewEventReader(strings.NewReader(in)))
	if err != nil {
		t.Fatal(err)
	}
	want := []sseEvent{{"data: a\n\n", "", "a"}, {"data: " + long + "\n\n", "", long}, {"data: b\n\n", "", "b"}, {"", "EOF", ""}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestEventReaderRefusesGarbage: a line that is no SSE field is an error, on both paths; the
// fields engines send and comments are not.
func TestEventReaderRefusesGarbage(t *testing.T) {
	ok := "id: 1\nretry: 100\n: keep-alive\nevent: e\ndata: {}\n\n"
	for _, in := range []string{ok + "\x8f\x00\x13garbage\n\n", ok + "<html>\n\n", "datum: 1\n\n"} {
		for _, r := range []io.Reader{strings.NewReader(in), iotest.OneByteReader(strings.NewReader(in))} {
			evs, err := readEvents(NewEventReader(r))
			if !errors.Is(err, ErrNotSSE) {
				t.Errorf("%q: got %v, %v; want ErrNotSSE", in, evs, err)
			}
		}
	}
	if _, err := readEvents(NewEventReader(strings.NewReader(ok))); err != nil {
		t.Errorf("%q: %v", ok, err)
	}
}
