package cache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/layer0ai/layer0/internal/store"
)

// RedisConfig configures the shared response cache.
type RedisConfig struct {
	// Store is the connection, shared with the rate limits: one view of whether Redis is
	// reachable, one error counter. Required.
	Store *store.Redis
	// Timeout bounds one operation. Default 50ms.
	Timeout time.Duration
	// MaxEntryBytes is the largest encoded answer stored in Redis; a larger one stays in the
	// replica's memory only. Default 1 MiB.
	MaxEntryBytes int64
	// FillWait bounds how long a replica that misses waits for another replica filling the same
	// key, and is the lifetime of the fill marker. Default 5s.
	FillWait time.Duration
	// Prefix starts every key. Default "layer0:cache:".
	Prefix string
}

// DefaultFillWait and DefaultMaxEntryBytes are RedisConfig's defaults.
const (
	DefaultFillWait      = 5 * time.Second
	DefaultMaxEntryBytes = 1 << 20
)

// fillPoll is how often a replica waiting for another's fill looks for the entry.
const fillPoll = 20 * time.Millisecond

// Shared is a Store in Redis, read by every replica, with a Memory store in front of it (L1).
// An entry is written once (SET NX, with the policy's TTL), so every replica replays the same
// answer. A miss may claim the filling of its key (Claim) so that other replicas missing the same
// key wait for the answer instead of calling the engine again. When Redis fails the store is its
// L1 alone: it never fails a request. Safe for concurrent use.
type Shared struct {
	c     RedisConfig
	l1    *Memory
	owner string // this store's fill claims
}

