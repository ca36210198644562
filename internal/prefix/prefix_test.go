package prefix

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/tokenizer"
)

func seq(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

func TestAppendKeysChained(t *testing.T) {
	toks := seq(1000, 100) // 6 full blocks of 16 and 4 tokens left over
	base := AppendKeys(nil, toks, 16)
	if len(base) != 6 {
		t.Fatalf("%d keys, want 6 (a partial block has none)", len(base))
	}
	seen := map[uint64]bool{}
	for _, k := range base {
		if seen[k] {
			t.Fatalf("duplicate key %x", k)
		}
		seen[k] = true
	}
	// A change in any token changes the key of its block and of every later block, and no
	// earlier one.
	for _, at := range []int{0, 15, 16, 40, 95} {
		changed := append([]uint32(nil), toks...)
		changed[at]++
		keys := AppendKeys(nil, changed, 16)
		for b := range keys {
			if same := keys[b] == base[b]; same != (b < at/16) {
				t.Errorf("token %d changed: block %d key same=%v, want %v", at, b, same, b < at/16)
			}
		}
	}
	// The trailing partial block does not count.
	changed := append([]uint32(nil), toks...)
	changed[99]++
	if keys := AppendKeys(nil, changed, 16); fmt.Sprint(keys) != fmt.Sprint(base) {
		t.Error("a change in the partial block changed a key")
	}
	// The same tokens in another block size are other keys.
	if k8 := AppendKeys(nil, toks, 8); k8[1] == base[0] {
		t.Error("block sizes 8 and 16 share a key")
	}
	// Equal prefixes, equal keys: a longer prompt extends the shorter one's keys.
	long := AppendKeys(nil, append(append([]uint32(nil), toks[:96]...), seq(7, 64)...), 16)
	if fmt.Sprint(long[:6]) != fmt.Sprint(base) || len(long) != 10 {
		t.Error("a prompt that extends another does not extend its keys")
	}
}

func keys(ids ...uint64) []uint64 { return ids }

func TestCacheLRU(t *testing.T) {
	type step struct {
		insert []uint64
		match  []uint64
		want   int
	}
	tests := []struct {
		name     string
		capacity int
		steps    []step
		size     int
	}{
		{"repeat", 8, []step{{keys(1, 2, 3), keys(1, 2, 3), 3}, {nil, keys(1, 2, 4), 2}, {nil, keys(9), 0}}, 3},
		{"extend", 8, []step{{keys(1, 2), keys(1, 2, 3, 4), 2}, {keys(1, 2, 3, 4), keys(1, 2, 3, 4, 5), 4}}, 4},
		{"diverge", 8, []step{{keys(1, 2, 3), nil, 0}, {keys(1, 9, 10), keys(1, 2, 3), 3}}, 5},
		// 1 2 3 4 are cached with 1 most recent; 5 6 evict the least recent, 4 then 3.
		{"evicts a prefix from its end", 4, []step{{keys(1, 2, 3, 4), nil, 0}, {keys(5, 6), keys(1, 2, 3, 4), 2}, {nil, keys(5, 6), 2}}, 4},
		// Touching 1 2 makes 5 6 the oldest.
		{"least recently used goes first", 4, []step{{keys(1, 2), nil, 0}, {keys(5, 6), nil, 0}, {keys(1, 2), nil, 0},
			{keys(7, 8), keys(1, 2), 2}, {nil, keys(5), 0}, {nil, keys(7, 8), 2}}, 4},
		// A prompt longer than the cache keeps its first capacity blocks.
		{"longer than the cache", 3, []step{{keys(1, 2, 3, 4, 5), keys(1, 2, 3, 4, 5), 3}}, 3},
		{"matching does not refresh", 2, []step{{keys(1), nil, 0}, {keys(2), keys(1), 1}, {keys(3), keys(1), 0}, {nil, keys(2), 1}}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCache(tt.capacity)
			for i, s := range tt.steps {
				c.Insert(s.insert)
				if got := c.Match(s.match); got != s.want {
					t.Errorf("step %d: Match(%v) = %d, want %d", i, s.match, got, s.want)
				}
			}
			if c.Len() != tt.size {
				t.Errorf("Len = %d, want %d", c.Len(), tt.size)
			}
		})
	}
	var nilCache *Cache
	nilCache.Insert(keys(1))
	if nilCache.Match(keys(1)) != 0 || nilCache.Len() != 0 || NewCache(0) != nil {
		t.Error("a nil cache holds something")
	}
}

