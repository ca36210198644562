package upstream

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestInt(t *testing.T) {
	tests := []struct {
		in   string
		want int
		ok   bool
	}{
		{"0", 0, true}, {"42", 42, true}, {"-7", -7, true}, {"9007199254740992", 1 << 53, true},
		{"9007199254740993", 0, false}, {"", 0, false}, {"-", 0, false}, {"01", 0, false},
		{"1.5", 0, false}, {"1e3", 0, false}, {"null", 0, false}, {`"3"`, 0, false}, {"12345678901234567", 0, false},
	}
	for _, tt := range tests {
		got, ok := Int([]byte(tt.in))
		if got != tt.want || ok != tt.ok {
			t.Errorf("Int(%q): got %d %v, want %d %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestReadAll(t *testing.T) {
	long := strings.Repeat("abcdefgh", 1000)
	tests := []struct {
		name string
		r    io.Reader
		dst  []byte
		max  int
		want string
		err  bool
	}{
		{"empty", strings.NewReader(""), nil, 100, "", false},
		{"appends", strings.NewReader("xyz"), []byte("ab"), 100, "abxyz", false},
		{"grows a small buffer", iotest.OneByteReader(strings.NewReader(long)), make([]byte, 0, 3), 1 << 20, long, false},
		{"stops at max", strings.NewReader(long), make([]byte, 0, 16), 10, long[:10], false},
		{"error", iotest.ErrReader(errors.New("boom")), nil, 10, "", true},
	}
	for _, tt := range tests {
		got, err := ReadAll(tt.dst, tt.r, tt.max)
		if string(got) != tt.want || (err != nil) != tt.err {
			t.Errorf("%s: got %d bytes, %v; want %d bytes, error %v", tt.name, len(got), err, len(tt.want), tt.err)
		}
	}
	buf := make([]byte, 0, 64<<10)
	if n := testing.AllocsPerRun(50, func() {
		buf, _ = ReadAll(buf[:0], strings.NewReader(long), 1<<20)
	}); n > 1 { // the strings.Reader
		t.Errorf("got %v allocations into a large enough buffer, want at most 1", n)
	}
}
