package openai

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
// hundreds of later chunks (read a few bytes at a time, so the buffer is refilled often).
func TestReadStreamTextOutlivesTheBuffer(t *testing.T) {
	const head = `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":`
	var b strings.Builder
	b.WriteString(head + `{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n")
	var want []string
	for i := range 500 {
		w := fmt.Sprintf("tok%d-%s", i, strings.Repeat(string(rune('a'+i%26)), i%30))
		want = append(want, w)
		fmt.Fprintf(&b, "%s{\"content\":%q},\"finish_reason\":null}]}\n\n", head, w)
	}
	b.WriteString(head + `{},"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n")
	for name, r := range map[string]io.Reader{
		"whole":           strings.NewReader(b.String()),
		"one byte a time": iotest.OneByteReader(strings.NewReader(b.String())),
		"half chunks":     iotest.HalfReader(strings.NewReader(b.String())),
	} {
		k := &keeper{}
		if err := ReadStream(r, k); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := strings.Join(k.texts, "")
		if got != strings.Join(want, "") {
			t.Fatalf("%s: the kept deltas join to %q…, want %q…", name, got[:min(40, len(got))], strings.Join(want, "")[:40])
		}
	}
}
