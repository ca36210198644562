package gateway

import (
	"errors"
	"testing"
)

// TestSharedLifecycle: a component carries over while its key is unchanged, is cleaned up once
// by its last holder, and a generation that never went live cleans up only what it built.
func TestSharedLifecycle(t *testing.T) {
	built, cleaned := 0, map[int]int{}
	make1 := func() (int, error) { built++; return built, nil }
	clean := func(v int) { cleaned[v]++ }

	var gen1 holdings
	a := add(&gen1, must(t)(provision(nil, "k1", make1, clean)))
	gen1.commit()

	var gen2 holdings
	b := add(&gen2, must(t)(provision(a, "k1", make1, clean)))
	if b != a || built != 1 {
		t.Fatalf("same key: got a new component (built %d)", built)
	}
	gen2.commit()
	gen1.letGo()
	if len(cleaned) != 0 {
		t.Fatalf("cleaned %v while gen2 holds it", cleaned)
	}

	// A build that fails after provisioning: the new component is cleaned, the carried one kept.
	var failed holdings
	add(&failed, must(t)(provision(b, "k1", make1, clean)))
	c := add(&failed, must(t)(provision[int](nil, "k2", make1, clean)))
	failed.abandon()
	if cleaned[c.Value()] != 1 || cleaned[a.Value()] != 0 {
		t.Fatalf("abandon: cleaned %v, want only %d", cleaned, c.Value())
	}

	var gen3 holdings
	d := add(&gen3, must(t)(provision(b, "k2", make1, clean)))
	if d == b {
		t.Fatal("changed key: the old component was carried over")
	}
	gen3.commit()
	gen2.letGo()
	if cleaned[a.Value()] != 1 || cleaned[d.Value()] != 0 {
		t.Fatalf("after gen2 let go: cleaned %v, want %d once", cleaned, a.Value())
	}

	if _, err := provision[int](nil, "k", func() (int, error) { return 0, errors.New("no") }, clean); err == nil {
		t.Fatal("a failed build returned no error")
	}
}

func must(t *testing.T) func(*Shared[int], error) *Shared[int] {
	return func(s *Shared[int], err error) *Shared[int] {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}
