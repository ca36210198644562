package route

import (
	"math/rand/v2"
	"sync"
	"testing"
)

// load sets a replica's outstanding count.
func load(r *Replica, n int64) { r.outstanding.Store(n) }

func TestP2CPrefersLessLoaded(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{}, "r0", "r1", "r2")
	load(rs[0], 5)
	load(rs[1], 2)
	load(rs[2], 2)
	rs[2].SetUtilization(0.3)
	rs[1].SetUtilization(0.6)
	tests := []struct {
		name  string
		draws []int // the two Rand results: i in [0,3), then j in [0,2) (shifted past i)
		want  int
	}{
		{"second is less loaded", []int{0, 0}, 1},         // r0 vs r1
		{"first is less loaded", []int{1, 0}, 1},          // r1 vs r0
		{"tie goes to lower utilisation", []int{1, 1}, 2}, // r1 vs r2
		{"tie, first already lower", []int{2, 0}, 2},      // r2 vs r0: load decides
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := 0
			p := P2C{Rand: func(n int) int {
				v := tt.draws[k]
				k++
				if v >= n {
					t.Fatalf("draw %d out of [0,%d)", v, n)
				}
				return v
			}}
			if got := p.Pick(rs); got != tt.want {
				t.Errorf("got r%d, want r%d", got, tt.want)
			}
		})
	}
	if got := (P2C{}).Pick(rs[:1]); got != 0 {
		t.Errorf("one candidate: got %d, want 0", got)
	}
}

// TestP2CSpreadsLoad starts requests without finishing them: picking the less loaded of two keeps
// every replica within a small gap of the others, where random picking would drift apart.
func TestP2CSpreadsLoad(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{}, "r0", "r1", "r2", "r3", "r4")
	p := P2C{Rand: rand.New(rand.NewPCG(7, 11)).IntN}
	for range 1000 {
		r := rs[p.Pick(rs)]
		r.Begin()
	}
	lo, hi := rs[0].Outstanding(), rs[0].Outstanding()
	for _, r := range rs {
		lo, hi = min(lo, r.Outstanding()), max(hi, r.Outstanding())
	}
	if hi-lo > 3 {
		t.Errorf("got outstanding between %d and %d, want within 3 of each other", lo, hi)
	}
}

// TestP2CSteersAwayFromSlow models one slow replica: it keeps its requests longer, so P2C sends
// it fewer.
func TestP2CSteersAwayFromSlow(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{}, "fast0", "fast1", "slow")
	p := P2C{Rand: rand.New(rand.NewPCG(3, 5)).IntN}
	var picked [3]int
	var slowQueue []int // pick numbers of the slow replica's open requests
	for n := range 3000 {
		i := p.Pick(rs)
		picked[i]++
		rs[i].Begin()
		if i < 2 {
			rs[i].Report(nil, 0) // fast replicas finish at once
		} else {
			slowQueue = append(slowQueue, n)
		}
		for len(slowQueue) > 0 && n-slowQueue[0] >= 4 { // the slow one takes 4 picks
			slowQueue = slowQueue[1:]
			rs[2].Report(nil, 0)
		}
	}
	if picked[2]*2 > min(picked[0], picked[1]) { // uniform picking would give each 1000
		t.Errorf("got picks %v, want the slow replica to get under half of a fast one's", picked)
	}
}

func TestRoundRobin(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{}, "a", "b", "c")
	var rr RoundRobin
	var got []int
	for range 7 {
		got = append(got, rr.Pick(rs))
	}
	want := []int{0, 1, 2, 0, 1, 2, 0}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	// Concurrent picks share the counter: over 3×N picks each candidate gets N.
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := make([]int, 3)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]int, 3)
			for range 300 {
				local[rr.Pick(rs)]++
			}
			mu.Lock()
			for i, n := range local {
				counts[i] += n
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	// 1800 consecutive counter values are 600 whole turns, whatever the start.
	if counts[0] != 600 || counts[1] != 600 || counts[2] != 600 {
		t.Errorf("got %v, want 600 each", counts)
	}
}

func TestPickAllocs(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{}, "a", "b", "c", "d")
	var rr RoundRobin
	for _, p := range []Picker{P2C{}, &rr} {
		if allocs := testing.AllocsPerRun(100, func() { p.Pick(rs) }); allocs != 0 {
			t.Errorf("%T: got %v allocs, want 0", p, allocs)
		}
	}
}

func BenchmarkPick(b *testing.B) {
	rs := make([]*Replica, 8)
	for i := range rs {
		rs[i] = NewReplica("r", nil, withPolicy(Policy{}))
	}
	var rr RoundRobin
	for _, bc := range []struct {
		name string
		p    Picker
	}{{"P2C", P2C{}}, {"RoundRobin", &rr}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.p.Pick(rs)
			}
		})
	}
}
