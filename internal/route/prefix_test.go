package route

import (
	"fmt"
	"testing"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/prefix"
)

// ids renders nothing: prompts here are token ids already.
type ids struct{}

func (ids) AppendRequest(dst []uint32, _ *llm.Request) []uint32 { return dst }

// promptOf returns a prompt of n tokens: group g's shared prefix of shared tokens, then a tail
// of its own.
func promptOf(g, shared, n int) *prefix.Prompt {
	toks := make([]uint32, n)
	for i := range toks {
		if i < shared {
			toks[i] = uint32(g<<20 | i)
		} else {
			toks[i] = uint32(1<<30 | n<<10 | i)
		}
	}
	p := new(prefix.Prompt)
	p.SetTokens(toks)
	return p
}

// indexed gives each replica an index entry of capacity tokens.
func indexed(rs []*Replica, capacity int) {
	for _, r := range rs {
		r.Prefix = prefix.NewReplica(r.Name, ids{}, 16, capacity)
	}
}

func busy(r *Replica, n int) {
	for range n {
		r.Begin()
	}
}

func TestPrefixPickerScoring(t *testing.T) {
	const n = 4000
	tests := []struct {
		name   string
		cached []int // tokens of the prompt recorded on each replica
		busy   []int // requests in flight on each
		want   int
		reason string
		load   float64 // LoadTokens; 0 for the default
	}{
		{"the replica holding the prompt", []int{0, n, 0}, []int{0, 0, 0}, 1, "cache", 0},
		{"the longest cached prefix", []int{1000, 3000, 2000}, []int{0, 0, 0}, 1, "cache", 0},
		{"nothing cached: least loaded", []int{0, 0, 0}, []int{3, 1, 2}, 1, "load", 0},
		// Cached 4000 with 3 in flight costs 0+384; uncached idle costs 4000.
		{"cache outweighs some load", []int{0, n, 0}, []int{0, 3, 0}, 1, "cache", 0},
		// 2 in flight on the cached one, 0 elsewhere: 256 against 4000.
		{"ties and near ties", []int{n, n, 0}, []int{2, 1, 0}, 1, "cache", 0},
		// With load cheap against prefill, the cached replica stays cheapest at 9 in flight
		// against 0 (900 against 2100 and 4000); above 2×0+4 in flight, the guard spreads the
		// request to the cheapest other one.
		{"hot prefix spreads", []int{0, n, 2000}, []int{0, 9, 1}, 2, "spread", 100},
		{"below the guard it stays", []int{0, n, 2000}, []int{1, 5, 1}, 1, "cache", 100},
		// Short prompt, loaded cached replica: load wins on cost alone (40+384 against 200).
		{"load outweighs a small saving", []int{0, 160, 0}, []int{1, 3, 0}, 2, "load", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			rs := replicas(clk, Policy{}, "a", "b", "c")
			indexed(rs, 1<<16)
			size := n
			if tt.name == "load outweighs a small saving" {
				size = 200
			}
			p := promptOf(1, size, size)
			for i, c := range tt.cached {
				if c > 0 {
					rs[i].Prefix.Cache().Insert(p.Keys(16)[:c/16])
				}
				busy(rs[i], tt.busy[i])
			}
			var d Decision
			got := (&Prefix{LoadTokens: tt.load}).PickPrompt(rs, p, &d)
			if got != tt.want || d.Reason != tt.reason || d.Chosen != got {
				t.Fatalf("picked %d (%s), want %d (%s); decision %+v", got, d.Reason, tt.want, tt.reason, d)
			}
			if d.Picker != "prefix" || d.N != 3 || d.PromptTokens != size {
				t.Fatalf("decision %+v", d)
			}
			for i, c := range d.Candidates[:d.N] {
				if c.Replica != rs[i].Name || c.Cached != tt.cached[i]/16*16 || c.Outstanding != int64(tt.busy[i]) {
					t.Errorf("candidate %d: %+v", i, c)
				}
			}
		})
	}
}

