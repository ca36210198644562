package prefix

import "testing"

// TestCacheMatchInsert is the cache as an engine uses it (the simulator's KV cache): match a
// prompt's leading blocks, then hold them all.
func TestCacheMatchInsert(t *testing.T) {
	type step struct {
		keys []uint64
		hit  int
	}
	tests := []struct {
		name     string
		capacity int
		steps    []step
		size     int
	}{
		{"repeat", 8, []step{{[]uint64{1, 2, 3}, 0}, {[]uint64{1, 2, 3}, 3}}, 3},
		{"extend", 8, []step{{[]uint64{1, 2}, 0}, {[]uint64{1, 2, 3, 4}, 2}, {[]uint64{1, 2, 3, 4, 5}, 4}}, 5},
		{"diverge", 8, []step{{[]uint64{1, 2, 3}, 0}, {[]uint64{1, 9, 10}, 1}}, 5},
		// 1 2 3 4 are cached with 1 most recent; 5 6 evict the least recent, 4 then 3.
		{"evict from the end of the prefix", 4, []step{{[]uint64{1, 2, 3, 4}, 0}, {[]uint64{5, 6}, 0}, {[]uint64{1, 2, 3, 4}, 2}}, 4},
		// Touching 1 2 makes 5 6 the oldest.
		{"least recently used goes first", 4, []step{{[]uint64{1, 2}, 0}, {[]uint64{5, 6}, 0}, {[]uint64{1, 2}, 2}, {[]uint64{7, 8}, 0}, {[]uint64{1, 2}, 2}, {[]uint64{5}, 0}}, 4},
		{"prompt longer than the cache", 2, []step{{[]uint64{1, 2, 3}, 0}, {[]uint64{1, 2, 3}, 2}}, 2},
		{"a later block survives a broken chain", 3, []step{{[]uint64{1, 2, 3}, 0}, {[]uint64{4}, 0}, {[]uint64{1, 2, 3}, 2}}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCache(tt.capacity)
			for i, s := range tt.steps {
				if got := c.MatchInsert(s.keys); got != s.hit {
					t.Errorf("step %d %v: hit %d, want %d", i, s.keys, got, s.hit)
				}
				checkList(t, c)
			}
			if got := c.Len(); got != tt.size {
				t.Errorf("len = %d, want %d", got, tt.size)
			}
		})
	}
}

// checkList checks the LRU list and the index agree.
func checkList(t *testing.T, c *Cache) {
	t.Helper()
	n := 0
	prev := int32(-1)
	for s := c.head; s >= 0; s = c.slots[s].next {
		if c.slots[s].prev != prev {
			t.Fatalf("slot %d: prev %d, want %d", s, c.slots[s].prev, prev)
		}
		if got, ok := c.index[c.slots[s].key]; !ok || got != s {
			t.Fatalf("slot %d key %d: index says %d, %v", s, c.slots[s].key, got, ok)
		}
		prev = s
		n++
		if n > len(c.slots) {
			t.Fatal("LRU list has a cycle")
		}
	}
	if prev != c.tail || n != len(c.index) {
		t.Fatalf("list of %d ending at %d; index %d, tail %d", n, prev, len(c.index), c.tail)
	}
}

func TestCacheDisabled(t *testing.T) {
	var c *Cache = NewCache(0)
	if c.MatchInsert([]uint64{1}) != 0 || c.MatchInsert([]uint64{1}) != 0 || c.Len() != 0 {
		t.Error("a zero-capacity cache reports hits or blocks")
	}
}

func TestAppendKeysChainFromTheFirstBlock(t *testing.T) {
	a := AppendKeys(nil, []uint32{1, 2, 3, 4, 5, 6, 7}, 2)
	b := AppendKeys(nil, []uint32{9, 2, 3, 4, 5, 6}, 2)
	if len(a) != 3 || len(b) != 3 {
		t.Fatalf("got %d and %d blocks, want 3 full blocks each", len(a), len(b))
	}
	for i := range a {
		if a[i] == b[i] {
			t.Errorf("block %d: same key after different first blocks; keys must chain", i)
		}
	}
}
