package llm

import (
	"strings"
	"testing"
)

// The strings an Arena made never change: not when the bytes they came from are overwritten, and
// not when later strings fill the same block or a new one.
func TestArenaStringsDoNotChange(t *testing.T) {
	var a Arena
	src := []byte("hello")
	first := a.String(src)
	copy(src, "XXXXX")
	var made []string
	var want []string
	for i := range 2000 {
		w := strings.Repeat(string(rune('a'+i%26)), 1+i%40)
		made = append(made, a.String([]byte(w)))
		want = append(want, w)
	}
	long := strings.Repeat("z", arenaMaxString+1)
	if got := a.String([]byte(long)); got != long {
		t.Errorf("a long string came back as %q…", got[:10])
	}
	if first != "hello" {
		t.Errorf("the first string is %q after its source changed, want hello", first)
	}
	for i := range made {
		if made[i] != want[i] {
			t.Fatalf("string %d is %q, want %q", i, made[i], want[i])
		}
	}
	if a.String(nil) != "" {
		t.Error("no bytes should make the empty string")
	}
}

// A stream's worth of small deltas costs a handful of blocks, not one allocation each.
func TestArenaAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocations")
	}
	tok := []byte(" token")
	allocs := testing.AllocsPerRun(100, func() {
		var a Arena
		for range 100 {
			_ = a.String(tok)
		}
	})
	if allocs > 2 {
		t.Errorf("100 strings of %d bytes cost %.0f allocations, want at most 2", len(tok), allocs)
	}
}
