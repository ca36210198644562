package sim

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/llm"
)

func TestKVCacheMatch(t *testing.T) {
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
			c := newKVCache(tt.capacity)
			var scratch []int32
			for i, s := range tt.steps {
				if got := c.match(s.keys, &scratch); got != s.hit {
					t.Errorf("step %d %v: hit %d, want %d", i, s.keys, got, s.hit)
				}
				checkList(t, c)
			}
			if got := c.len(); got != tt.size {
				t.Errorf("len = %d, want %d", got, tt.size)
			}
		})
	}
}

// checkList checks the LRU list and the index agree.
func checkList(t *testing.T, c *kvCache) {
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

func TestKVCacheDisabled(t *testing.T) {
	var c *kvCache = newKVCache(0)
	var scratch []int32
	if c.match([]uint64{1}, &scratch) != 0 || c.match([]uint64{1}, &scratch) != 0 || c.len() != 0 {
		t.Error("a zero-capacity cache reports hits or blocks")
	}
}

func TestBlockHashesChain(t *testing.T) {
	a := blockHashes(nil, []uint32{1, 2, 3, 4, 5, 6, 7}, 2)
	b := blockHashes(nil, []uint32{9, 2, 3, 4, 5, 6}, 2)
	if len(a) != 3 || len(b) != 3 {
		t.Fatalf("got %d and %d blocks, want 3 full blocks each", len(a), len(b))
	}
	for i := range a {
		if a[i] == b[i] {
			t.Errorf("block %d: same key after different first blocks; keys must chain", i)
		}
	}
}

func conversation(turns int) *llm.Request {
	r := &llm.Request{Model: "sim", MaxTokens: 50,
		System: []llm.Block{{Type: llm.BlockText, Text: strings.Repeat("You are a careful assistant who answers with care. ", 4)}}}
	for i := range turns {
		r.Messages = append(r.Messages, llm.Message{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: fmt.Sprintf("Question number %d about the river and the bridge?", i)}}})
		if i < turns-1 {
			r.Messages = append(r.Messages, llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockText, Text: fmt.Sprintf("Answer number %d, with some detail.", i)}}})
		}
	}
	return r
}

func TestPrefixCacheInUsage(t *testing.T) {
	const block = 16
	e := newEngine(t, config.Sim{BlockTokens: block})
	first := conversation(1)
	n1, _ := e.CountTokens(first)
	u1 := mustGenerate(t, e, first).Usage
	if u1.CacheReadInputTokens != 0 || u1.InputTokens != n1 {
		t.Errorf("cold: %+v, want all %d tokens uncached", u1, n1)
	}
	u2 := mustGenerate(t, e, first).Usage
	if want := min(n1/block*block, n1-1); u2.CacheReadInputTokens != want || u2.InputTokens != n1-want {
		t.Errorf("repeat: %+v, want %d cached of %d", u2, want, n1)
	}
	longer := conversation(3) // the same start, more turns
	n3, _ := e.CountTokens(longer)
	u3 := mustGenerate(t, e, longer).Usage
	if want := n1 / block * block; u3.CacheReadInputTokens != want || u3.InputTokens != n3-want {
		t.Errorf("extended: %+v, want the first prompt's %d full-block tokens cached of %d", u3, want, n3)
	}
	s := e.Stats()
	if want := int64(n1 + n1 + n3); s.PrefixQueryTokens != want {
		t.Errorf("PrefixQueryTokens = %d, want %d", s.PrefixQueryTokens, want)
	}
	if want := int64(u2.CacheReadInputTokens + u3.CacheReadInputTokens); s.PrefixHitTokens != want {
		t.Errorf("PrefixHitTokens = %d, want %d", s.PrefixHitTokens, want)
	}
	if want := n3 / block; s.CachedBlocks != want {
		t.Errorf("CachedBlocks = %d, want %d", s.CachedBlocks, want)
	}
}

func TestPrefixCacheEviction(t *testing.T) {
	const block = 4
	e := newEngine(t, config.Sim{BlockTokens: block, KVCacheTokens: 10 * block})
	a, b := userReq(strings.Repeat("alpha beta gamma ", 8)), userReq(strings.Repeat("delta epsilon zeta ", 8))
	mustGenerate(t, e, a)
	if got := mustGenerate(t, e, a).Usage.CacheReadInputTokens; got == 0 {
		t.Fatal("repeat of a: nothing cached")
	}
	mustGenerate(t, e, b) // b's blocks push a's out of the 10-block cache
	if got := e.Stats().CachedBlocks; got != 10 {
		t.Errorf("CachedBlocks = %d, want the capacity 10", got)
	}
	if got := mustGenerate(t, e, a).Usage.CacheReadInputTokens; got != 0 {
		t.Errorf("a after b filled the cache: %d tokens cached, want 0 (a's first block was evicted)", got)
	}
}

func TestKVCacheUsageWhileRunning(t *testing.T) {
	const block = 16
	e := newEngine(t, config.Sim{BlockTokens: block, KVCacheTokens: 64 * block})
	req := userReq("hold on")
	n, _ := e.CountTokens(req)
	var during Stats
	rec := &recorder{t: t, onSend: func(ev *llm.Event) error {
		if ev.Kind == llm.EventTextDelta && during.Running == 0 {
			during = e.Stats()
		}
		return nil
	}}
	if err := e.Generate(context.Background(), req, rec); err != nil {
		t.Fatal(err)
	}
	// At the first delta, the prompt and one output token are held.
	if want := float64((n+1+block-1)/block) / 64; during.Running != 1 || during.KVCacheUsage != want {
		t.Errorf("during: %+v, want 1 running and usage %v", during, want)
	}
	if after := e.Stats(); after.Running != 0 || after.KVCacheUsage != 0 {
		t.Errorf("after: %+v, want nothing running or held", after)
	}
}
