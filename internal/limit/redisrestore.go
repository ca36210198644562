package limit

import (
	"context"
	"time"
)

// The Redis limit store is a store.Keeper: when the shared store finds Redis's state lost, or
// Redis back after an outage, it writes back what this replica knows.

// Stale implements store.Keeper: every gauge's count in Redis is possibly wrong, so the next
// operation on each (or the renewal of one holding slots) writes it exactly.
func (s *Redis) Stale() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.gauges {
		g.markStale()
	}
}

// Renew implements store.Keeper: it renews the leases of the gauges holding slots.
func (s *Redis) Renew() {
	gs, _ := s.cells()
	for _, g := range gs {
		g.renew()
	}
}

// cells returns the store's gauges and rate cells now.
func (s *Redis) cells() ([]*redisGauge, []*redisRate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	gs := make([]*redisGauge, 0, len(s.gauges))
	for _, g := range s.gauges {
		gs = append(gs, g)
	}
	rs := make([]*redisRate, 0, len(s.rates))
	for _, c := range s.rates {
		rs = append(rs, c)
	}
	return gs, rs
}

// Restore implements store.Keeper.
func (s *Redis) Restore() { s.restore() }

// restore writes back what this replica knows after a loss or an outage: the concurrency
// slots it holds (those taken from its own share while Redis was away become counted in Redis),
// and each rate cell's state as it last saw it and what it took locally. It runs on the renewal
// loop or the probe, never on a request.
func (s *Redis) restore() {
	gs, rs := s.cells()
	for _, g := range gs {
		g.adoptLocal()
		g.markStale()
	}
	for _, g := range gs {
		g.renew()
	}
	ctx := context.Background()
	for len(rs) > 0 {
		n := min(len(rs), 64)
		s.restoreRates(ctx, rs[:n])
		rs = rs[n:]
	}
}

// restoreRates writes back cells: each cell's last seen state where Redis holds less (a seed:
// never lowers it), then what was taken locally while Redis was unreachable, in one round trip.
func (s *Redis) restoreRates(ctx context.Context, rs []*redisRate) {
	now := time.Now().UnixNano()
	var calls []scriptCall
	var owed []*redisRate
	var amounts []int64
	sec, ns := now/1e9, now%1e9
	for _, c := range rs {
		if rel := c.seen.Load() - now; rel > 0 {
			calls = append(calls, scriptCall{sc: gcraScript, keys: c.key, args: []any{"seed", sec, ns, rel, int64(0)}})
		}
		if o := c.owed.Swap(0); o > 0 {
			calls = append(calls, scriptCall{sc: gcraScript, keys: c.key, args: []any{"add", sec, ns, o, int64(0)}})
			owed, amounts = append(owed, c), append(amounts, o)
		}
	}
	if len(calls) == 0 {
		return
	}
	if err := s.pipe(ctx, calls); err != nil {
		for i, c := range owed { // written at the next restore
			c.owed.Add(amounts[i])
		}
		s.failed(ctx, err)
	}
}