func TestPrefixPickerInPlan(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{}, "a", "b", "c", "d")
	indexed(rs, 1<<16)
	tb := newTable(t, Config{Models: []Model{{Name: "m", Replicas: rs}}, Picker: &Prefix{}, Now: clk.Now})
	p := promptOf(7, 2000, 2100)
	rs[2].Prefix.RecordPrompt(p)

	plan, err := tb.Plan("m", "", len(p.Tokens))
	if err != nil {
		t.Fatal(err)
	}
	var d Decision
	plan.SetPrompt(p, &d)
	a, err := plan.Next()
	if err != nil {
		t.Fatal(err)
	}
	if a.Replica != rs[2] || d.Reason != "cache" || d.Candidates[2].Cached != 2096 {
		t.Fatalf("picked %s, decision %+v", a.Replica.Name, d)
	}
	// A retry after a failure weighs the others.
	plan.Report(errOverloaded, 0)
	if a, err = plan.Next(); err != nil || a.Replica == rs[2] || d.N != 3 {
		t.Fatalf("retry: %v %v, decision %+v", a.Replica, err, d)
	}
	plan.Report(nil, 0)

	// Without a prompt the fallback picks, and nothing is decided.
	plan, _ = tb.Plan("m", "", 0)
	d = Decision{}
	if _, err := plan.Next(); err != nil || d.Picker != "" {
		t.Fatalf("no prompt: %v, decision %+v", err, d)
	}
	plan.Report(nil, 0)
}

// TestPrefixPickerGroups routes groups of users sharing long prefixes over 4 replicas whose
// caches cannot each hold every group, and checks that the prefix picker finds far more of the
// prompts cached than P2C does, and that a hot group does not take one replica.
func TestPrefixPickerGroups(t *testing.T) {
	share := func(pick func(rs []*Replica, p *prefix.Prompt) int) (float64, []int) {
		clk := newClock()
		rs := replicas(clk, Policy{}, "a", "b", "c", "d")
		indexed(rs, 3*2048+512) // three groups' prefixes of 2048 tokens, and some room
		var cached, total int
		counts := make([]int, len(rs))
		for i := range 2000 {
			g := i % 8
			p := promptOf(g, 2048, 2048+64+i%5*16)
			k := pick(rs, p)
			cached += rs[k].Prefix.Match(p)
			total += len(p.Tokens)
			rs[k].Prefix.RecordPrompt(p)
			counts[k]++
		}
		return float64(cached) / float64(total), counts
	}
	pp := &Prefix{}
	prefixShare, counts := share(func(rs []*Replica, p *prefix.Prompt) int {
		var d Decision
		return pp.PickPrompt(rs, p, &d)
	})
	p2cShare, _ := share(func(rs []*Replica, _ *prefix.Prompt) int { return P2C{}.Pick(rs) })
	t.Logf("cached share: prefix %.3f (requests per replica %v), p2c %.3f", prefixShare, counts, p2cShare)
	if prefixShare < 0.9 || prefixShare < p2cShare+0.3 {
		t.Errorf("prefix picker cached share %.3f, p2c %.3f", prefixShare, p2cShare)
	}
	for _, c := range counts { // two groups of eight each
		if c != 2000/4 {
			t.Errorf("requests per replica %v", counts)
		}
	}
}

// pickBenchPool returns the pool of the picking benchmarks: 8 replicas of 1 M tokens each, full
// of other prompts, replica i holding (i+1)/8 of the first 4,000 tokens of the prompt returned.
func pickBenchPool() ([]*Replica, *prefix.Prompt) {
	clk := newClock()
	names := make([]string, 8)
	for i := range names {
		names[i] = fmt.Sprint("r", i)
	}
	rs := replicas(clk, Policy{}, names...)
	indexed(rs, 1<<20)
	p := promptOf(3, 4000, 4000)
	for i, r := range rs {
		for j := 0; r.Prefix.Cache().Len() < r.Prefix.Cache().Capacity()-250; j++ {
			r.Prefix.RecordPrompt(promptOf(100+i*1000+j, 1024, 1024))
		}
		r.Prefix.Cache().Insert(p.Keys(16)[:250*(i+1)/8])
	}
	return rs, p
}

