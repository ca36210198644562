package upstream

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

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
