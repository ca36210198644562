package store

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// After Redis lost its state, a replica's admissions must not be decided on counts that lack
// another replica's: they wait until every replica live before the loss has written its counts
// back. A fixed window cannot promise that on a busy machine, where a replica's heartbeat may run
// late by more than any window short enough to wait through; a census can. Each replica writes
// its heartbeat entry again only after its write-back (see beat and loop), so an entry present
// after the loss says its replica's counts are in Redis (an entry of the replica's new
// generation: the census knows replicas, not generations). The census takes the replicas seen live
// at the last heartbeat before the loss and polls the heartbeat set until each is there again,
// or its last-seen lease has run out (it died, and its slots would have expired with it).

// censusEvery is how often a census reads the heartbeat set.
const censusEvery = 20 * time.Millisecond

// liveEntry is a replica's heartbeat entry seen live at a heartbeat: the replica (its
// generation left out), when its entry expires on Redis's clock (ms) and on the local one.
type liveEntry struct {
	replica string
	score   int64
	expires time.Time
}

// census is one wait for the replicas' write-back after a loss: done is closed when it ends.
type census struct {
	done chan struct{}
}

// liveEntries decodes the heartbeat script's member / expiry (Redis ms) pairs; redisNow is
// Redis's time when it answered, now the local one.
func liveEntries(now time.Time, redisNow int64, v []any) *[]liveEntry {
	es := make([]liveEntry, 0, len(v)/2)
	for i := 0; i+1 < len(v); i += 2 {
		m, _ := v[i].(string)
		ms, _ := v[i+1].(int64)
		es = append(es, liveEntry{replica: replicaOf(m), score: ms,
			expires: now.Add(time.Duration(ms-redisNow) * time.Millisecond)})
	}
	return &es
}

// liveScript returns the members of the heartbeat set whose entry has not expired.
var liveScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')
`)

// startCensus starts a census of the replicas seen live at the last heartbeat, unless one is
// under way (it covers this loss too: the replicas it waits for write back once for both).
func (s *Redis) startCensus() {
	seen := s.health.seen.Load()
	if seen == nil || len(*seen) == 0 {
		return
	}
	c := &census{done: make(chan struct{})}
	if !s.health.census.CompareAndSwap(nil, c) {
		return
	}
	s.mu.Lock() // against Close's Wait
	defer s.mu.Unlock()
	select {
	case <-s.closed:
		s.endCensus(c)
		return
	default:
	}
	wait := make(map[string]time.Time, len(*seen))
	for _, e := range *seen {
		wait[e.replica] = e.expires
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.endCensus(c)
		s.runCensus(wait)
	}()
}

// endCensus opens the admissions waiting for c.
func (s *Redis) endCensus(c *census) {
	s.health.census.CompareAndSwap(c, nil)
	close(c.done)
}

// runCensus reads the heartbeat set every censusEvery until every replica in wait is there again
// or its lease has run out, or the store closes. A read that fails is tried again at the next
// tick (the leases bound the wait).
func (s *Redis) runCensus(wait map[string]time.Time) {
	t := time.NewTicker(censusEvery)
	defer t.Stop()
	for {
		now := time.Now()
		for m, exp := range wait {
			if now.After(exp) {
				delete(wait, m)
			}
		}
		if len(wait) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.c.Timeout)
		live, err := liveScript.Run(ctx, s.c.Client, s.health.key).StringSlice()
		cancel()
		if err == nil {
			for _, m := range live {
				delete(wait, replicaOf(m))
			}
			if len(wait) == 0 {
				return
			}
		}
		select {
		case <-s.closed:
			return
		case <-t.C:
		}
	}
}
