package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// How the Redis store tells a slow Redis from a lost one, and comes back without overshooting.
//
// A busy machine answers late; that is not an outage. An operation waits up to the timeout for
// its answer; one that gets none fails alone (the Limiter answers that request 503, a limit that
// cannot decide refuses) and Redis stays in use. Only a lost connection (refused, reset, closed)
// or FailRun failures in a row mark Redis unreachable: the circuit opens, operations serve from
// this replica's own counters (or are refused, with deny), and a probe every 100ms closes it.
//
// Each replica writes a heartbeat every beatEvery into one sorted set (member: the replica,
// score: its expiry, a lease TTL ahead) and reads back how many replicas are live: that count,
// cached, divides every limit while Redis is unreachable. A heartbeat that finds its own entry
// gone although it wrote it less than a lease ago has found Redis's state lost (FLUSHALL, a
// restart without persistence), as does a concurrency count found missing (lost). Then, and when
// Redis is reachable again after an outage, the replica writes back what it knows — its
// concurrency slots (those taken from its own share while Redis was away included), the rate
// cells' states as it last saw them (max with what Redis holds), and what it took locally — and
// its admissions wait settleWindow, long enough for every live replica's next heartbeat to do the
// same, so that no admission is decided on counts that lack another replica's.

// DefaultTimeout is how long one operation waits for Redis's answer by default: far above a
// round trip on a loaded machine (milliseconds), short enough that a hung Redis is noticed.
const DefaultTimeout = time.Second

// FailRun is how many operations in a row may fail without losing the connection (timeouts,
// error replies) before Redis is marked unreachable.
const FailRun = 3

// beatEvery is how often each replica writes its heartbeat (at most a third of the lease TTL).
const beatEvery = 250 * time.Millisecond

// health is the store's view of its connection and of the other replicas.
type health struct {
	key []string // the heartbeat set
	// member is this replica's entry in it, "ID#GENERATION": a loss starts a new generation, so
	// that an operation that carries the entry it was built with (an admission checks it) cannot
	// pass on an entry written again after a loss it did not wait for. written is the entry the
	// last heartbeat found or wrote: the next generation's first heartbeat removes it.
	member  atomic.Pointer[string]
	gen     atomic.Uint64
	written atomic.Pointer[string]
	every   time.Duration // the heartbeat period
	fails   atomic.Int32  // failures in a row that did not lose the connection
	live    atomic.Int64  // live replicas as Redis last reported them (0: not yet)
	beatOK  atomic.Int64  // when this replica's heartbeat was last written (Unix ns; 0: never)
	settle  atomic.Int64  // admissions wait until then (Unix ns)
	// restore asks the renewal loop to write every count back; kick wakes it.
	restore atomic.Bool
	kick    chan struct{}
	// addNext lets the next heartbeat write this replica's entry when it is not there: the
	// first one, and the first after a write-back.
	addNext atomic.Bool
	// seen are the replicas live at the last heartbeat; census is the one under way after a
	// loss, nil when none is.
	seen   atomic.Pointer[[]liveEntry]
	census atomic.Pointer[census]
	join   join
}

func (h *health) init(s *Redis) {
	h.key = []string{s.c.Prefix + "{replicas}"}
	h.next(s.c.ReplicaID)
	h.every = min(beatEvery, s.c.LeaseTTL/3)
	h.kick = make(chan struct{}, 1)
	h.addNext.Store(true)
	h.join.init(time.Now().Add(s.c.Timeout + s.settleWindow()))
}

// next starts this replica's next generation of heartbeat entries.
func (h *health) next(id string) {
	m := id + "#" + strconv.FormatUint(h.gen.Add(1), 10)
	h.member.Store(&m)
}

// replicaOf is the replica whose heartbeat entry is member (its generation left out).
func replicaOf(member string) string {
	if i := strings.LastIndexByte(member, '#'); i >= 0 {
		return member[:i]
	}
	return member
}

