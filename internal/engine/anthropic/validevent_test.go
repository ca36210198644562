package anthropic

import (
	"testing"

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
