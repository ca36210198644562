package route

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/config"
)

// inFlight is a closed loop of requests over replicas: at most c at once, the oldest finishing
// first.
type inFlight struct{ q []*Replica }

// admit makes room for one more request under a bound of c in flight.
func (f *inFlight) admit(c int) {
	for len(f.q) >= c {
		f.q[0].Report(nil, time.Millisecond)
		f.q = f.q[1:]
	}
}

func (f *inFlight) begin(r *Replica) {
	r.Begin()
	f.q = append(f.q, r)
}

// TestPrefixSpreadGrowsAndShrinks: a prefix with twelve requests in flight at once keeps its
// replica over the guard; its set grows to two replicas, then three, which share its requests by
// load, the reason saying so; when its demand drops to one request at a time the set shrinks
// back to one replica and the prefix is no longer tracked.
func TestPrefixSpreadGrowsAndShrinks(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{}, "a", "b", "c", "d")
	indexed(rs, 1<<16)
	p := promptOf(1, 2000, 2100)
	rs[0].Prefix.RecordPrompt(p)
	pk := &Prefix{Spread: Spread{Window: 8, Now: clk.Now}}

	var f inFlight
	firstAt := map[int]int{} // set size → the first pick that reported it
	var d Decision
	count := map[string]int{}
	const hotPicks = 400
	for i := range hotPicks {
		f.admit(12)
		r := rs[pk.PickPrompt(rs, p, &d)]
		if _, ok := firstAt[d.Spread]; !ok {
			firstAt[d.Spread] = i
		}
		if d.Spread > 0 && d.Reason != "hot" && d.Reason != "spread" {
			t.Fatalf("pick %d: spread over %d with reason %q", i, d.Spread, d.Reason)
		}
		if i >= hotPicks-120 {
			if d.Reason != "hot" || d.Spread != 3 {
				t.Fatalf("pick %d, under sustained demand: reason %q, spread %d; want hot over 3", i, d.Reason, d.Spread)
			}
			count[r.Name]++
		}
		r.Prefix.RecordPrompt(p)
		f.begin(r)
	}
	two, ok2 := firstAt[2]
	three, ok3 := firstAt[3]
	if !ok2 || !ok3 || two >= three {
		t.Fatalf("set sizes first seen at %v: want 2, then 3", firstAt)
	}
	// Shared by load: three members, each with about a third of the last picks.
	if len(count) != 3 {
		t.Fatalf("the last 120 picks went to %v, want three replicas", count)
	}
	for name, n := range count {
		if n < 30 || n > 50 {
			t.Errorf("replica %s took %d of the last 120 picks (all %v), want about 40", name, n, count)
		}
	}
	if pk.hot.Len() != 1 {
		t.Errorf("%d prefixes tracked, want 1", pk.hot.Len())
	}

	// Demand cools: one request at a time. The set shrinks to two, then one; then the prefix is
	// forgotten.
	sizes := []int{3}
	for i := 0; i < 200 && pk.hot.Len() > 0; i++ {
		f.admit(1)
		r := rs[pk.PickPrompt(rs, p, &d)]
		if d.Spread != sizes[len(sizes)-1] {
			sizes = append(sizes, d.Spread)
		}
		f.begin(r)
	}
	if len(sizes) != 3 || sizes[1] != 2 || sizes[2] != 0 || pk.hot.Len() != 0 {
		t.Fatalf("cooling, the set's sizes went %v with %d prefixes tracked; want 3, 2, 0 and none", sizes, pk.hot.Len())
	}
	if d.Reason != "cache" {
		t.Errorf("cooled prefix picked for %q, want cache", d.Reason)
	}
}

