package store

import (
	"context"
	"sync"
	"time"
)

// A replica that has just started must not take from the shared counts before every other
// replica has seen it: a census after a loss waits only for the replicas its replica saw live at
// its last heartbeat, so a replica that took slots before the others' next heartbeat would not be
// waited for, and its slots would be missing from the counts the others decide on until it wrote
// them back. Its admissions therefore wait (Settled) until a heartbeat shows that each other live
// entry was written after this replica's first one — one heartbeat period, when the others are
// on time — or, when one is not (a replica that died leaves its entry until its lease ends), for
// at most the settle window after the first heartbeat could have been answered. A replica alone
// waits for its first heartbeat only. The wait ends when Redis is found unreachable: its
// admissions serve from its own share meanwhile, and wait for the census when Redis is back.
//
// An entry's write time is its expiry less the lease TTL: the replicas of one deployment share
// store.lease_ttl.

// join is the wait of a replica that has just started.
type join struct {
	once  sync.Once
	done  chan struct{} // closed when the others have seen this replica, or the wait ran out
	by    time.Time     // when the wait runs out
	first int64         // Redis's time (ms) at this replica's first heartbeat; 0 before it
}

func (j *join) init(by time.Time) {
	j.done = make(chan struct{})
	j.by = by
}

// end ends the wait.
func (j *join) end() { j.once.Do(func() { close(j.done) }) }

// wait waits until the wait has ended, at most ctx.
func (j *join) wait(ctx context.Context) error {
	select {
	case <-j.done:
		return nil
	default:
	}
	late, err := waitDone(ctx, j.done, j.by)
	if late {
		j.end()
	}
	return err
}

// joined records a heartbeat answered at redisNow (Redis's ms) that found the live entries es,
// and ends the join wait when every other replica's entry was written after this replica's
// first heartbeat. Only the heartbeat loop calls it.
func (s *Redis) joined(redisNow int64, es []liveEntry) {
	j := &s.health.join
	select {
	case <-j.done:
		return
	default:
	}
	if j.first == 0 {
		j.first = redisNow
	}
	ttl := s.c.LeaseTTL.Milliseconds()
	for _, e := range es {
		if e.replica != s.c.ReplicaID && e.score-ttl <= j.first {
			if time.Now().After(j.by) {
				j.end()
			}
			return
		}
	}
	j.end()
}
