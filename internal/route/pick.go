package route

import (
	"math/rand/v2"
	"sync/atomic"
)

// Picker chooses one replica among candidates that are all able to serve. Implementations must be
// safe for concurrent use and must not retain cands.
type Picker interface {
	// Pick returns an index into cands, which is never empty.
	Pick(cands []*Replica) int
}

// P2C picks by least outstanding requests among two random candidates ("the power of two
// choices", Mitzenmacher 2001): nearly as good as scanning for the least loaded, without every
// request herding onto the same replica between load updates. Ties go to the lower utilisation.
// The zero value is ready to use.
type P2C struct {
	// Rand returns a uniform int in [0, n). Default math/rand/v2.IntN; tests inject their own.
	Rand func(n int) int
}

// Pick implements Picker.
func (p P2C) Pick(cands []*Replica) int {
	n := len(cands)
	if n == 1 {
		return 0
	}
	rnd := p.Rand
	if rnd == nil {
		rnd = rand.IntN
	}
	i := rnd(n)
	j := rnd(n - 1)
	if j >= i {
		j++
	}
	a, b := cands[i], cands[j]
	switch oa, ob := a.Outstanding(), b.Outstanding(); {
	case ob < oa:
		return j
	case oa < ob:
		return i
	}
	if b.Utilization() < a.Utilization() {
		return j
	}
	return i
}

// RoundRobin picks candidates in turn. Because candidates are filtered per request (ejected or
// busy replicas drop out), the rotation is over the replicas that can serve. The zero value is
// ready to use; it must not be copied after first use.
type RoundRobin struct {
	next atomic.Uint64
}

// Pick implements Picker.
func (rr *RoundRobin) Pick(cands []*Replica) int {
	return int((rr.next.Add(1) - 1) % uint64(len(cands)))
}
