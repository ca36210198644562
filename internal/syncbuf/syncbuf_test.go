package syncbuf

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

// Concurrent writers and a reader: every line arrives whole, and Lines splits them.
func TestBuffer(t *testing.T) {
	var b Buffer
	if got := b.Lines(); !slices.Equal(got, []string{""}) {
		t.Errorf("empty: %q", got)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 100 {
				fmt.Fprintf(&b, "w%d-%d\n", i, j)
				_ = b.String()
			}
		})
	}
	wg.Wait()
	lines := b.Lines()
	if len(lines) != 800 {
		t.Fatalf("got %d lines, want 800", len(lines))
	}
	slices.Sort(lines)
	if lines[0] != "w0-0" || lines[799] != "w7-99" {
		t.Errorf("lines %q … %q", lines[0], lines[799])
	}
}
