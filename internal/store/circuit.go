package store

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Use reports whether a user should try Redis now; when not, its operation is counted as an
// error, and the user does without Redis (allow) or refuses (deny).
func (s *Redis) Use() bool {
	if s.up.Load() {
		return true
	}
	s.CountError()
	return false
}

// Fail records a lenient user's operation that failed (the shared response cache, the stored
// responses): counted; a lost connection marks Redis unreachable until a probe answers, while a
// late answer does not (that user's timeout is its own, and says nothing of the limits' round
// trips). An error caused by ctx ending is not the store's.
func (s *Redis) Fail(ctx context.Context, err error) {
	if ctx.Err() == nil && !connLost(err) {
		s.CountError()
		return
	}
	s.Failed(ctx, err)
}

// CountError counts one operation that could not use Redis.
func (s *Redis) CountError() {
	s.errCount.Add(1)
	if s.c.OnError != nil {
		s.c.OnError()
	}
}

// Heartbeat returns the key of the replicas' heartbeat set and this replica's entry in it when
// the entry must be there (ExpectBeat), else two empty strings: a script may check that the
// entry is still there (ZSCORE) to find a lost state. An operation reads it before it calls
// Settled; when its script finds the entry gone, the loss is a new one (then Lost) if the entry
// is still Current.
func (s *Redis) Heartbeat() (key, member string) {
	if !s.ExpectBeat() {
		return "", ""
	}
	return s.health.key[0], *s.health.member.Load()
}

// Current reports whether member is this replica's heartbeat entry now: not one of a generation
// ended by a loss already found.
func (s *Redis) Current(member string) bool { return member == *s.health.member.Load() }

// probe starts, once, a loop that pings Redis until it answers, then has the keepers write back
// what this replica knows (the slots it holds exactly, the rate cells as it last saw them and
// what it took meanwhile), makes admissions wait for the other replicas to do the same (hold),
// and marks Redis up.
func (s *Redis) probe() {
	s.mu.Lock() // against Close's Wait
	defer s.mu.Unlock()
	select {
	case <-s.closed:
		return
	default:
	}
	if !s.probing.CompareAndSwap(false, true) {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.probing.Store(false)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.closed:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), max(s.c.Timeout, 100*time.Millisecond))
			err := s.c.Client.Ping(ctx).Err()
			cancel()
			if err == nil {
				s.hold()
				s.startCensus()        // and for the others' (their entries, if Redis restarted empty)
				s.each(Keeper.Restore) // Redis may have restarted empty, or missed writes: every count is re-asserted
				s.health.addNext.Store(true)
				s.health.fails.Store(0)
				s.up.Store(true)
				s.c.Logger.Info("shared store (Redis) reachable again")
				return
			}
		}
	}()
}

// Run runs a script within the store's timeout; an answer ends a run of failures. The
// stores built on the connection (limits, the cache's lookups) run their scripts with it.
func (s *Redis) Run(ctx context.Context, sc *redis.Script, keys []string, args ...any) ([]any, error) {
	v, err := s.Script(ctx, sc, keys, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("store: redis: %w", err)
	}
	s.OK()
	return v, nil
}

// Script runs a script within the store's timeout and returns its answer as it came, for a
// lenient user that reads the reply its own way and reports only failures (Fail): unlike Run,
// its answer does not end a run of failures, as its late answers do not add to one.
func (s *Redis) Script(ctx context.Context, sc *redis.Script, keys []string, args ...any) *redis.Cmd {
	ctx, cancel := context.WithTimeout(ctx, s.c.Timeout)
	defer cancel()
	return sc.Run(ctx, s.c.Client, keys, args...) // answered (or failed) before the cancel
}

// Pair decodes a script's {n, flag} reply (flag: 1 for true), as users' scripts return too.
func Pair(v []any) (int64, bool) {
	if len(v) != 2 {
		return 0, false
	}
	n, _ := v[0].(int64)
	f, _ := v[1].(int64)
	return n, f == 1
}
