package prefix

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/kvevents"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/tokenizer"
)

// engine is a fake engine's naming of blocks: its own hashes, unrelated to layer0's keys.
func engineHashes(from kvevents.Hash, n int) []kvevents.Hash {
	hs := make([]kvevents.Hash, n)
	for i := range hs {
		hs[i] = from + kvevents.Hash(i)*0x9e3779b97f4a7c15
	}
	return hs
}

func seqTokens(start, n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(start + i)
	}
	return t
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newPrecise(t testing.TB, block, capacity int, c *clock) *Replica {
	t.Helper()
	r := NewReplica("a", tokenizer.Default(), block, capacity)
	opt := PreciseOptions{Checks: 4, Grace: time.Second}
	if c != nil {
		opt.Now = c.now
	}
	r.EnablePrecise(opt)
	r.SetConnected(true)
	return r
}

func promptOf(toks []uint32) *Prompt {
	p := new(Prompt)
	p.SetTokens(toks)
	return p
}

func stored(hs []kvevents.Hash, parent *kvevents.Hash, toks []uint32, block int) kvevents.Event {
	e := kvevents.Event{Kind: kvevents.BlockStored, Hashes: hs, Tokens: toks, BlockSize: block}
	if parent != nil {
		e.Parent, e.HasParent = *parent, true
	}
	return e
}

// TestPreciseFollowsEvents: the index holds what the events say, chained through the engine's
// own hashes, and matches a prompt as the engine does (leading blocks up to the first missing).
func TestPreciseFollowsEvents(t *testing.T) {
	const B = 4
	r := newPrecise(t, B, 1024, nil)
	toks := seqTokens(100, 6*B+2)
	p := promptOf(toks)
	hs := engineHashes(1000, 6)
	// Stored in two events, the second chained on the first's last block, as an engine stores
	// a prompt that extends a cached one.
	r.Apply(&kvevents.Batch{Events: []kvevents.Event{stored(hs[:2], nil, toks[:2*B], B)}})
	if got := r.Match(p); got != 2*B {
		t.Fatalf("after 2 blocks stored: match %d, want %d", got, 2*B)
	}
	r.Apply(&kvevents.Batch{Events: []kvevents.Event{stored(hs[2:], &hs[1], toks[2*B:6*B], B)}})
	if got := r.Match(p); got != 6*B {
		t.Fatalf("after 6 blocks stored: match %d, want %d", got, 6*B)
	}
	// Another prompt sharing the first 3 blocks matches 3.
	other := append(seqTokens(100, 3*B), seqTokens(900, 3*B)...)
	if got := r.Match(promptOf(other)); got != 3*B {
		t.Fatalf("shared prefix: match %d, want %d", got, 3*B)
	}
	// A block removed in the middle ends the match there, as in the engine.
	r.Apply(&kvevents.Batch{Events: []kvevents.Event{{Kind: kvevents.BlockRemoved, Hashes: hs[4:5]}}})
	if got := r.Match(p); got != 4*B {
		t.Fatalf("after block 4 removed: match %d, want %d", got, 4*B)
	}
	// Blocks of a LoRA adapter, another tier or another KV group are not the prompt's.
	lora := stored(engineHashes(5000, 1), nil, seqTokens(7, B), B)
	lora.LoRA = true
	cpu := stored(engineHashes(6000, 1), nil, seqTokens(7, B), B)
	cpu.Medium = "CPU"
	r.Apply(&kvevents.Batch{Events: []kvevents.Event{lora, cpu}})
	if got := r.Match(promptOf(seqTokens(7, B))); got != 0 {
		t.Fatalf("LoRA and CPU blocks matched %d", got)
	}
	// A block whose parent was never seen cannot be keyed.
	unknown := kvevents.Hash(42)
	r.Apply(&kvevents.Batch{Events: []kvevents.Event{stored(engineHashes(7000, 1), &unknown, seqTokens(8, B), B)}})
	st := r.PreciseStats()
	if st.Blocks != 5 || st.Stored != 6 || st.Removed != 1 || st.Orphans != 1 || st.Ignored != 2 {
		t.Fatalf("stats %+v", st)
	}
	if m, _ := r.Mode(); m != "precise" {
		t.Fatalf("mode %q", m)
	}
	// AllBlocksCleared empties it.
	r.Apply(&kvevents.Batch{Events: []kvevents.Event{{Kind: kvevents.AllBlocksCleared}}})
	if got := r.Match(p); got != 0 || r.PreciseStats().Blocks != 0 {
		t.Fatalf("after AllBlocksCleared: match %d, %d blocks", got, r.PreciseStats().Blocks)
	}
}

