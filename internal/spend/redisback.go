package spend

import (
	"context"
	"fmt"
	"time"
)

// How the Redis ledger comes back from an outage or a Redis that lost its state, without
// overspending: it writes back what it knows — each cell's spending as Redis last told it (a
// seed: never lowering what Redis holds), its reservations outstanding (those taken from its
// share while Redis was unreachable become counted in Redis), and the settlements it could not
// write — and its reservations wait, as the rate limits' admissions do, for the shared store to
// settle: its window, then its census of every replica's write-back (the ledger is one of the
// store's keepers, written back before its replica's heartbeat is written again).

// ready writes back first if Redis was found unreachable or empty and is usable again, then
// waits for the store to settle (see above), at most ctx.
func (r *Redis) ready(ctx context.Context) error {
	if r.down.Load() && r.c.Circuit.Use() {
		r.restore(ctx)
	}
	if err := r.c.Circuit.Settled(ctx); err != nil {
		return fmt.Errorf("spend: redis: waiting for the replicas' write-back: %w", err)
	}
	return nil
}

// keeper is the ledger as the store's Keeper: told of a loss the store found, it writes back on
// the store's heartbeat loop, before the heartbeat that the census counts.
type keeper struct{ r *Redis }

// Stale marks the ledger to be written back before its next use.
func (k keeper) Stale() {
	k.r.lastLease.Store(0)
	k.r.down.Store(true)
	k.r.losses.Add(1) // last: a reservation that read the count before waits again (reserve)
}

// Restore writes the ledger back now, if it is due.
func (k keeper) Restore() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*k.r.c.Circuit.Timeout())
	defer cancel()
	k.r.restore(ctx)
}

// Renew does nothing: the ledger renews its own lease.
func (keeper) Renew() {}

// expectLease reports whether this replica's lease must be in Redis now: renewed less than a
// lease ago. A script that finds it gone found Redis's state lost.
func (r *Redis) expectLease() bool {
	last := r.lastLease.Load()
	return last != 0 && time.Since(time.Unix(0, last)) < r.c.LeaseTTL-r.every
}

// leased notes that a script wrote this replica's lease (every script's prelude does): from now
// on, for a lease TTL, the lease must be in Redis. Not while a write-back is due.
func (r *Redis) leased() {
	if !r.down.Load() {
		r.lastLease.Store(time.Now().UnixNano())
	}
}

// guarded is this replica's name as the scripts' first argument: marked '!' while its lease
// must be in Redis (see preludeLua), so that a script finding it gone changes nothing.
func (r *Redis) guarded() string {
	if r.expectLease() {
		return r.meGuarded
	}
	return r.me
}

// lostReply reports a script's answer that the lease was gone (see preludeLua).
func lostReply(v []int64) bool { return len(v) == 1 && v[0] == -1 }

// lost handles Redis found without this replica's lease: everything is written back at once.
func (r *Redis) lost(what string) {
	r.c.Logger.Warn("shared store (Redis) lost the budgets' state: writing this replica's back", "found_by", what)
	r.down.Store(true)
	r.lastLease.Store(0)
	r.c.Circuit.Lost("the budgets' " + what) // the rate limits' state went with it; the census starts
}