// TestCacheBisection checks the invariant Match's bisection rests on: under any mix of
// prompts sharing prefixes and evictions, the cached keys of a chain are a prefix of it, so
// bisection finds what a scan from the start finds.
func TestCacheBisection(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := NewCache(200)
	// 30 "documents" of 40 blocks; prompts are random prefixes of them, some extended.
	docs := make([][]uint64, 30)
	for i := range docs {
		docs[i] = AppendKeys(nil, seq(i*100000, 40*16), 16)
	}
	for step := range 5000 {
		d := docs[rng.IntN(len(docs))]
		n := 1 + rng.IntN(len(d))
		if rng.IntN(3) > 0 {
			c.Insert(d[:n])
		}
		probe := docs[rng.IntN(len(docs))]
		scan := 0
		for _, k := range probe {
			if _, ok := c.index[k]; !ok {
				break
			}
			scan++
		}
		if got := c.Match(probe); got != scan {
			t.Fatalf("step %d: Match = %d, a scan finds %d", step, got, scan)
		}
		for i := scan; i < len(probe); i++ { // nothing after the first miss
			if _, ok := c.index[probe[i]]; ok {
				t.Fatalf("step %d: block %d cached after a miss at %d", step, i, scan)
			}
		}
	}
	if c.Len() != 200 || len(c.slots) != 200 {
		t.Fatalf("Len %d, slots %d: want the capacity, 200", c.Len(), len(c.slots))
	}
	c.Reset()
	if c.Len() != 0 || c.Match(docs[0]) != 0 {
		t.Fatal("Reset kept keys")
	}
}

func request(system, user string) *llm.Request {
	return &llm.Request{
		System:   []llm.Block{{Type: llm.BlockText, Text: system}},
		Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: user}}}},
	}
}

func TestIndexLookup(t *testing.T) {
	tok := tokenizer.Default()
	sys := strings.Repeat("You are a careful assistant who answers in full sentences. ", 40)
	a := NewReplica("a", tok, 16, 1<<16)
	b := NewReplica("b", tok, 16, 1<<16)
	if NewReplica("none", tok, 16, 15) != nil {
		t.Fatal("a replica of less than one block is indexed")
	}
	x := NewIndex(tok, map[string][]*Replica{"m": {a, nil, b}, "empty": {nil}})
	if len(x.Replicas("m")) != 2 || x.Replicas("empty") != nil {
		t.Fatal("nil replicas kept")
	}
	first := request(sys, "What is the capital of France?")
	if m := x.Lookup("m", first); m.Hit() || m.Replica != -1 || m.PromptTokens != tok.CountRequest(first) {
		t.Fatalf("empty index: %+v", m)
	}
	b.Record(first)
	m := x.Lookup("m", first)
	n := tok.CountRequest(first)
	if !m.Hit() || m.Name != "b" || m.Replica != 1 || m.CachedTokens != n/16*16 || m.PromptTokens != n {
		t.Fatalf("after b served it: %+v (prompt %d tokens)", m, n)
	}
	// Another question under the same system prompt shares the system prompt's blocks.
	second := request(sys, "And what is the capital of Italy?")
	m = x.Lookup("m", second)
	sysTokens := tok.CountRequest(&llm.Request{System: first.System}) - 3 // without the reply's opening
	if m.CachedTokens < sysTokens-16 || m.CachedTokens > sysTokens+16 {
		t.Fatalf("shared system prompt of %d tokens: %d cached", sysTokens, m.CachedTokens)
	}
	if r := m.Ratio(); r <= 0.5 || r >= 1 {
		t.Fatalf("ratio %v", r)
	}
	// A different system prompt shares nothing.
	if m := x.Lookup("m", request("Be brief.", "What is the capital of France?")); m.Hit() {
		t.Fatalf("unrelated prompt: %+v", m)
	}
	// Replicas report their own.
	p := GetPrompt()
	defer PutPrompt(p)
	p.Render(tok, first)
	cached := make([]int, 2)
	if m := Best(p, []*Replica{a, b}, cached); cached[0] != 0 || cached[1] != m.CachedTokens || m.Replica != 1 {
		t.Fatalf("Best: %+v, per replica %v", m, cached)
	}
	if x.Lookup("unknown", first).Hit() {
		t.Fatal("a name without replicas matched")
	}
}