// TestPrefixSpreadTenants: a tenant's hot prefix spreads for its own requests only; another
// tenant's identical prompt keeps to the cost's choice, unless both share one scope (a model
// that shares its cached state across keys).
func TestPrefixSpreadTenants(t *testing.T) {
	for _, tt := range []struct {
		name         string
		hot, other   string // the scopes of the hot tenant's and the other's prompts
		wantOtherSet int
	}{
		{"separate keys", "team-a", "team-b", 0},
		{"shared across keys", "", "", 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			rs := replicas(clk, Policy{}, "a", "b", "c", "d")
			indexed(rs, 1<<16)
			hot, other := promptOf(1, 2000, 2100), promptOf(1, 2000, 2100)
			hot.SetScope(context.Background(), tt.hot)
			other.SetScope(context.Background(), tt.other)
			rs[0].Prefix.RecordPrompt(hot)
			pk := &Prefix{Spread: Spread{Window: 8, Now: clk.Now}}
			var f inFlight
			var d Decision
			for range 200 {
				f.admit(12)
				r := rs[pk.PickPrompt(rs, hot, &d)]
				r.Prefix.RecordPrompt(hot)
				f.begin(r)
			}
			if d.Spread != 3 {
				t.Fatalf("the hot tenant's prefix is spread over %d, want 3", d.Spread)
			}
			f.admit(1) // quiet: no replica over the guard
			pk.PickPrompt(rs, other, &d)
			if d.Spread != tt.wantOtherSet {
				t.Errorf("the other tenant's request: reason %q, spread %d; want spread %d", d.Reason, d.Spread, tt.wantOtherSet)
			}
			pk.PickPrompt(rs, hot, &d)
			if d.Spread != 3 || d.Reason != "hot" {
				t.Errorf("the hot tenant's own request: reason %q, spread %d; want hot over 3", d.Reason, d.Spread)
			}
		})
	}
}

// TestPrefixSpreadBounded: however many prefixes go over the guard, at most MaxPrefixes are
// tracked; a prefix idle for longer than Idle starts over with one replica.
func TestPrefixSpreadBounded(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{}, "a", "b", "c")
	indexed(rs, 1<<20)
	busy(rs[0], 9) // the replica holding every prefix is over the guard
	pk := &Prefix{Spread: Spread{MaxPrefixes: 32, Window: 1, Now: clk.Now}}
	var d Decision
	for g := range 500 {
		p := promptOf(g, 3000, 3100)
		rs[0].Prefix.RecordPrompt(p)
		pk.PickPrompt(rs, p, &d)
		if d.Spread != 2 || d.Reason != "hot" {
			t.Fatalf("prefix %d over the guard with a window of one request: reason %q, spread %d; want hot over 2", g, d.Reason, d.Spread)
		}
	}
	if n := pk.hot.Len(); n == 0 || n > 32 {
		t.Fatalf("%d prefixes tracked, want 1 to 32", n)
	}

	p := promptOf(499, 3000, 3100)
	clk.Advance(2 * config.DefaultSpreadIdle)
	pk.PickPrompt(rs, p, &d)
	if d.Spread != 2 {
		t.Fatalf("after an idle spell: spread %d, want 2 (started over, hot again at once)", d.Spread)
	}
}

// TestPrefixSpreadOff: with MaxReplicas 1 nothing is tracked; the guard alone moves a request.
func TestPrefixSpreadOff(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{}, "a", "b", "c")
	indexed(rs, 1<<16)
	p := promptOf(1, 2000, 2100)
	rs[0].Prefix.RecordPrompt(p)
	busy(rs[0], 9)
	pk := &Prefix{Spread: Spread{MaxReplicas: 1, Window: 1}}
	var d Decision
	for range 10 {
		pk.PickPrompt(rs, p, &d)
		if d.Reason != "spread" || d.Spread != 0 {
			t.Fatalf("reason %q, spread %d; want spread by the guard alone", d.Reason, d.Spread)
		}
	}
	if pk.hot.Len() != 0 {
		t.Errorf("%d prefixes tracked with spreading off", pk.hot.Len())
	}
}

// TestPrefixSpreadNoAlloc: picking for a hot prefix allocates nothing.
func TestPrefixSpreadNoAlloc(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{}, "a", "b", "c", "d")
	indexed(rs, 1<<16)
	p := promptOf(1, 2000, 2100)
	rs[0].Prefix.RecordPrompt(p)
	busy(rs[0], 9)
	pk := &Prefix{Spread: Spread{Window: 1, Now: clk.Now}}
	var d Decision
	pk.PickPrompt(rs, p, &d) // the sets are allocated on the first pick
	if allocs := testing.AllocsPerRun(100, func() { pk.PickPrompt(rs, p, &d) }); allocs != 0 {
		t.Errorf("%v allocations per pick", allocs)
	}
	if d.Spread < 2 {
		t.Errorf("spread %d, want the prefix spread", d.Spread)
	}
}