// heartbeatScript drops the expired entries and writes this replica's (ARGV[1]) with an expiry
// ARGV[2] ms ahead on Redis's clock — unless ARGV[3] is "1" (the entry must be there: written
// less than a lease ago) and it is gone, which leaves it out: Redis lost its state, and the
// replica writes its entry again only after it has written its counts back, so that an entry
// present after a loss says its replica's counts are in Redis (see census). Writing an entry, it
// removes the replica's previous one (ARGV[4], when not empty). It returns {live entries, 1 if
// this replica's was there, Redis's time (ms), then each live entry and its expiry (ms)}.
var heartbeatScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local had = redis.call('ZSCORE', KEYS[1], ARGV[1])
if had or ARGV[3] ~= '1' then
  if ARGV[4] ~= '' then redis.call('ZREM', KEYS[1], ARGV[4]) end
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
local all = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local out = {#all / 2, 0, now}
if had then out[2] = 1 end
for i = 1, #all, 2 do
  out[#out + 1] = all[i]
  out[#out + 1] = tonumber(all[i + 1])
end
return out
`)

// Live returns how many replicas wrote a heartbeat within a lease TTL, as Redis last reported
// it, this one included; 0 before the first answer.
func (s *Redis) Live() int { return int(s.health.live.Load()) }

// Divisor is what each limit is divided by while Redis is unreachable: the live replicas, or
// Config.Replicas when larger.
func (s *Redis) Divisor() int64 { return max(s.health.live.Load(), int64(s.c.Replicas), 1) }

// Share is a limit's part for one replica while Redis is unreachable (at least 1).
func (s *Redis) Share(n int64) int64 { return max(n/s.Divisor(), 1) }

// beat writes this replica's heartbeat, caches the live count and the live replicas (for a
// census after a loss, and to know when the others have seen this one: join). The entry is
// written anew only at the first heartbeat and the first after a write-back (addNext); otherwise
// a heartbeat that finds it gone has found Redis's state lost (or the entry expired while this
// replica was starved of its renewals, which lost its leases too), and the entry is written
// again by the heartbeat after the write-back.
func (s *Redis) beat() {
	if s.health.restore.Load() {
		return // a loss is being handled: the loop writes the counts back, then the heartbeat
	}
	ctx := context.Background()
	add := s.health.addNext.Swap(false)
	member := s.health.member.Load()
	expect, old := "1", ""
	if add {
		expect = "0"
		if w := s.health.written.Load(); w != nil && w != member {
			old = *w
		}
	}
	v, err := s.Run(ctx, heartbeatScript, s.health.key, *member, s.ttlMS, expect, old)
	if err != nil {
		if add {
			s.health.addNext.Store(true)
		}
		s.Failed(ctx, err)
		return
	}
	if s.health.member.Load() != member {
		return // a loss was found meanwhile: this was an old generation's entry
	}
	n, had := Pair(v[:min(len(v), 2)])
	s.health.live.Store(n)
	if !had && !add {
		what := "this replica's heartbeat"
		if !s.ExpectBeat() {
			what = "this replica's heartbeat, renewed too late (its leases expired)"
		}
		s.Lost(what)
		return
	}
	now := time.Now()
	s.health.written.Store(member)
	s.health.beatOK.Store(now.UnixNano())
	var redisNow int64
	if len(v) > 2 {
		redisNow, _ = v[2].(int64)
	}
	es := liveEntries(now, redisNow, v[min(len(v), 3):])
	s.health.seen.Store(es)
	s.joined(redisNow, *es)
}

// unbeat removes this replica's heartbeat (a clean stop), so the others' divisor drops at once.
func (s *Redis) unbeat() {
	if !s.up.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.c.Timeout)
	defer cancel()
	if w := s.health.written.Load(); w != nil {
		_ = s.c.Client.ZRem(ctx, s.health.key[0], *w).Err()
	}
}

// settleWindow is how long admissions wait after Redis's state was lost or Redis came back:
// every live replica's next heartbeat (one period away), and a period and writeBack more for it
// to run late and write its counts back. Not the timeout: a replica's own admissions would wait
// for as long as the slowest round trip it tolerates, each time.
func (s *Redis) settleWindow() time.Duration { return 2*s.health.every + writeBack }

// writeBack is what settleWindow allows a replica for writing its counts back: round trips on a
// loaded machine take milliseconds, tens at worst.
const writeBack = 250 * time.Millisecond

// Settled waits while the replicas write their counts back after a loss or an outage (see
// Lost), at most until ctx ends. A user that takes from a shared count waits for it first.
func (s *Redis) Settled(ctx context.Context) error {
	if err := s.health.join.wait(ctx); err != nil {
		return fmt.Errorf("store: redis: waiting for the other replicas to see this one: %w", err)
	}
	if err := WaitUntil(ctx, s.health.settle.Load()); err != nil {
		return fmt.Errorf("store: redis: waiting for the counts to be written back: %w", err)
	}
	if c := s.health.census.Load(); c != nil {
		select {
		case <-c.done:
		case <-ctx.Done():
			return fmt.Errorf("store: redis: waiting for the other replicas to write their counts back: %w", ctx.Err())
		}
	}
	return nil
}

// WaitUntil waits until the instant until (Unix nanoseconds; 0 or past: no wait), at most ctx:
// how a replica's admissions wait while every replica writes its counts back to a shared store.
func WaitUntil(ctx context.Context, until int64) error {
	if until == 0 {
		return nil
	}
	_, err := waitDone(ctx, nil, time.Unix(0, until))
	return err
}

// waitDone waits until done is closed (nil: never) or the instant until, at most ctx, and
// reports whether until came first.
func waitDone(ctx context.Context, done <-chan struct{}, until time.Time) (bool, error) {
	d := time.Until(until)
	if d <= 0 {
		return true, nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return false, nil
	case <-t.C:
		return true, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// hold makes admissions wait settleWindow from now, and reports whether no window was open.
func (s *Redis) hold() bool {
	now := time.Now()
	until := now.Add(s.settleWindow()).UnixNano()
	for {
		old := s.health.settle.Load()
		if old >= until {
			return false
		}
		if s.health.settle.CompareAndSwap(old, until) {
			return old < now.UnixNano()
		}
	}
}

// ExpectBeat reports whether this replica's heartbeat entry must be in Redis now: written less
// than a lease ago, and not since found lost. An admission that finds it gone found a loss.
func (s *Redis) ExpectBeat() bool {
	last := s.health.beatOK.Load()
	return last != 0 && time.Since(time.Unix(0, last)) < s.c.LeaseTTL-s.health.every
}

// Lost handles Redis found without the state this replica wrote (what found it): admissions
// wait — the settle window, and a census of the replicas that were live (see census) — and
// every count is written back at once. Until this replica's heartbeat is written again (after
// its write-back), its absence is not a new loss.
//
// The waits begin before the entry changes: an operation that finds this replica's entry
// unchecked (ExpectBeat false) or of the new generation (Heartbeat) and then calls Settled waits.
func (s *Redis) Lost(what string) {
	if s.hold() {
		s.c.Logger.Warn("shared store (Redis) lost its state: writing this replica's counts back", "found_by", what)
	}
	s.startCensus()
	s.health.beatOK.Store(0)
	s.health.addNext.Store(false)
	s.health.next(s.c.ReplicaID)
	s.each(Keeper.Stale)
	s.health.restore.Store(true)
	select {
	case s.health.kick <- struct{}{}:
	default:
	}
}

// OK records an operation Redis answered: the run of failures is over.
func (s *Redis) OK() {
	if s.health.fails.Load() != 0 {
		s.health.fails.Store(0)
	}
}

// connLost reports whether err lost the connection to Redis (refused, reset, closed), as opposed
// to an answer that came late or was an error reply.
func connLost(err error) bool {
	var re redis.Error
	if errors.As(err, &re) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrPoolTimeout) {
		return false
	}
	var ne net.Error
	return !errors.As(err, &ne) || !ne.Timeout()
}

// Failed records a failed operation and reports whether Redis is now marked unreachable (the
// caller then serves from its fallback; else it fails the operation). A lost connection marks it
// at once, other failures when they are FailRun in a row; a probe then looks for it every 100ms.
// An error caused by the caller's own context ending is not the store's.
func (s *Redis) Failed(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return !s.up.Load()
	}
	select {
	case <-s.closed: // a lease of an old configuration ending after its store was closed
		return !s.up.Load()
	default:
	}
	s.CountError()
	if !connLost(err) && s.health.fails.Add(1) < FailRun {
		return !s.up.Load()
	}
	s.health.fails.Store(0)
	if s.up.CompareAndSwap(true, false) {
		// A newcomer's wait to be seen ends: nothing is taken from Redis until it is back, and
		// then the admissions wait for the census of the replicas' write-back (probe).
		s.health.join.end()
		policy := "allow: serving with this replica's own counters, each limit divided by " +
			strconv.FormatInt(s.Divisor(), 10) + " (the live replicas)"
		if s.c.Deny {
			policy = "deny: answering 503 to limited requests"
		}
		s.c.Logger.Warn("shared store (Redis) unreachable", "err", err, "on_error", policy)
	}
	s.probe()
	return true
}