// A tenant's lookup counts only what its own requests left in a replica: a prompt another tenant
// sent is not cached for it, however much of it the replica holds, and the part of it the tenant
// sent itself is.
func TestIndexLookupOwn(t *testing.T) {
	tok := tokenizer.Default()
	sys := strings.Repeat("The vault's PIN is 4821. Never tell anyone. ", 20)
	a := NewReplica("a", tok, 16, 1<<16)
	x := NewIndex(tok, map[string][]*Replica{"m": {a}})
	secret := request(sys, "Hello")
	p := GetPrompt()
	defer PutPrompt(p)
	p.Render(tok, secret)
	a.RecordFor(p, "alice")
	n := tok.CountRequest(secret) / 16 * 16
	if m := x.Lookup("m", secret); m.CachedTokens != n {
		t.Fatalf("everyone's lookup: %d cached, want %d", m.CachedTokens, n)
	}
	if m := x.LookupOwn("m", "alice", secret); m.CachedTokens != n || m.Name != "a" {
		t.Fatalf("alice's own lookup: %+v, want %d cached on a", m, n)
	}
	for _, guess := range []string{"4821", "1234"} {
		probe := request(strings.ReplaceAll(sys, "4821", guess), "Hello")
		if m := x.LookupOwn("m", "bob", probe); m.Hit() || m.Replica != -1 {
			t.Errorf("bob guessing %s: %+v, want nothing cached", guess, m)
		}
	}
	// What bob sent himself is his: the shared opening of alice's prompt counts for him only as
	// far as his own prompt went.
	mine := request(sys[:len(sys)/2], "Hello")
	p.Render(tok, mine)
	a.RecordFor(p, "bob")
	own := x.LookupOwn("m", "bob", mine)
	if want := tok.CountRequest(mine) / 16 * 16; own.CachedTokens != want {
		t.Errorf("bob's own prompt: %d cached, want %d", own.CachedTokens, want)
	}
	if m := x.LookupOwn("m", "bob", secret); m.CachedTokens >= n || m.CachedTokens > own.CachedTokens {
		t.Errorf("bob asking for alice's prompt: %d cached, more than his own %d", m.CachedTokens, own.CachedTokens)
	}
}

// TestConcurrent records and looks up from many goroutines at once; run with -race.
func TestConcurrent(t *testing.T) {
	tok := tokenizer.Default()
	reps := []*Replica{NewReplica("a", tok, 16, 4096), NewReplica("b", tok, 16, 4096)}
	x := NewIndex(tok, map[string][]*Replica{"m": reps})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				req := request(strings.Repeat(fmt.Sprintf("group %d rules. ", g%3), 50), fmt.Sprint("question ", i%7))
				reps[(g+i)%2].Record(req)
				if m := x.Lookup("m", req); m.CachedTokens > m.PromptTokens {
					t.Errorf("cached %d of %d", m.CachedTokens, m.PromptTokens)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, r := range reps {
		if r.Cache().Len() == 0 || r.Cache().Len() > r.Cache().Capacity() {
			t.Errorf("%s holds %d of %d blocks", r.Name(), r.Cache().Len(), r.Cache().Capacity())
		}
	}
}

// heapAfterFill returns the heap bytes one cache of capacity tokens takes once full.
func heapAfterFill(tokens, block int) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c := NewCache(tokens / block)
	ks := make([]uint64, 0, 64)
	for i := 0; c.Len() < c.Capacity(); i++ {
		ks = ks[:0]
		for j := range 64 {
			ks = append(ks, Mix(uint64(i*64+j)))
		}
		c.Insert(ks)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(c)
	return after.HeapAlloc - before.HeapAlloc
}

// TestMemoryBound holds the index's memory per 1 M cached tokens (16-token blocks) under the
// bound the documentation states.
func TestMemoryBound(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap")
	}
	const bound = 4 << 20
	if got := heapAfterFill(1_000_000, 16); got > bound {
		t.Fatalf("1 M cached tokens take %d bytes, over the %d bound", got, bound)
	}
}

// BenchmarkMemory reports the heap bytes of 1 M cached tokens in 16-token blocks.
func BenchmarkMemory(b *testing.B) {
	var bytes uint64
	for b.Loop() {
		bytes = heapAfterFill(1_000_000, 16)
	}
	b.ReportMetric(float64(bytes), "bytes/1Mtokens")
	b.ReportMetric(float64(bytes)/(1_000_000/16), "bytes/block")
}

// benchPrompt is a 4,000-token prompt.
func benchPrompt(tb testing.TB) *llm.Request {
	tok := tokenizer.Default()
	var sb strings.Builder
	for i := 0; tok.CountRequest(request(sb.String(), "Summarise the above.")) < 4000; i++ {
		fmt.Fprintf(&sb, "Section %d. The gateway keeps an estimate of each replica's prefix cache. ", i)
	}
	req := request(sb.String(), "Summarise the above.")
	if n := tok.CountRequest(req); n < 4000 || n > 4030 {
		tb.Fatalf("prompt of %d tokens", n)
	}
	return req
}

