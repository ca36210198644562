package limit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrStoreUnavailable is the error of every store operation while the shared store cannot be
// reached and the store is set to deny: the Limiter answers it with a 503 and retry-after.
var ErrStoreUnavailable = errors.New("limit: the shared store is unreachable")

// RedisConfig configures a Redis store.
type RedisConfig struct {
	// Client is the connection (a single server or a Redis Cluster). Required. The store closes
	// it on Close.
	Client redis.UniversalClient
	// Timeout is how long one operation (one round trip) waits for Redis's answer. An answer
	// later than that fails the operation (the Limiter answers 503) but does not mark Redis
	// unreachable: only a lost connection, or failRun failures in a row, does (see failed).
	// Default DefaultTimeout.
	Timeout time.Duration
	// Deny refuses every operation while Redis cannot be reached (the Limiter answers 503 with
	// retry-after). Default false: allow, serving from this replica's own counters, each limit
	// divided by the number of live replicas (see Live).
	Deny bool
	// Replicas is the least divisor of every limit while Redis cannot be reached: the divisor is
	// the number of live replicas Redis last reported, or this when larger (or when Redis was
	// never reached). Default 1.
	Replicas int
	// LeaseTTL is how long this replica's concurrency slots outlive its last renewal; it renews
	// them every LeaseTTL/3. Default 10s.
	LeaseTTL time.Duration
	// Prefix starts every key. Default "layer0:".
	Prefix string
	// ReplicaID names this replica's concurrency slots. Default: the host name and a random
	// suffix.
	ReplicaID string
	// Logger receives one line each time Redis becomes unreachable or reachable again, or is
	// found to have lost its state. Default: discard.
	Logger *slog.Logger
	// OnError, when set, is called once for each operation that could not use Redis (it failed,
	// or was not tried because Redis was unreachable), for the layer0_store_errors_total counter.
	OnError func()
}

// Redis is a Store in Redis, shared by every layer0 replica that uses the same server: a rate
// cell is one key holding its TAT, updated by one Lua script per operation (check and take in one
// round trip, with the arithmetic of the Memory store, so the limits are exact across replicas);
// a gauge is a hash of the slots each replica holds plus a sorted set of the replicas' lease
// expiries. Keys are hash-tagged by scope (an API key, or global), so Redis Cluster serves them
// and one script can take a request's admission in a scope at once. A Limiter on this store runs
// each of a request's operations in one round trip (redisbatch.go): admission, reservation, the
// headers, and the settlement with the release; a stream's output tokens are written at most
// every chargeEvery. Safe for concurrent use.
type Redis struct {
	c         RedisConfig
	ttlMS     string
	epoch0    uint64 // where this store's gauges start numbering their count's fields (random)
	up        atomic.Bool
	probing   atomic.Bool
	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	errCount  atomic.Uint64
	health    health
	cluster   bool // a Redis Cluster: a script takes keys of one shard only

	mu     sync.Mutex
	rates  map[string]*redisRate
	gauges map[string]*redisGauge
}

