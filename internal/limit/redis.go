package limit

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/layer0ai/layer0/internal/store"
)

// ErrStoreUnavailable is the error of every store operation while the shared store cannot be
// reached and the store is set to deny: the Limiter answers it with a 503 and retry-after.
var ErrStoreUnavailable = errors.New("limit: the shared store is unreachable")

// Redis is a Store in Redis, shared by every layer0 replica that uses the same server: a rate
// cell is one key holding its TAT, updated by one Lua script per operation (check and take in one
// round trip, with the arithmetic of the Memory store, so the limits are exact across replicas);
// a gauge is a hash of the slots each replica holds plus a sorted set of the replicas' lease
// expiries. Keys are hash-tagged by scope (an API key, or global), so Redis Cluster serves them
// and one script can take a request's admission in a scope at once. A Limiter on this store runs
// each of a request's operations in one round trip (redisbatch.go): admission, reservation, the
// headers, and the settlement with the release; a stream's output tokens are written at most
// every chargeEvery. The connection and its health (the circuit, the heartbeats, the live
// replicas that divide each limit while Redis is unreachable) are the store.Redis's; this store
// is one of its Keepers. Safe for concurrent use.
type Redis struct {
	st      *store.Redis
	c       redisConf
	ttlMS   string
	epoch0  uint64 // where this store's gauges start numbering their count's fields (random)
	cluster bool   // a Redis Cluster: a script takes keys of one shard only
	forget  func()

	mu     sync.Mutex
	rates  map[string]*redisRate
	gauges map[string]*redisGauge
}

// redisConf is what the limits read of the store's configuration.
type redisConf struct {
	Client    redis.UniversalClient
	Timeout   time.Duration
	Deny      bool
	LeaseTTL  time.Duration
	Prefix    string
	ReplicaID string
}

// NewRedis returns the limits' store on st's connection; st renews its leases and has it write
// its counts back after Redis lost them. Close it when done (before st).
func NewRedis(st *store.Redis) (*Redis, error) {
	if st == nil {
		return nil, errors.New("limit: redis store: no connection")
	}
	var e [4]byte
	_, _ = rand.Read(e[:])
	s := &Redis{st: st, c: redisConf{Client: st.Client(), Timeout: st.Timeout(), Deny: st.Deny(), LeaseTTL: st.LeaseTTL(),
		Prefix: st.Prefix(), ReplicaID: st.ReplicaID()},
		ttlMS:  strconv.FormatInt(st.LeaseTTL().Milliseconds(), 10),
		epoch0: uint64(e[0])<<24 | uint64(e[1])<<16 | uint64(e[2])<<8 | uint64(e[3]),
		rates:  map[string]*redisRate{}, gauges: map[string]*redisGauge{}, cluster: st.Cluster()}
	s.forget = st.Keep(s)
	return s, nil
}

// Rate implements Store. Cells with equal ids are the same state, in this process and in every
// replica on the same Redis.
func (s *Redis) Rate(id string) RateCell {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cell(s.rates, id, func() *redisRate { return &redisRate{s: s, key: []string{s.cellKey(id)}} })
}

// Gauge implements Store. A gauge counts the slots of every replica whose lease is current.
func (s *Redis) Gauge(id string) Gauge {
	s.mu.Lock()
	defer s.mu.Unlock()
	return cell(s.gauges, id, func() *redisGauge { return newRedisGauge(s, s.cellKey(id)) })
}

// cellKey names the Redis key of cell id. The hash tag is the cell's scope — the API key's
// quoted name, or "global" — so every cell of one scope is on one Redis Cluster shard and one
// script can check and take all of a request's limits in that scope at once.
func (s *Redis) cellKey(id string) string {
	tag, rest := id, ""
	if name, ok := strings.CutPrefix(id, "key/"); ok {
		if q, err := strconv.QuotedPrefix(name); err == nil {
			tag, rest = id[:len("key/")+len(q)], id[len("key/")+len(q):]
		}
	} else if i := strings.IndexByte(id, '/'); i >= 0 {
		tag, rest = id[:i], id[i:]
	}
	return s.c.Prefix + "{" + tag + "}" + rest
}

// Store is the connection the limits use.
func (s *Redis) Store() *store.Redis { return s.st }

// Up reports whether Redis answered the last operation (or the last probe since it failed).
func (s *Redis) Up() bool { return s.st.Up() }