// BenchmarkPrefixPick is the picking cost for a 4,000-token prompt over 8 replicas of 1 M
// tokens each, its blocks hashed each time (tokenization excluded).
func BenchmarkPrefixPick(b *testing.B) {
	rs, p := pickBenchPool()
	toks := append([]uint32(nil), p.Tokens...)
	pp := &Prefix{}
	var d Decision
	b.ReportAllocs()
	for b.Loop() {
		p.SetTokens(toks)
		if pp.PickPrompt(rs, p, &d) != 7 {
			b.Fatal("wrong pick")
		}
	}
}

// TestPickerPerModel gives one model the prefix picker and leaves the other the table's: only
// the first decides on the prompt.
func TestPickerPerModel(t *testing.T) {
	clk := newClock()
	pool := replicas(clk, Policy{}, "a", "b")
	indexed(pool, 1<<16)
	solo := replicas(clk, Policy{}, "s")
	tb := newTable(t, Config{Models: []Model{{Name: "pool", Replicas: pool, Picker: &Prefix{}}, {Name: "solo", Replicas: solo}},
		Now: clk.Now})
	p := promptOf(1, 512, 600)
	for _, tc := range []struct{ model, picker string }{{"pool", "prefix"}, {"solo", ""}} {
		plan, err := tb.Plan(tc.model, "", len(p.Tokens))
		if err != nil {
			t.Fatal(err)
		}
		var d Decision
		plan.SetPrompt(p, &d)
		if _, err := plan.Next(); err != nil {
			t.Fatal(err)
		}
		plan.Report(nil, 0)
		if d.Picker != tc.picker {
			t.Errorf("%s: decided by %q, want %q", tc.model, d.Picker, tc.picker)
		}
	}
}

// TestPrefixDecisionSkipped checks that the decision lists the model's replicas the picker did
// not weigh, and why: down, ejected, tried already. A replica above the utilisation threshold
// is weighed, with its utilisation, while another is below it.
func TestPrefixDecisionSkipped(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{Ejection: Ejection{ConsecutiveFailures: 1}}, "a", "b", "c", "d", "e")
	indexed(rs, 1<<16)
	tb := newTable(t, Config{Models: []Model{{Name: "m", Replicas: rs}}, Picker: &Prefix{}, Now: clk.Now})
	rs[0].down.Store(true)
	rs[1].Begin()
	rs[1].Report(errServer, 0) // ejected
	rs[2].SetUtilization(0.99)
	p := promptOf(3, 1024, 1100)
	rs[3].Prefix.RecordPrompt(p)

	plan, err := tb.Plan("m", "", len(p.Tokens))
	if err != nil {
		t.Fatal(err)
	}
	var d Decision
	plan.SetPrompt(p, &d)
	a, err := plan.Next()
	if err != nil || a.Replica != rs[3] {
		t.Fatalf("picked %v (%v), want d", a.Replica, err)
	}
	want := []Skip{{"a", SkipDown}, {"b", SkipEjected}}
	if got := d.Skipped[:d.NSkipped]; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("skipped %v, want %v", got, want)
	}
	if c := d.Candidates[0]; d.N != 3 || c.Replica != "c" || c.Utilization != 0.99 {
		t.Errorf("candidates %+v, want c (utilization 0.99), d, e", d.Candidates[:d.N])
	}
	plan.Report(errOverloaded, 0)
	if a, err = plan.Next(); err != nil || a.Replica != rs[4] {
		t.Fatalf("retry picked %v (%v), want e", a.Replica, err)
	}
	plan.Report(nil, 0)
	want = []Skip{{"a", SkipDown}, {"b", SkipEjected}, {"d", SkipTried}}
	if got := d.Skipped[:d.NSkipped]; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("retry skipped %v, want %v", got, want)
	}
}