// eightReplicas returns 8 replicas of 1 M tokens each, full of other prompts, the prompt
// cached in full on one and in part on the others.
func eightReplicas(req *llm.Request) []*Replica {
	tok := tokenizer.Default()
	p := GetPrompt()
	p.Render(tok, req)
	full := p.Keys(16)
	reps := make([]*Replica, 8)
	for i := range reps {
		reps[i] = NewReplica(fmt.Sprint("r", i), tok, 16, 1<<20)
		c := reps[i].Cache()
		for j := 0; c.Len() < c.Capacity()-len(full); j++ {
			c.Insert(AppendKeys(nil, seq(i<<24|j<<12, 64*16), 16))
		}
		c.Insert(full[:len(full)*(i+1)/8])
	}
	return reps
}

// BenchmarkLookup is the cost of finding the best of 8 replicas for a 4,000-token prompt
// already tokenized: keys hashed once, then matched on each replica.
func BenchmarkLookup(b *testing.B) {
	req := benchPrompt(b)
	reps := eightReplicas(req)
	p := GetPrompt()
	p.Render(tokenizer.Default(), req)
	toks := append([]uint32(nil), p.Tokens...)
	cached := make([]int, len(reps))
	b.ReportAllocs()
	for b.Loop() {
		p.SetTokens(toks) // forgets the keys: they are hashed again each time
		if m := Best(p, reps, cached); m.Replica != 7 {
			b.Fatalf("best %+v", m)
		}
	}
}

// BenchmarkTokenize is the cost of rendering and tokenizing the same 4,000-token prompt,
// which Lookup adds to BenchmarkLookup when it has not been tokenized already.
func BenchmarkTokenize(b *testing.B) {
	req := benchPrompt(b)
	tok := tokenizer.Default()
	p := GetPrompt()
	b.ReportAllocs()
	for b.Loop() {
		p.Render(tok, req)
	}
}

// BenchmarkCount is counting the same prompt's tokens without producing them, as the
// pipeline does for a model without an index.
func BenchmarkCount(b *testing.B) {
	req := benchPrompt(b)
	tok := tokenizer.Default()
	b.ReportAllocs()
	for b.Loop() {
		tok.CountRequest(req)
	}
}

// BenchmarkRecord is what recording a served 4,000-token prompt costs: render, tokenize, hash
// and insert.
func BenchmarkRecord(b *testing.B) {
	req := benchPrompt(b)
	r := eightReplicas(req)[3]
	b.ReportAllocs()
	for b.Loop() {
		r.Record(req)
	}
}

// BenchmarkRecordPrompt is what the pipeline adds to a request whose 4,000-token prompt it
// rendered for the count: hashing the blocks and inserting them.
func BenchmarkRecordPrompt(b *testing.B) {
	req := benchPrompt(b)
	r := eightReplicas(req)[3]
	p := GetPrompt()
	p.Render(tokenizer.Default(), req)
	toks := append([]uint32(nil), p.Tokens...)
	b.ReportAllocs()
	for b.Loop() {
		p.SetTokens(toks)
		r.RecordPrompt(p)
	}
}

// TestGroupKey: a prompt's group key names its leading blocks, up to the tokens asked for, and
// its tenant scope: prompts that differ only after those blocks share it, other scopes do not.
func TestGroupKey(t *testing.T) {
	tok := tokenizer.Default()
	r := NewReplica("a", tok, 16, 1<<16)
	key := func(toks []uint32, scope string, max int) (uint64, bool) {
		p := new(Prompt)
		p.SetTokens(toks)
		p.SetScope(context.Background(), scope)
		return r.GroupKey(p, max)
	}
	long := append(seq(0, 256), seq(5000, 100)...)
	other := append(seq(0, 256), seq(9000, 100)...)
	a, ok := key(long, "", 256)
	b, _ := key(other, "", 256)
	if !ok || a != b {
		t.Fatalf("prompts sharing 256 tokens: keys %x and %x (ok %v), want one", a, b, ok)
	}
	if c, _ := key(other, "", 300); c == a {
		t.Errorf("keys over 300 tokens of prompts differing from token 256 are equal")
	}
	if c, _ := key(long, "alice", 256); c == a {
		t.Errorf("alice's scope does not change the key")
	}
	c, _ := key(long, "alice", 256)
	if d, _ := key(long, "bob", 256); d == c {
		t.Errorf("alice's and bob's keys are equal")
	}
	if d, _ := key(long, "alice", 256); d != c {
		t.Errorf("alice's key changes between prompts")
	}
	if _, ok := key(seq(0, 15), "", 256); ok {
		t.Errorf("a prompt shorter than a block has a key")
	}
	if k, ok := key(long, "", 1); !ok || k != AppendKeys(nil, long, 16)[0] {
		t.Errorf("fewer tokens than a block asked for: want the first block's key")
	}
}
