package spend

import (
	"context"
	"sync"
	"time"
)

// charge is one budget's part of a request: the cell it counts in and the amount reserved.
type charge struct {
	c      cell
	amount int64
}

// Use is what a budget's counter holds: settled spending and reservations outstanding.
type Use struct {
	Spent    int64
	Reserved int64
}

// Ledger keeps the budgets' counters: in this process (Memory), or in Redis shared by every
// replica (Redis). Safe for concurrent use.
type Ledger interface {
	// reserve takes every charge's amount if each fits its budget — spent + reserved + amount
	// within the limit — all or none. It returns the reservation's id and, when one did not fit,
	// its index (else -1) and what its counter held.
	reserve(ctx context.Context, cs []charge) (id uint64, refused int, use Use, err error)
	// settle ends reservation id: each charge's amount returned, actual[i] spent in its counter.
	settle(ctx context.Context, id uint64, cs []charge, actual []int64)
	// used returns what each cell's counter holds.
	used(ctx context.Context, cs []cell) ([]Use, error)
}

// Memory is the Ledger of one process. The zero value is not usable; use NewMemory.
type Memory struct {
	mu  sync.Mutex
	m   map[string]*counter
	seq uint64
	now func() time.Time
}

// counter is one budget cell's state: spent (by window bucket for a rolling window) and
// reserved.
type counter struct {
	spent    int64
	buckets  map[int64]int64
	reserved int64
	expires  time.Time
}

// NewMemory returns an empty in-process ledger.
func NewMemory() *Memory { return &Memory{m: map[string]*counter{}, now: time.Now} }

func (l *Memory) counter(c cell) *counter {
	k, ok := l.m[c.id]
	if !ok {
		k = &counter{}
		if c.b.Period == "" {
			k.buckets = map[int64]int64{}
		}
		l.m[c.id] = k
	}
	k.expires = l.now().Add(c.ttl)
	return k
}

// use returns the counter's state at cell c (a window's buckets that left it are dropped).
func (k *counter) use(c cell) Use {
	u := Use{Spent: k.spent, Reserved: k.reserved}
	for b, v := range k.buckets {
		if inWindow(b, c.bucket) {
			u.Spent += v
		} else {
			delete(k.buckets, b)
		}
	}
	return u
}

func (k *counter) add(c cell, actual int64) {
	if k.buckets != nil {
		k.buckets[c.bucket] += actual
		return
	}
	k.spent += actual
}

func (l *Memory) reserve(_ context.Context, cs []charge) (uint64, int, Use, error) {
	return l.reserveWithin(cs, nil)
}

// reserveWithin is reserve against limits instead of the budgets' own, when not nil (a
// replica's share while the shared store is unreachable).
func (l *Memory) reserveWithin(cs []charge, limits []int64) (uint64, int, Use, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, ch := range cs {
		lim := ch.c.b.Limit
		if limits != nil {
			lim = limits[i]
		}
		u := l.counter(ch.c).use(ch.c)
		if ch.amount > 0 && u.Spent+u.Reserved+ch.amount > lim {
			return 0, i, u, nil
		}
	}
	for _, ch := range cs {
		l.m[ch.c.id].reserved += ch.amount
	}
	l.seq++
	l.prune()
	return l.seq, -1, Use{}, nil
}

func (l *Memory) settle(_ context.Context, _ uint64, cs []charge, actual []int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, ch := range cs {
		k := l.counter(ch.c)
		k.reserved -= ch.amount
		k.add(ch.c, actual[i])
	}
}

func (l *Memory) used(_ context.Context, cs []cell) ([]Use, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Use, len(cs))
	for i, c := range cs {
		if k, ok := l.m[c.id]; ok {
			out[i] = k.use(c)
		}
	}
	return out, nil
}

// prune drops, every 1024 reservations, the counters of periods past their keeping time that
// hold no reservation.
func (l *Memory) prune() {
	if l.seq%1024 != 0 {
		return
	}
	now := l.now()
	for id, k := range l.m {
		if k.reserved == 0 && now.After(k.expires) {
			delete(l.m, id)
		}
	}
}