// restore writes back this replica's state (see above) and opens the settle window. It runs
// alone: no reservation or settlement of this replica is in Redis meanwhile.
func (r *Redis) restore(ctx context.Context) {
	r.ops.Lock()
	defer r.ops.Unlock()
	if !r.down.Load() {
		return // another caller wrote back first
	}
	r.mu.Lock()
	type back struct {
		s   seenCell
		res []any
	}
	cells := map[string]*back{}
	for id, s := range r.seen {
		cells[id] = &back{s: s}
	}
	for id, h := range r.held {
		for _, ch := range h.cs {
			b := cells[ch.c.id]
			if b == nil {
				b = &back{s: seenCell{c: ch.c}}
				cells[ch.c.id] = b
			}
			if ch.amount > 0 {
				b.res = append(b.res, id, ch.amount)
			}
		}
	}
	pending := r.pending
	r.pending = nil
	r.mu.Unlock()
	failed := func(err error) {
		r.c.Circuit.Fail(ctx, err)
		r.mu.Lock()
		r.pending = append(pending, r.pending...)
		r.mu.Unlock()
	}
	for _, b := range cells {
		args := append([]any{r.me, 0, r.ttlMS, b.s.Spent, b.s.c.bucket, ms(b.s.c.ttl)}, b.res...)
		if _, err := r.run(ctx, restoreScript, []string{r.key(b.s.c), r.leases}, args...); err != nil {
			failed(err)
			return
		}
	}
	for i, p := range pending {
		if err := r.settleNow(ctx, p.id, p.cs, p.actual, true); err != nil {
			pending = pending[i:]
			failed(err)
			return
		}
	}
	r.mu.Lock()
	for _, h := range r.held {
		h.local = false // written back: counted in Redis from now on
	}
	r.local = NewMemory()
	r.mu.Unlock()
	// The lease last: written back without a cell (a replica that holds nothing), and after
	// the cells, so that a lease present after a loss says this replica's state is in Redis.
	if _, err := r.run(ctx, leaseScript, []string{r.leases}, r.me, r.ttlMS, "0"); err != nil {
		failed(err)
		return
	}
	r.restoredAt.Store(time.Now().UnixNano())
	r.lastLease.Store(time.Now().UnixNano())
	r.down.Store(false)
	r.c.Logger.Info("budgets written back to the shared store (Redis)", "cells", len(cells), "settlements", len(pending))
}

// renewLoop renews the lease every period; it finds Redis's state lost when the lease it renewed
// less than a lease ago is gone, and writes back after an outage or a loss, and the settlements
// it could not write.
func (r *Redis) renewLoop() {
	defer r.wg.Done()
	t := time.NewTicker(r.every)
	defer t.Stop()
	for {
		select {
		case <-r.closed:
			return
		case <-t.C:
		}
		if !r.c.Circuit.Use() {
			r.down.Store(true)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*r.c.Circuit.Timeout())
		r.renew(ctx)
		cancel()
	}
}

func (r *Redis) renew(ctx context.Context) {
	expect := "0"
	if r.expectLease() {
		expect = "1"
	}
	v, err := r.run(ctx, leaseScript, []string{r.leases}, r.me, r.ttlMS, expect)
	if err != nil {
		r.c.Circuit.Fail(ctx, err)
		return
	}
	if len(v) == 1 && v[0] == 0 && expect == "1" {
		r.lost("this replica's lease")
	}
	if !r.down.Load() {
		r.lastLease.Store(time.Now().UnixNano())
	}
	if r.down.Load() {
		r.restore(ctx)
		return
	}
	r.refresh(ctx)
	r.mu.Lock()
	pending := r.pending
	r.pending = nil
	r.mu.Unlock()
	for i, p := range pending {
		if err := r.settleNow(ctx, p.id, p.cs, p.actual, true); err != nil {
			r.c.Circuit.Fail(ctx, err)
			r.mu.Lock()
			r.pending = append(pending[i:], r.pending...)
			r.mu.Unlock()
			return
		}
	}
}

// refresh reads every cell this replica has seen again (dropping those whose period is over),
// so that its view, from which its share of an outage is cut, is never older than a renewal.
func (r *Redis) refresh(ctx context.Context) {
	now := time.Now()
	r.mu.Lock()
	cells := make([]cell, 0, len(r.seen))
	for id, s := range r.seen {
		if now.Sub(r.lastReply) > s.c.ttl || (s.c.b.Period != "" && now.After(s.c.reset)) {
			delete(r.seen, id)
			continue
		}
		cells = append(cells, s.c)
	}
	r.mu.Unlock()
	for len(cells) > 0 {
		n := min(len(cells), 256)
		if _, err := r.used(ctx, cells[:n]); err != nil {
			return
		}
		cells = cells[n:]
	}
}