// Errors returns how many operations could not use Redis.
func (s *Redis) Errors() uint64 { return s.st.Errors() }

// Live returns how many replicas wrote a heartbeat within a lease TTL (store.Redis.Live).
func (s *Redis) Live() int { return s.st.Live() }

// Close stops the store's calls into the limits (write-backs, lease renewals). It does not
// release the slots still held: they expire after the lease TTL unless renewed by a successor
// on the same connection, as a dead replica's would. The connection is its owner's to close.
func (s *Redis) Close() error {
	s.forget()
	return nil
}

// The connection's health, as the limits use it.
func (s *Redis) usable() bool                               { return s.st.Use() }
func (s *Redis) failed(ctx context.Context, err error) bool { return s.st.Failed(ctx, err) }
func (s *Redis) counted()                                   { s.st.CountError() }
func (s *Redis) settled(ctx context.Context) error          { return s.st.Settled(ctx) }
func (s *Redis) ok()                                        { s.st.OK() }
func (s *Redis) share(n int64) int64                        { return s.st.Share(n) }
func (s *Redis) lost(what string)                           { s.st.Lost(what) }

func (s *Redis) run(ctx context.Context, sc *redis.Script, keys []string, args ...any) ([]any, error) {
	return s.st.Run(ctx, sc, keys, args...)
}

// The GCRA script keeps a cell's TAT as decimal Unix nanoseconds and works relative to now: Lua
// numbers are doubles, exact only to 2^53, so the absolute time is split into seconds and
// nanoseconds and only the offset from now (well within 2^53 ns, 104 days) is a number. It
// returns {taken, offset of the TAT from now after the call}, the Go side computing the Status
// with the same functions as the Memory store. The key expires when the cell is full again.
var gcraScript = redis.NewScript(gcraLua + `
local took, rel = gcra(KEYS[1], ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]))
return {took, rel}
`)

// gcraLua defines gcra(key, op, now s, now ns, inc, period), the GCRA script's operation on one
// cell, returning took (1 or 0) and the TAT's offset from now after it (op seed raises the offset
// to inc where it is less: a state written back after Redis lost it); the batched scripts
// (redisbatch.go) run the same function on several cells of one scope.
const gcraLua = `
local function gcra(key, op, nh, nl, inc, period)
  local rel = 0
  local s = redis.call('GET', key)
  if s then
    rel = (tonumber(string.sub(s, 1, -10)) - nh) * 1e9 + (tonumber(string.sub(s, -9)) - nl)
    if rel < 0 then rel = 0 end
  end
  if op == 'peek' then return 0, rel end
  local nxt
  if op == 'take' then
    nxt = rel + inc
    if nxt > period then return 0, rel end
  elseif op == 'seed' then
    if rel >= inc then return 0, rel end
    nxt = inc
  elseif op == 'refund' then
    nxt = rel - inc
    if nxt < 0 then nxt = 0 end
  else
    nxt = rel + inc
  end
  if nxt <= 0 then
    redis.call('DEL', key)
  else
    local lo = nl + nxt
    local carry = math.floor(lo / 1e9)
    redis.call('SET', key, string.format('%d%09d', nh + carry, lo - carry * 1e9), 'PX', math.floor(nxt / 1e6) + 1)
  end
  return 1, nxt
end
`

type redisRate struct {
	s     *Redis
	key   []string
	local memRate      // this replica's own state while Redis is unreachable
	seen  atomic.Int64 // the cell's TAT as Redis last answered it (Unix ns): written back if Redis loses it
	owed  atomic.Int64 // TAT advance (ns) taken but not in Redis yet: written when Redis is back
}

// call runs the GCRA script and returns whether it took and the TAT after it.
func (c *redisRate) call(ctx context.Context, now int64, op string, inc int64, r Rate) (bool, int64, error) {
	v, err := c.s.run(ctx, gcraScript, c.key, op, now/1e9, now%1e9, inc, int64(r.Period))
	if err != nil {
		return false, 0, err
	}
	if len(v) != 2 {
		return false, 0, fmt.Errorf("limit: redis: unexpected reply %v", v)
	}
	ok, _ := v[0].(int64)
	rel, _ := v[1].(int64)
	c.seen.Store(now + rel)
	return ok == 1, now + rel, nil
}