// TestPrefixSpreadConcurrent: picks of hot prefixes from many goroutines at once keep every set
// within its bounds (run with -race).
func TestPrefixSpreadConcurrent(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{}, "a", "b", "c", "d")
	indexed(rs, 1<<18)
	busy(rs[0], 9)
	pk := &Prefix{Spread: Spread{Window: 2, MaxPrefixes: 16, Now: clk.Now}}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var d Decision
			for i := range 200 {
				p := promptOf(w*1000+i%40, 2000, 2100)
				r := rs[pk.PickPrompt(rs, p, &d)]
				if d.Spread > 3 {
					t.Errorf("spread over %d, more than 3", d.Spread)
					return
				}
				r.Prefix.RecordPrompt(p)
				r.Begin()
				r.Report(nil, time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if n := pk.hot.Len(); n > 16 {
		t.Errorf("%d prefixes tracked, more than 16", n)
	}
}

// BenchmarkPrefixPickHot is BenchmarkPrefixPick for a hot prefix: the replica holding most of
// the prompt is over the guard (load weighs little here, so that it stays the cheapest), and
// the prefix is spread over a set.
func BenchmarkPrefixPickHot(b *testing.B) {
	rs, p := pickBenchPool()
	busy(rs[7], 9)
	toks := append([]uint32(nil), p.Tokens...)
	pp := &Prefix{LoadTokens: 1, Spread: Spread{Window: 1}}
	var d Decision
	b.ReportAllocs()
	for b.Loop() {
		p.SetTokens(toks)
		pp.PickPrompt(rs, p, &d)
		if d.Spread < 2 {
			b.Fatalf("not spread: %+v", d.Reason)
		}
	}
}

// TestPrefixSpreadPerModel: one prefix picker serves every model; the same prompt hot on one
// model's replicas has its set there, and another model's requests for it neither see nor undo
// that set.
func TestPrefixSpreadPerModel(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{}, "a", "b", "c", "d", "e", "f", "g", "h")
	indexed(rs, 1<<16)
	pk := &Prefix{Spread: Spread{Window: 8, Now: clk.Now}}
	tb := newTable(t, Config{Models: []Model{{Name: "m1", Replicas: rs[:4]}, {Name: "m2", Replicas: rs[4:]}},
		Picker: pk, Now: clk.Now})
	p := promptOf(1, 2000, 2100)
	rs[0].Prefix.RecordPrompt(p)
	rs[4].Prefix.RecordPrompt(p)
	var open []*Plan
	pick := func(model string, inFlight int) Decision {
		for len(open) >= inFlight {
			open[0].Report(nil, time.Millisecond)
			open = open[1:]
		}
		plan, err := tb.Plan(model, "", len(p.Tokens))
		if err != nil {
			t.Fatal(err)
		}
		var d Decision
		plan.SetPrompt(p, &d)
		a, err := plan.Next()
		if err != nil {
			t.Fatal(err)
		}
		a.Replica.Prefix.RecordPrompt(p)
		open = append(open, plan)
		return d
	}
	for range 200 {
		pick("m1", 12)
	}
	if d := pick("m1", 12); d.Spread != 3 || d.Reason != "hot" {
		t.Fatalf("m1 under sustained demand: reason %q, spread %d; want hot over 3", d.Reason, d.Spread)
	}
	for range 3 {
		if d := pick("m2", 1); d.Spread != 0 || d.Reason != "cache" {
			t.Errorf("m2, quiet: reason %q, spread %d; want cache, not spread", d.Reason, d.Spread)
		}
	}
	if d := pick("m1", 12); d.Spread != 3 {
		t.Errorf("m1 after m2's requests: reason %q, spread %d; want its set of 3 kept", d.Reason, d.Spread)
	}
}
