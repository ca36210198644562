package ids

import (
	"strings"
	"testing"
)

func TestShapes(t *testing.T) {
	tests := []struct {
		f      func() string
		prefix string
		n      int
	}{{Request, "L0-", 20}, {Message, "msg_", 24}, {Completion, "chatcmpl-", 24},
		{appended(AppendRequest), "L0-", 20}, {appended(AppendMessage), "msg_", 24}, {appended(AppendCompletion), "chatcmpl-", 24}, {ToolUse, "toolu_", 24}, {ToolCall, "call_", 24}}
	for _, tt := range tests {
		seen := map[string]bool{}
		for range 1000 {
			id := tt.f()
			if !strings.HasPrefix(id, tt.prefix) || len(id) != len(tt.prefix)+tt.n {
				t.Fatalf("got %q, want %s + %d chars", id, tt.prefix, tt.n)
			}
			if strings.Trim(id[len(tt.prefix):], alphabet) != "" {
				t.Fatalf("got %q, want base-62 characters", id)
			}
			if seen[id] {
				t.Fatalf("duplicate id %q", id)
			}
			seen[id] = true
		}
	}
}

func BenchmarkRequest(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = Request()
	}
}

// appended makes an Append function a constructor, appending after bytes it then drops.
func appended(f func([]byte) []byte) func() string {
	return func() string {
		b := f([]byte("prefix"))
		if string(b[:6]) != "prefix" {
			panic("the prefix was overwritten")
		}
		return string(b[6:])
	}
}