// TestPreciseRemovesSharedKeyOnce: two engine blocks with the same tokens and parent (an
// engine whose hash covers something layer0's does not, such as a cache salt) share a layer0
// key, which stays until both are removed.
func TestPreciseRemovesSharedKeyOnce(t *testing.T) {
	const B = 4
	r := newPrecise(t, B, 1024, nil)
	toks := seqTokens(1, B)
	r.Apply(&kvevents.Batch{Events: []kvevents.Event{stored([]kvevents.Hash{1}, nil, toks, B), stored([]kvevents.Hash{2}, nil, toks, B)}})
	r.Apply(&kvevents.Batch{Events: []kvevents.Event{{Kind: kvevents.BlockRemoved, Hashes: []kvevents.Hash{1}}}})
	if got := r.Match(promptOf(toks)); got != B {
		t.Fatalf("one of two copies removed: match %d, want %d", got, B)
	}
	r.Apply(&kvevents.Batch{Events: []kvevents.Event{{Kind: kvevents.BlockRemoved, Hashes: []kvevents.Hash{2}}}})
	if got := r.Match(promptOf(toks)); got != 0 {
		t.Fatalf("both removed: match %d", got)
	}
}

// TestPreciseBlockSizeDisagreement: events of another block size switch the replica to the
// approximate estimate, which has kept learning from the prompts served.
func TestPreciseBlockSizeDisagreement(t *testing.T) {
	r := newPrecise(t, 4, 1024, nil)
	toks := seqTokens(1, 16)
	r.RecordPrompt(promptOf(toks))
	if got := r.Match(promptOf(toks)); got != 0 {
		t.Fatalf("precise with no events: match %d, want 0", got)
	}
	r.Apply(&kvevents.Batch{Events: []kvevents.Event{stored(engineHashes(1, 1), nil, seqTokens(1, 16), 16)}})
	m, why := r.Mode()
	if m != "approximate" || why == "" {
		t.Fatalf("mode %q (%q) after a block of 16 on a replica of 4", m, why)
	}
	if got := r.Match(promptOf(toks)); got != 16 {
		t.Fatalf("approximate fallback: match %d, want 16", got)
	}
	if c, a := r.Precise(); !c || a {
		t.Fatalf("Precise() = %v, %v", c, a)
	}
}

// TestPreciseAgreement: prompts served whose first block the events show confirm the
// tokenization; prompts the events never show (the engine tokenizes otherwise) make the
// replica fall back.
func TestPreciseAgreement(t *testing.T) {
	const B = 4
	for _, agree := range []bool{true, false} {
		c := &clock{t: time.Unix(1000, 0)}
		r := newPrecise(t, B, 1024, c)
		for i := range 8 {
			toks := seqTokens(100*i, 2*B)
			r.RecordPrompt(promptOf(toks))
			evToks := toks
			if !agree {
				evToks = seqTokens(100*i+1, 2*B) // the engine saw other token ids
			}
			r.Apply(&kvevents.Batch{Events: []kvevents.Event{stored(engineHashes(kvevents.Hash(10*i), 2), nil, evToks, B)}})
			c.t = c.t.Add(400 * time.Millisecond)
		}
		c.t = c.t.Add(2 * time.Second)
		r.Apply(&kvevents.Batch{})
		m, why := r.Mode()
		if agree && m != "precise" || !agree && (m != "approximate" || why == "") {
			t.Errorf("agree=%v: mode %q (%q)", agree, m, why)
		}
	}
}

// TestPreciseNotConnected: without a connection the approximate estimate answers.
func TestPreciseNotConnected(t *testing.T) {
	r := newPrecise(t, 4, 1024, nil)
	r.SetConnected(false)
	toks := seqTokens(1, 8)
	r.RecordPrompt(promptOf(toks))
	if got := r.Match(promptOf(toks)); got != 8 {
		t.Fatalf("not connected: match %d, want the approximate 8", got)
	}
	if m, why := r.Mode(); m != "approximate" || why == "" {
		t.Fatalf("mode %q (%q)", m, why)
	}
}