// owe records cost units taken (negative: refunded) that Redis does not have yet. A refund
// never makes the debt negative: one of units Redis already has is lost (stricter, not looser).
func (c *redisRate) owe(r Rate, cost int64) {
	if cost >= 0 {
		c.owed.Add(interval(r, cost))
		return
	}
	d := interval(r, -cost)
	for {
		o := c.owed.Load()
		if o <= 0 || c.owed.CompareAndSwap(o, max(o-d, 0)) {
			return
		}
	}
}

func (c *redisRate) Take(ctx context.Context, now time.Time, r Rate, cost int64) (Status, bool, error) {
	if !c.s.usable() {
		return c.fallbackTake(ctx, now, r, cost)
	}
	if err := c.s.settled(ctx); err != nil {
		return Status{}, false, err
	}
	n := now.UnixNano()
	op := "take"
	if cost > r.Limit {
		op = "peek" // never fits: only the state is needed, for the Status
	}
	ok, tat, err := c.call(ctx, n, op, interval(r, cost), r)
	if err != nil {
		if c.s.failed(ctx, err) {
			return c.fallbackTake(ctx, now, r, cost)
		}
		return Status{}, false, fmt.Errorf("limit: redis: %w", err)
	}
	st := status(tat, n, r)
	if !ok {
		_, _, st.RetryAfter = gcraTake(tat, n, r, cost)
		return st, false, nil
	}
	return st, true, nil
}

// localRate is the rate of the cell's own state while Redis is unreachable: the limit's share,
// over the same period, so the same TAT offset is the same fraction used.
func (c *redisRate) localRate(r Rate) Rate { return Rate{Limit: c.s.share(r.Limit), Period: r.Period} }

// seedLocal starts the local state no fuller than Redis last said the cell was: each replica's
// share of what was left, not of the whole limit.
func (c *redisRate) seedLocal() {
	seen := c.seen.Load()
	for {
		t := c.local.tat.Load()
		if t >= seen || c.local.tat.CompareAndSwap(t, seen) {
			return
		}
	}
}

func (c *redisRate) fallbackTake(ctx context.Context, now time.Time, r Rate, cost int64) (Status, bool, error) {
	if c.s.c.Deny {
		return Status{}, false, ErrStoreUnavailable
	}
	c.seedLocal()
	st, ok, err := c.local.Take(ctx, now, c.localRate(r), cost)
	if ok {
		c.owe(r, cost)
	}
	return st, ok, err
}

func (c *redisRate) Add(ctx context.Context, now time.Time, r Rate, cost int64) (Status, error) {
	if !c.s.usable() {
		return c.fallbackAdd(ctx, now, r, cost)
	}
	n := now.UnixNano()
	op, inc := "add", interval(r, cost)
	if cost < 0 {
		op, inc = "refund", interval(r, -cost)
	}
	_, tat, err := c.call(ctx, n, op, inc, r)
	if err != nil {
		if c.s.failed(ctx, err) {
			return c.fallbackAdd(ctx, now, r, cost)
		}
		if cost > 0 { // a charge is never dropped: written when Redis is back, or after its loss
			c.owe(r, cost)
		}
		return Status{}, fmt.Errorf("limit: redis: %w", err)
	}
	return status(tat, n, r), nil
}

func (c *redisRate) fallbackAdd(ctx context.Context, now time.Time, r Rate, cost int64) (Status, error) {
	if c.s.c.Deny {
		return Status{}, ErrStoreUnavailable
	}
	c.seedLocal()
	c.owe(r, cost)
	return c.local.Add(ctx, now, c.localRate(r), cost)
}

func (c *redisRate) Peek(ctx context.Context, now time.Time, r Rate) (Status, error) {
	if !c.s.usable() {
		return c.fallbackPeek(ctx, now, r)
	}
	n := now.UnixNano()
	_, tat, err := c.call(ctx, n, "peek", 0, r)
	if err != nil {
		if c.s.failed(ctx, err) {
			return c.fallbackPeek(ctx, now, r)
		}
		return Status{}, fmt.Errorf("limit: redis: %w", err)
	}
	st := status(tat, n, r)
	if st.Remaining < 1 {
		_, _, st.RetryAfter = gcraTake(tat, n, r, 1)
	}
	return st, nil
}

func (c *redisRate) fallbackPeek(ctx context.Context, now time.Time, r Rate) (Status, error) {
	if c.s.c.Deny {
		return Status{}, ErrStoreUnavailable
	}
	c.seedLocal()
	return c.local.Peek(ctx, now, c.localRate(r))
}
