package sim

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/llm"
)

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
