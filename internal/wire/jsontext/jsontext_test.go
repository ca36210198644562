package jsontext

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestAppendString(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", `""`},
		{"plain ascii text that is long enough for words", `"plain ascii text that is long enough for words"`},
		{`q"b\`, `"q\"b\\"`},
		{"a\nb\rc\td\be\ff\x01\x1f", `"a\nb\rc\td\be\ff\u0001\u001f"`},
		{"héllo – 世界", `"héllo – 世界"`},
		{"bad\xffbyte", `"bad\ufffdbyte"`},
		{"js\u2028\u2029", `"js\u2028\u2029"`},
		{"01234567\"", `"01234567\""`},
	}
	for _, tt := range tests {
		if got := string(AppendString(nil, tt.in)); got != tt.want {
			t.Errorf("AppendString(%q): got %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestAppendStringAllocs(t *testing.T) {
	buf := make([]byte, 0, 256)
	s := strings.Repeat("text with \"quotes\" and\nnewlines ", 3)
	if n := testing.AllocsPerRun(100, func() { buf = AppendString(buf[:0], s) }); n != 0 {
		t.Errorf("got %v allocs, want 0", n)
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a\"b", "\xff\xfe", "\u2028x", "0123456789abcdef\\", "\x00\x7f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := AppendString(nil, s)
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("AppendString(%q) = %s is not valid JSON: %v", s, out, err)
		}
		want := strings.ToValidUTF8(s, "\ufffd")
		if utf8.ValidString(s) {
			want = s
		}
		if back != want && back != strings.Map(func(r rune) rune { return r }, want) {
			// ToValidUTF8 collapses a run of bad bytes into one U+FFFD; we replace each byte.
			if strings.ReplaceAll(back, "\ufffd", "") != strings.ReplaceAll(want, "\ufffd", "") {
				t.Fatalf("round trip of %q: got %q", s, back)
			}
		}
	})
}

func BenchmarkAppendString(b *testing.B) {
	buf := make([]byte, 0, 256)
	s := "The quick brown fox jumps over the lazy dog, then writes \"JSON\".\n"
	b.ReportAllocs()
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		buf = AppendString(buf[:0], s)
	}
}
