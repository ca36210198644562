package golden

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/layer0ai/layer0/internal/llm"
)

// Tokens returns n delta texts of different lengths, for a stream a test writes in its format.
func Tokens(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("tok%d-%s", i, strings.Repeat(string(rune('a'+i%26)), i%30))
	}
	return out
}

// CheckKeptText reads stream with read three ways — whole, a byte at a time, half a read at a
// time, so that the reader refills its buffer often — into a Sink that keeps every text delta's
// string, as a Sink may (strings do not change), and fails unless the kept strings are want, in
// order. A reader whose text points into its reused buffer shows a later event's bytes there.
func CheckKeptText(t *testing.T, read func(io.Reader, llm.Sink) error, stream string, want []string) {
	t.Helper()
	for name, r := range map[string]io.Reader{
		"whole":           strings.NewReader(stream),
		"one byte a time": iotest.OneByteReader(strings.NewReader(stream)),
		"half reads":      iotest.HalfReader(strings.NewReader(stream)),
	} {
		k := &keeper{}
		if err := read(r, k); err != nil {
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

// keeper is a Sink that keeps every text delta's string.
type keeper struct{ texts []string }

func (k *keeper) Send(ev *llm.Event) error {
	if ev.Kind == llm.EventTextDelta {
		k.texts = append(k.texts, ev.Text)
	}
	return nil
}

func (k *keeper) Flush() error { return nil }