// BenchmarkPreciseApplyStored: one BlockStored of 16 tokens chained on a known parent, and
// the BlockRemoved of an old block that made room for it, on an index of 10,000 blocks.
func BenchmarkPreciseApplyStored(b *testing.B) {
	const B, n = 16, 10000
	r := newPrecise(b, B, 2*n*B, nil)
	toks := seqTokens(1, B)
	root := kvevents.Hash(1)
	r.Apply(&kvevents.Batch{Events: []kvevents.Event{stored([]kvevents.Hash{root}, nil, toks, B)}})
	for i := range n {
		r.Apply(&kvevents.Batch{Events: []kvevents.Event{stored([]kvevents.Hash{kvevents.Hash(10 + i)}, &root, toks, B)}})
	}
	batch := kvevents.Batch{Events: []kvevents.Event{
		{Kind: kvevents.BlockRemoved, Hashes: make([]kvevents.Hash, 1)},
		stored(make([]kvevents.Hash, 1), &root, seqTokens(1, B), B),
	}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		batch.Events[0].Hashes[0] = kvevents.Hash(10 + i)
		batch.Events[1].Hashes[0] = kvevents.Hash(10 + n + i)
		batch.Events[1].Tokens[0] = uint32(i) // a new key each time
		r.Apply(&batch)
	}
}

// BenchmarkPreciseMatch: a 4,000-token prompt (250 blocks), all cached, looked up in a precise
// replica of 62,500 blocks (1 M tokens).
func BenchmarkPreciseMatch(b *testing.B) {
	const B, blocks = 16, 250
	r := newPrecise(b, B, 1<<20, nil)
	toks := seqTokens(1, blocks*B)
	hs := engineHashes(1, blocks)
	r.Apply(&kvevents.Batch{Events: []kvevents.Event{stored(hs, nil, toks, B)}})
	for i := range 62500 - blocks {
		r.Apply(&kvevents.Batch{Events: []kvevents.Event{stored([]kvevents.Hash{kvevents.Hash(1<<40 + i)}, nil, seqTokens(1_000_000+i*B, B), B)}})
	}
	p := promptOf(toks)
	if got := r.Match(p); got != blocks*B {
		b.Fatalf("match %d", got)
	}
	b.ReportAllocs()
	for b.Loop() {
		r.Match(p)
	}
}

// TestPreciseMemoryBound holds a precise replica of 1 M tokens (16-token blocks), full of
// events, under the bound the documentation states: the approximate index it keeps as its
// fallback and the record of whose requests put its blocks there, plus the map from the
// engine's hashes.
func TestPreciseMemoryBound(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap")
	}
	const B, bound = 16, 14 << 20
	_ = tokenizer.Default() // loaded once, not counted
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := newPrecise(t, B, 1_000_000, nil)
	ev := kvevents.Batch{Events: []kvevents.Event{stored(make([]kvevents.Hash, 64), nil, make([]uint32, 64*B), B)}}
	for i := 0; r.PreciseStats().Blocks < 1_000_000/B; i++ {
		for j := range ev.Events[0].Hashes {
			ev.Events[0].Hashes[j] = kvevents.Hash(i*64 + j)
		}
		ev.Events[0].Tokens[0] = uint32(i) // another prompt each time
		r.Apply(&ev)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(r)
	if got := after.HeapAlloc - before.HeapAlloc; got > bound {
		t.Fatalf("a precise replica of 1 M tokens takes %d bytes, over the %d bound", got, bound)
	} else {
		t.Logf("a precise replica of 1 M tokens takes %d bytes", got)
	}
}

// TestPredictionDrift: a precise replica whose predictions stop matching the engine's reports
// falls back by itself; an engine that never reports cached tokens is no evidence.
func TestPredictionDrift(t *testing.T) {
	r := NewReplica("r", fixedRenderer{}, 16, 16*64).EnablePrecise(PreciseOptions{})
	r.SetConnected(true)
	for range 2 * PredictionWindow {
		if r.Observe(32, 0) {
			t.Fatal("counted before the engine reported any cached tokens")
		}
	}
	for range PredictionWindow {
		r.Observe(32, 32)
	}
	if share, n := r.Agreement(); share != 1 || n != PredictionWindow {
		t.Fatalf("agreement %v over %d", share, n)
	}
	for range PredictionWindow/2 + 1 {
		r.Observe(64, 0)
	}
	if m, why := r.Mode(); m != "approximate" || !strings.Contains(why, "predictions drift: 31 of the last 64") {
		t.Fatalf("mode %s (%s)", m, why)
	}
}

type fixedRenderer struct{}

func (fixedRenderer) AppendRequest(dst []uint32, _ *llm.Request) []uint32 {
	return append(dst, 1, 2, 3)
}
