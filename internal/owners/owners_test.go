package owners

import "testing"

// TestLargest: the largest holder is the one of the most bytes among those holding an entry (an
// owner whose only bytes are an entry being put is not one to evict from); an empty holding is
// forgotten, a holding with entries kept.
func TestLargest(t *testing.T) {
	var s Set
	if s.Largest() != nil {
		t.Fatal("an empty set has a largest holder")
	}
	a, b := s.Of("a"), s.Of("b")
	a.Entries.PushBack(1)
	a.Bytes = 10
	b.Bytes = 100 // an entry being put: nothing to evict yet
	if got := s.Largest(); got != a {
		t.Fatalf("largest %p, want a's %p", got, a)
	}
	b.Entries.PushBack(2)
	if got := s.Largest(); got != b {
		t.Fatalf("largest %p, want b's %p", got, b)
	}
	if s.Of("a") != a {
		t.Error("Of made a second holding for an owner")
	}
	s.Forget("a")
	if s.Of("a") != a {
		t.Error("a holding with entries was forgotten")
	}
	a.Entries.Init()
	a.Bytes = 0
	s.Forget("a")
	if s.Of("a") == a {
		t.Error("an empty holding was kept")
	}
}
