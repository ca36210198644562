package anthropic

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/layer0ai/layer0/internal/llm"
)

// keeper is a Sink that keeps every delta's text, as a Sink may: strings do not change.
type keeper struct{ texts []string }

func (k *keeper) Send(ev *llm.Event) error {
	if ev.Kind == llm.EventTextDelta {
		k.texts = append(k.texts, ev.Text)
	}
	return nil
}
func (k *keeper) Flush() error { return nil }

// The deltas' text a Sink kept is what the engine sent, after the reader's buffer was reused for
// hundreds of later events (read a few bytes at a time, so the buffer is refilled often).
func TestReadStreamTextOutlivesTheBuffer(t *testing.T) {
	var b strings.Builder
	b.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n")
	b.WriteString("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
	var want []string
	for i := range 500 {
		w := fmt.Sprintf("tok%d-%s", i, strings.Repeat(string(rune('a'+i%26)), i%30))
		want = append(want, w)
		fmt.Fprintf(&b, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":%q}}\n\n", w)
	}
	b.WriteString("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
	b.WriteString("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":500}}\n\n")
	b.WriteString("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	for name, r := range map[string]io.Reader{
		"whole":           strings.NewReader(b.String()),
		"one byte a time": iotest.OneByteReader(strings.NewReader(b.String())),
		"half events":     iotest.HalfReader(strings.NewReader(b.String())),
	} {
		k := &keeper{}
		if err := ReadStream(r, k); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(k.texts) != len(want) {
			t.Fatalf("%s: %d deltas, want %d", name, len(k.texts), len(want))
		}
		for i := range want {
			if k.texts[i] != want[i] {
				t.Fatalf("%s: delta %d is %q, want %q", name, i, k.texts[i], want[i])
			}
		}
	}
}