// NewShared returns a shared store with l1 in front. c.Store is required.
func NewShared(c RedisConfig, l1 *Memory) *Shared {
	if c.Timeout <= 0 {
		c.Timeout = 50 * time.Millisecond
	}
	if c.MaxEntryBytes <= 0 {
		c.MaxEntryBytes = DefaultMaxEntryBytes
	}
	if c.FillWait <= 0 {
		c.FillWait = DefaultFillWait
	}
	if c.Prefix == "" {
		c.Prefix = "layer0:cache:"
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &Shared{c: c, l1: l1, owner: hex.EncodeToString(b[:])}
}

// L1 is the store's in-memory front.
func (s *Shared) L1() *Memory { return s.l1 }

// entryKey is k's Redis key; fillKey its fill marker, in the same hash slot.
func (s *Shared) entryKey(k Key) string { return s.c.Prefix + "{" + k.String() + "}" }
func (s *Shared) fillKey(k Key) string  { return s.entryKey(k) + ":fill" }

// stored is an entry as Redis holds it: the format's version, when it expires, the entry.
type stored struct {
	V       int    `json:"v"`
	Expires int64  `json:"expires_ms"`
	Entry   *Entry `json:"entry"`
}

const storedVersion = 1

// Get implements Store: the L1, then Redis (a hit there is kept in the L1 for the rest of its
// TTL).
func (s *Shared) Get(ctx context.Context, k Key) (*Entry, bool) {
	if e, ok := s.l1.Get(ctx, k); ok {
		return e, true
	}
	if !s.c.Store.Use() {
		return nil, false
	}
	octx, cancel := context.WithTimeout(ctx, s.c.Timeout)
	defer cancel()
	b, err := s.c.Store.Client().Get(octx, s.entryKey(k)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false
	}
	if err != nil {
		s.failed(ctx, err)
		return nil, false
	}
	e, ttl := s.decode(b)
	if e == nil {
		return nil, false
	}
	_ = s.l1.Put(ctx, k, e, ttl)
	return e, true
}

// decode returns the entry in b and its remaining TTL, or nil when b is of another format
// version, malformed, or expired.
func (s *Shared) decode(b []byte) (*Entry, time.Duration) {
	var st stored
	if err := json.Unmarshal(b, &st); err != nil || st.V != storedVersion || st.Entry == nil {
		return nil, 0
	}
	ttl := time.Until(time.UnixMilli(st.Expires))
	if ttl <= 0 {
		return nil, 0
	}
	return st.Entry, ttl
}

// Put implements Store: in the L1, and in Redis unless an entry is there already (written once:
// every replica replays the first answer; Delete it first to replace it) or it is larger than
// MaxEntryBytes. A fill claim of this store on k ends with it.
func (s *Shared) Put(ctx context.Context, k Key, e *Entry, ttl time.Duration) error {
	_ = s.l1.Put(ctx, k, e, ttl)
	if ttl <= 0 || !s.c.Store.Use() {
		return nil
	}
	b, err := json.Marshal(stored{V: storedVersion, Expires: time.Now().Add(ttl).UnixMilli(), Entry: e})
	if err != nil {
		return fmt.Errorf("cache: encode entry: %w", err)
	}
	octx, cancel := context.WithTimeout(ctx, s.c.Timeout)
	defer cancel()
	p := s.c.Store.Client().Pipeline()
	if int64(len(b)) <= s.c.MaxEntryBytes {
		p.SetNX(octx, s.entryKey(k), b, ttl)
	}
	unclaim.Eval(octx, p, []string{s.fillKey(k)}, s.owner) // a few bytes of script: no NOSCRIPT round trip
	if _, err := p.Exec(octx); err != nil && !errors.Is(err, redis.Nil) {
		s.failed(ctx, err)
	}
	return nil
}

// Delete implements Store.
func (s *Shared) Delete(ctx context.Context, k Key) error {
	_ = s.l1.Delete(ctx, k)
	if !s.c.Store.Use() {
		return nil
	}
	octx, cancel := context.WithTimeout(ctx, s.c.Timeout)
	defer cancel()
	if err := s.c.Store.Client().Del(octx, s.entryKey(k)).Err(); err != nil {
		s.failed(ctx, err)
	}
	return nil
}

var _ Filler = (*Shared)(nil)

// Claim is called on a miss by the one call of this replica that is about to produce k's answer.
// It claims the filling of k (a marker key living FillWait); when another replica holds the claim
// it waits, up to FillWait, for that replica's entry and returns it. It returns nil when the
// caller is to call the engine: it holds the claim, the wait ran out, or Redis failed.
func (s *Shared) Claim(ctx context.Context, k Key) *Entry {
	if !s.c.Store.Use() {
		return nil
	}
	octx, cancel := context.WithTimeout(ctx, s.c.Timeout)
	claimed, err := s.c.Store.Client().SetNX(octx, s.fillKey(k), s.owner, s.c.FillWait).Result()
	cancel()
	if err != nil {
		s.failed(ctx, err)
		return nil
	}
	if claimed {
		return nil
	}
	// Another replica is filling: poll for its entry until it is stored, the claim is gone (it
	// failed, or expired), or the wait is over.
	deadline := time.Now().Add(s.c.FillWait)
	t := time.NewTicker(fillPoll)
	defer t.Stop()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		octx, cancel := context.WithTimeout(ctx, s.c.Timeout)
		p := s.c.Store.Client().Pipeline()
		get := p.Get(octx, s.entryKey(k))
		filling := p.Exists(octx, s.fillKey(k))
		_, err := p.Exec(octx)
		cancel()
		if err != nil && !errors.Is(err, redis.Nil) {
			s.failed(ctx, err)
			return nil
		}
		if b, err := get.Bytes(); err == nil {
			if e, ttl := s.decode(b); e != nil {
				_ = s.l1.Put(ctx, k, e, ttl)
				return e
			}
		}
		if filling.Val() == 0 {
			return nil // the filler gave up (or its marker expired) without an entry
		}
	}
	return nil
}

// unclaim deletes a fill marker if this store holds it.
var unclaim = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// Unclaim ends this store's claim on k without an entry (the call failed, or its answer is not
// to be stored), so that waiting replicas stop waiting.
func (s *Shared) Unclaim(ctx context.Context, k Key) {
	if !s.c.Store.Use() {
		return
	}
	octx, cancel := context.WithTimeout(ctx, s.c.Timeout)
	defer cancel()
	if err := unclaim.Run(octx, s.c.Store.Client(), []string{s.fillKey(k)}, s.owner).Err(); err != nil {
		s.failed(ctx, err)
	}
}

// failed reports a failed operation, unless it failed because the caller's context ended.
func (s *Shared) failed(ctx context.Context, err error) {
	if ctx.Err() == nil {
		s.c.Store.Fail(ctx, fmt.Errorf("cache: redis: %w", err))
	}
}