// NewRedis returns a store on c.Client and starts its lease renewal. Close it when done.
func NewRedis(c RedisConfig) (*Redis, error) {
	if c.Client == nil {
		return nil, errors.New("limit: redis store: no client")
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	c.Replicas = max(c.Replicas, 1)
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 10 * time.Second
	}
	if c.Prefix == "" {
		c.Prefix = "layer0:"
	}
	if c.ReplicaID == "" {
		c.ReplicaID = NewReplicaID()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	var e [4]byte
	_, _ = rand.Read(e[:])
	s := &Redis{c: c, ttlMS: strconv.FormatInt(c.LeaseTTL.Milliseconds(), 10), closed: make(chan struct{}),
		epoch0: uint64(e[0])<<24 | uint64(e[1])<<16 | uint64(e[2])<<8 | uint64(e[3]),
		rates:  map[string]*redisRate{}, gauges: map[string]*redisGauge{}}
	s.health.init(s)
	_, s.cluster = c.Client.(*redis.ClusterClient)
	s.up.Store(true)
	s.wg.Add(1)
	go s.renewLoop()
	return s, nil
}

// NewReplicaID names this replica in a shared store: the host name and a random suffix, so that
// two processes on one host, or a restarted one, never share a name.
func NewReplicaID() string {
	host, _ := os.Hostname()
	var b [6]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// DialRedis returns a client for urls: one redis:// or rediss:// URL for a single server, or
// several (the seed nodes) for a Redis Cluster. password, when not empty, overrides the URLs'.
// Operations are bounded by timeout and never retried by the client: a script that timed out may
// still run, and running it again could count a request twice.
func DialRedis(urls []string, password string, timeout time.Duration) (redis.UniversalClient, error) {
	if len(urls) == 0 {
		return nil, errors.New("limit: redis: no URL")
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	o, err := redis.ParseURL(urls[0])
	if err != nil {
		return nil, fmt.Errorf("limit: redis: %w", err)
	}
	if password != "" {
		o.Password = password
	}
	// Connecting may take longer than one operation; operations may not.
	dial := max(timeout, 250*time.Millisecond)
	if len(urls) == 1 {
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = dial, timeout, timeout
		o.MaxRetries = -1
		o.DialerRetries = 1 // a refused connection is an outage, known at once (not after retries)
		o.ContextTimeoutEnabled = true
		o.DisableIdentity = true
		return redis.NewClient(o), nil
	}
	addrs := make([]string, 0, len(urls))
	for _, u := range urls {
		p, err := url.Parse(u)
		if err != nil || p.Host == "" {
			return nil, fmt.Errorf("limit: redis: bad cluster node URL %q", redactURL(u))
		}
		addrs = append(addrs, p.Host)
	}
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: addrs, Username: o.Username, Password: o.Password, TLSConfig: o.TLSConfig,
		DialTimeout: dial, ReadTimeout: timeout, WriteTimeout: timeout, MaxRetries: -1, DialerRetries: 1,
		ContextTimeoutEnabled: true, DisableIdentity: true,
	}), nil
}

func redactURL(s string) string {
	if p, err := url.Parse(s); err == nil && p.User != nil {
		p.User = url.User("xxx")
		return p.String()
	}
	return s
}

// Rate implements Store. Cells with equal ids are the same state, in this process and in every
// replica on the same Redis.
func (s *Redis) Rate(id string) RateCell {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.rates[id]
	if !ok {
		c = &redisRate{s: s, key: []string{s.cellKey(id)}}
		s.rates[id] = c
	}
	return c
}

// Gauge implements Store. A gauge counts the slots of every replica whose lease is current.
func (s *Redis) Gauge(id string) Gauge {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, ok := s.gauges[id]
	if !ok {
		k := s.cellKey(id)
		g = newRedisGauge(s, k)
		s.gauges[id] = g
	}
	return g
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

// Up reports whether Redis answered the last operation (or the last probe since it failed).
func (s *Redis) Up() bool { return s.up.Load() }

// Client is the store's connection, for another user of the same Redis (the shared response
// cache), whose operations then share the store's view of whether Redis is reachable (Use, Fail).
func (s *Redis) Client() redis.UniversalClient { return s.c.Client }

// Use reports whether another user of the client should try Redis now; when not, its operation
// is counted as an error, as the limits' own are.
func (s *Redis) Use() bool { return s.usable() }

// Fail records another user's operation that failed: counted; a lost connection marks Redis
// unreachable until a probe answers, while a late answer does not (the other user's timeout is
// its own, and says nothing of the limits' round trips). An error caused by ctx ending is not the
// store's.
func (s *Redis) Fail(ctx context.Context, err error) {
	if ctx.Err() == nil && !connLost(err) {
		s.counted()
		return
	}
	s.failed(ctx, err)
}

// Errors returns how many operations could not use Redis.
func (s *Redis) Errors() uint64 { return s.errCount.Load() }

// Close stops renewing this replica's leases and heartbeat, removes the heartbeat (the others'
// divisor drops at their next heartbeat) and closes the client. It does not release the slots
// still held: they expire after the lease TTL, as a dead replica's would.
func (s *Redis) Close() error {
	first := false
	s.closeOnce.Do(func() {
		first = true
		s.mu.Lock()
		close(s.closed)
		s.mu.Unlock()
	})
	if !first {
		return nil
	}
	s.wg.Wait()
	s.unbeat() // after the heartbeats stop: none writes the entry again
	if err := s.c.Client.Close(); err != nil {
		return fmt.Errorf("limit: redis: %w", err)
	}
	return nil
}

// usable says whether to try Redis now; when not, the caller falls back (allow) or fails (deny),
// and the operation is counted as an error.
func (s *Redis) usable() bool {
	if s.up.Load() {
		return true
	}
	s.counted()
	return false
}

func (s *Redis) counted() {
	s.errCount.Add(1)
	if s.c.OnError != nil {
		s.c.OnError()
	}
}

// probe starts, once, a loop that pings Redis until it answers, then writes back what this
// replica knows (restore: the slots it holds exactly, the rate cells as it last saw them and
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
				s.restore() // Redis may have restarted empty, or missed writes: every count is re-asserted
				s.health.fails.Store(0)
				s.up.Store(true)
				s.c.Logger.Info("shared store (Redis) reachable again")
				return
			}
		}
	}()
}

// renewLoop writes the heartbeat every period and renews the leases every third of their TTL;
// when Redis's state was found lost, it writes everything back at once.
func (s *Redis) renewLoop() {
	defer s.wg.Done()
	t := time.NewTicker(s.health.every)
	defer t.Stop()
	renewed := time.Now()
	s.beat()
	for {
		select {
		case <-s.closed:
			return
		case <-t.C:
		case <-s.health.kick:
		}
		if !s.up.Load() {
			continue
		}
		s.beat()
		if s.health.restore.Swap(false) { // found by this heartbeat or elsewhere, whichever woke the loop
			s.restore()
			renewed = time.Now()
		}
		if time.Since(renewed) >= s.c.LeaseTTL/3 {
			renewed = time.Now()
			s.renewAll()
		}
	}
}

// staleAll marks every gauge's count in Redis as possibly wrong: the next operation on each (or
// the renewal of one holding slots) writes it exactly.
func (s *Redis) staleAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.gauges {
		g.markStale()
	}
}

func (s *Redis) renewAll() {
	s.mu.Lock()
	gs := make([]*redisGauge, 0, len(s.gauges))
	for _, g := range s.gauges {
		gs = append(gs, g)
	}
	s.mu.Unlock()
	for _, g := range gs {
		g.renew()
	}
}

func (s *Redis) run(ctx context.Context, sc *redis.Script, keys []string, args ...any) ([]any, error) {
	ctx, cancel := context.WithTimeout(ctx, s.c.Timeout)
	defer cancel()
	v, err := sc.Run(ctx, s.c.Client, keys, args...).Slice()
	if err != nil {
		return nil, err
	}
	s.ok()
	return v, nil
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

// pair decodes a script's {n, flag} reply.
func pair(v []any) (int64, bool) {
	if len(v) != 2 {
		return 0, false
	}
	n, _ := v[0].(int64)
	f, _ := v[1].(int64)
	return n, f == 1
}
