package limit

import (
	"context"
	"fmt"
	"github.com/layer0ai/layer0/internal/store"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A gauge (a concurrency limit) in Redis is two keys of one hash tag: a hash of field → slots,
// and a sorted set of field → lease expiry (Redis time, ms). A replica's field is its id and an
// epoch, "ID#EPOCH". Every script first drops the fields whose lease expired, so the slots of a
// replica that died come back within the lease TTL.
//
// The count is commutative: an admission checks the sum of the hash against the limit and adds
// one to its replica's field (HINCRBY), a release subtracts one, in the same one-round-trip
// scripts, so a replica's admissions and releases of one scope run side by side, none waiting for
// another's round trip. A delta is applied only to a field whose lease is current: a field lost
// (Redis restarted empty, or the lease expired while the replica was cut off) makes the script
// answer "lost" and change nothing, never count from zero.
//
// Re-asserting the exact count is the rare path, needed when the replica cannot know what Redis
// holds: at its first operation, after a failed or timed-out operation (it may or may not have
// run), after a "lost" answer, when Redis comes back, and after an idle spell long enough for its
// lease to expire. The gauge is then stale, and the next operation leads a re-assertion: it
// closes the gauge to new operations, waits for the ones in flight to finish (so that the count
// it holds, held, is exactly what Redis was told), and runs its own operation in assert mode
// under a new epoch — the old field deleted, the new one written as held, then the operation's
// delta. A delayed operation of an old epoch (sent before a timeout, run by Redis after) finds
// its field gone and changes nothing, so a re-assertion can never be undone or counted twice;
// a delayed re-assertion can at worst leave a field of its own that no renewal extends, counted
// (stricter, never looser) until its lease runs out.
// The operations arriving meanwhile wait for it (one round trip) and go on. Renewal only extends
// the lease (it never writes a count), unless the gauge is stale.

// concLua defines the concurrency cells' operations, used by every script that touches a gauge:
//
// concNow() is Redis's time in ms.
//
// concOpen(slots, leases, field, old, base, ttl, now, force) drops the expired fields; with
// base ≥ 0 asserts the replica's count (old's field and lease deleted, field set to base, its
// lease written); with base < 0 checks that field's lease is current and answers false (lost)
// when it is not, else writes the lease when a third of it is spent, or always when force.
// The keys' TTL, set with every lease write, is never shorter than a lease in them.
//
// concSum(slots) is the sum of the live fields.
//
// concRelease(slots, leases, field, old, base, ttl, now) gives back one slot (base < 0), or
// asserts base (which counts the release), and answers false when the field was lost.
const concLua = `
local function concNow()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function concOpen(slots, leases, field, old, base, ttl, now, force)
  local dead = redis.call('ZRANGEBYSCORE', leases, '-inf', now)
  for i = 1, #dead do redis.call('HDEL', slots, dead[i]) end
  if #dead > 0 then redis.call('ZREMRANGEBYSCORE', leases, '-inf', now) end
  if base >= 0 then
    if old ~= '' and old ~= field then
      redis.call('HDEL', slots, old)
      redis.call('ZREM', leases, old)
    end
    redis.call('HSET', slots, field, base)
  else
    local exp = redis.call('ZSCORE', leases, field)
    if not exp then return false end
    if not force and tonumber(exp) >= now + ttl - math.floor(ttl / 3) then return true end
  end
  redis.call('ZADD', leases, now + ttl, field)
  redis.call('PEXPIRE', slots, ttl)
  redis.call('PEXPIRE', leases, ttl)
  return true
end
local function concSum(slots)
  local v = redis.call('HVALS', slots)
  local n = 0
  for i = 1, #v do n = n + tonumber(v[i]) end
  return n
end
local function concRelease(slots, leases, field, old, base, ttl, now)
  if not concOpen(slots, leases, field, old, base, ttl, now, false) then return false end
  if base >= 0 then return true end
  if redis.call('HINCRBY', slots, field, -1) < 0 then
    redis.call('HSET', slots, field, 0)
    return false
  end
  return true
end
`

// gaugeIncScript: ARGV field, old field, base (-1: delta), max, ttl ms. Returns {count after,
// 1} taken, {count, 0} refused, {0, 2} lost.
var gaugeIncScript = redis.NewScript(concLua + `
if not concOpen(KEYS[1], KEYS[2], ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[5]), concNow(), false) then
  return {0, 2}
end
local n = concSum(KEYS[1])
if n >= tonumber(ARGV[4]) then return {n, 0} end
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
return {n + 1, 1}
`)

// gaugeRenewScript: ARGV field, old field, base (-1: extend the lease only), ttl ms. Returns
// {0, 1}, or {0, 2} when the field was lost.
var gaugeRenewScript = redis.NewScript(concLua + `
if not concOpen(KEYS[1], KEYS[2], ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), concNow(), true) then
  return {0, 2}
end
return {0, 1}
`)

// gaugeValueScript sums the slots of the fields whose lease is current.
var gaugeValueScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local kv = redis.call('HGETALL', KEYS[1])
local n = 0
for i = 1, #kv, 2 do
  local exp = redis.call('ZSCORE', KEYS[2], kv[i])
  if exp and tonumber(exp) > now then n = n + tonumber(kv[i + 1]) end
end
return {n, 1}
`)

// opResult is how a gauge operation ended, for exit.
type opResult uint8

const (
	opDone    opResult = iota // Redis ran it
	opLost                    // Redis answered that the replica's field was lost: nothing changed
	opFailed                  // it failed, or may have: Redis may disagree with held
	opNotSent                 // nothing was sent: Redis is as it was
)

// stale reports whether Redis may disagree with held, so that the next operation re-asserts.
func (g *redisGauge) stale() bool { return g.gen.Load() != g.clean.Load() }

// markStale records an event that may leave Redis disagreeing with held (a failure, a change of
// held outside an operation, Redis coming back): a re-assertion that read held before it does not
// make g clean.
func (g *redisGauge) markStale() { g.gen.Add(1) }

type redisGauge struct {
	s    *Redis
	keys []string

	held     atomic.Int64           // slots this replica holds in Redis, as it counts them
	inflight atomic.Int64           // operations between enter and exit, not leading a re-assertion
	gen      atomic.Uint64          // counts the events that may leave Redis disagreeing with held
	clean    atomic.Uint64          // the gen the last re-assertion covered: stale while gen ≠ clean
	sync     atomic.Pointer[gsync]  // the re-assertion under way: new operations wait for it
	field    atomic.Pointer[gfield] // this replica's field (and lease member) in Redis now
	epoch    atomic.Uint64          // the last epoch used in a field's name
	lastOp   atomic.Int64           // when an operation last ended (Unix ns)

	local memGauge // slots taken from this replica's own share while Redis was unreachable
}

// gsync is one re-assertion: done is closed when it ends; drained is signalled when the last
// operation in flight leaves.
type gsync struct {
	done    chan struct{}
	drained chan struct{}
}

// gfield is a replica's field name, and the same as a script argument (boxed once, not per call).
type gfield struct {
	name string
	arg  any
}

func newGField(name string) *gfield { return &gfield{name: name, arg: name} }

// minusOne is the base argument of a delta, boxed once.
var minusOne any = int64(-1)

func newRedisGauge(s *Redis, key string) *redisGauge {
	g := &redisGauge{s: s, keys: []string{key + ":slots", key + ":leases"}}
	g.field.Store(newGField(""))
	g.epoch.Store(s.epoch0)
	g.gen.Store(1) // stale: nothing written yet, the first operation writes the field and its lease
	return g
}

// gaugeOp is one operation's passage through a gauge: from enter to exit.
type gaugeOp struct {
	g      *redisGauge
	field  *gfield // the field to change
	old    *gfield // assert: the field it replaces
	assert bool    // write held as the count (then the operation's delta), under the new field
	lead   *gsync  // the re-assertion this operation leads
	gen    uint64  // the leader's gen when it read held
}

// args are the scripts' arguments for o: the field, the field it replaces, and the base: the
// count to assert, or -1 for a delta. A release calls it after taking its slot off held.
func (o *gaugeOp) args() (field, old, base any) {
	if !o.assert {
		return o.field.arg, "", minusOne
	}
	return o.field.arg, o.old.arg, o.g.held.Load()
}

// wait bounds how long an operation waits for a re-assertion, and a re-assertion for the
// operations in flight: each of those is bounded by the timeout, and one may first wait for a
// re-assertion of the other scope's gauge.
func (s *Redis) wait() time.Duration { return 3*s.c.Timeout + 100*time.Millisecond }

// enter starts an operation on g. It waits while a re-assertion is under way; when g is stale it
// leads one: it closes g to new operations, waits for those in flight, and returns an op in
// assert mode under a new epoch. It fails when a wait ran out or ctx ended.
//
// An operation that waited for a re-assertion and finds Redis marked unreachable fails rather
// than try Redis (and its timeout) again, unless anyway (the renewal when Redis is back).
func (g *redisGauge) enter(ctx context.Context, anyway bool) (gaugeOp, bool) {
	for range 8 {
		if p := g.sync.Load(); p != nil {
			if !g.await(ctx, p.done) {
				return gaugeOp{}, false
			}
			if !anyway && !g.s.st.Up() { // the re-assertion failed: serve from the fallback
				return gaugeOp{}, false
			}
			continue
		}
		if g.stale() {
			p := &gsync{done: make(chan struct{}), drained: make(chan struct{}, 1)}
			if !g.sync.CompareAndSwap(nil, p) {
				continue
			}
			if !g.stale() { // another re-assertion ended in between
				g.sync.Store(nil)
				close(p.done)
				continue
			}
			if !g.drain(ctx, p) {
				g.sync.Store(nil)
				close(p.done)
				return gaugeOp{}, false
			}
			gen := g.gen.Load() // what a success makes clean: held is read after it
			e := g.epoch.Add(1)
			return gaugeOp{g: g, field: newGField(g.s.c.ReplicaID + "#" + strconv.FormatUint(e, 10)),
				old: g.field.Load(), assert: true, lead: p, gen: gen}, true
		}
		g.inflight.Add(1)
		if g.sync.Load() != nil { // a re-assertion began: wait for it
			g.leave()
			continue
		}
		return gaugeOp{g: g, field: g.field.Load()}, true
	}
	return gaugeOp{}, false
}

// drain waits until no operation is in flight on g (p closes g to new ones).
func (g *redisGauge) drain(ctx context.Context, p *gsync) bool {
	if g.inflight.Load() == 0 {
		return true
	}
	t := time.NewTimer(g.s.wait())
	defer t.Stop()
	for g.inflight.Load() > 0 {
		select {
		case <-p.drained:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
	return true
}

func (g *redisGauge) await(ctx context.Context, done <-chan struct{}) bool {
	t := time.NewTimer(g.s.wait() + g.s.c.Timeout)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// leave ends an operation in flight, waking a re-assertion waiting for the last one.
func (g *redisGauge) leave() {
	if g.inflight.Add(-1) == 0 {
		if p := g.sync.Load(); p != nil {
			select {
			case p.drained <- struct{}{}:
			default:
			}
		}
	}
}

// exit ends o. opLost and opFailed leave g stale; a re-assertion that Redis ran makes its field
// the current one, and g clean unless something made it stale since the count was read.
func (o *gaugeOp) exit(r opResult) {
	g := o.g
	g.lastOp.Store(time.Now().UnixNano())
	if r == opLost || r == opFailed {
		g.markStale()
	}
	if r == opLost && !o.assert {
		// The count was there when last written and is gone: Redis lost its state (FLUSHALL, a
		// restart), and other replicas' counts with it until they write them back.
		g.s.lost("a concurrency count")
	}
	if o.lead == nil {
		g.leave()
		return
	}
	if r == opDone {
		g.field.Store(o.field)
		for c := g.clean.Load(); c < o.gen && !g.clean.CompareAndSwap(c, o.gen); c = g.clean.Load() {
		}
	}
	g.sync.Store(nil)
	close(o.lead.done)
}

// decHeld takes one slot off held, never below zero.
func (g *redisGauge) decHeld() {
	for {
		v := g.held.Load()
		if v <= 0 || g.held.CompareAndSwap(v, v-1) {
			return
		}
	}
}

func (g *redisGauge) Inc(ctx context.Context, limit int64) (int64, bool, error) {
	for range 2 {
		if !g.s.usable() {
			return g.fallbackInc(ctx, limit)
		}
		if err := g.s.settled(ctx); err != nil {
			return 0, false, err
		}
		op, ok := g.enter(ctx, false)
		if !ok {
			g.s.counted()
			return g.fallbackInc(ctx, limit)
		}
		f, old, base := op.args()
		v, err := g.s.run(ctx, gaugeIncScript, g.keys, f, old, base, limit, g.s.ttlMS)
		if err != nil {
			op.exit(opFailed)
			if g.s.failed(ctx, err) {
				return g.fallbackInc(ctx, limit)
			}
			return 0, false, fmt.Errorf("limit: redis: %w", err)
		}
		n, code := gaugeReply(v)
		switch code {
		case 1:
			g.held.Add(1)
			op.exit(opDone)
			return n, true, nil
		case 0:
			op.exit(opDone)
			return n, false, nil
		}
		op.exit(opLost) // the next attempt re-asserts
	}
	g.s.counted()
	return g.fallbackInc(ctx, limit)
}

// gaugeReply decodes a gauge script's {n, code} reply.
func gaugeReply(v []any) (int64, int64) {
	if len(v) != 2 {
		return 0, -1
	}
	n, _ := v[0].(int64)
	c, _ := v[1].(int64)
	return n, c
}

// fallbackInc takes a slot from this replica's share of limit, which the slots it still holds
// in Redis count against: a replica never has more than its share in flight while Redis is away.
func (g *redisGauge) fallbackInc(ctx context.Context, limit int64) (int64, bool, error) {
	if g.s.c.Deny {
		return 0, false, ErrStoreUnavailable
	}
	held := g.held.Load()
	n, ok, err := g.local.Inc(ctx, g.s.share(limit)-held)
	return n + held, ok, err
}

// adoptLocal makes the slots taken from this replica's share while Redis was unreachable slots
// it holds in Redis, written with the next re-assertion: Redis counts them from then on, and
// their releases go to Redis.
func (g *redisGauge) adoptLocal() {
	if n := g.local.n.Swap(0); n > 0 {
		g.held.Add(n)
		g.markStale()
	}
}

// Dec releases a slot: one taken locally if any, else one of this replica's in Redis. It does not
// fail: a release that cannot reach Redis leaves the gauge stale, and the next operation or
// renewal writes the count.
func (g *redisGauge) Dec(ctx context.Context) error {
	if g.decLocal() {
		return nil
	}
	if !g.s.usable() { // written when Redis is back
		g.decHeld()
		g.markStale()
		return nil
	}
	ctx = context.WithoutCancel(ctx) // a slot is given back even for a request that ended
	op, ok := g.enter(ctx, false)
	if !ok {
		g.decHeld()
		g.markStale()
		return nil
	}
	g.decHeld()
	f, old, base := op.args()
	v, err := g.s.run(ctx, scopeScript, g.keys, 0, 0, 0, g.s.ttlMS, f, old, base)
	if err != nil {
		op.exit(opFailed)
		g.s.failed(ctx, err)
		return nil
	}
	if len(v) != 1 || v[0] != int64(1) {
		op.exit(opLost)
		return nil
	}
	op.exit(opDone)
	return nil
}

// decLocal gives back a slot taken from this replica's own share while Redis was unreachable,
// and reports whether there was one.
func (g *redisGauge) decLocal() bool {
	for {
		v := g.local.n.Load()
		if v <= 0 {
			return false
		}
		if g.local.n.CompareAndSwap(v, v-1) {
			return true
		}
	}
}

// renew extends this replica's lease on its slots while it holds some, and re-asserts its count
// when the gauge is stale. A gauge holding none is left to expire; when its lease may have (no
// operation for a third of the TTL), the gauge is marked stale, so that its next operation
// writes a fresh lease rather than find its field lost.
func (g *redisGauge) renew() {
	if g.held.Load() == 0 {
		if !g.stale() && time.Since(time.Unix(0, g.lastOp.Load())) > g.s.c.LeaseTTL/3 {
			g.markStale()
		}
		return
	}
	ctx := context.Background()
	for range 2 {
		op, ok := g.enter(ctx, true)
		if !ok {
			return
		}
		f, old, base := op.args()
		v, err := g.s.run(ctx, gaugeRenewScript, g.keys, f, old, base, g.s.ttlMS)
		if err != nil {
			op.exit(opFailed)
			g.s.failed(ctx, err)
			return
		}
		if _, code := gaugeReply(v); code == 1 {
			op.exit(opDone)
			return
		}
		op.exit(opLost) // the next attempt re-asserts
	}
}

func (g *redisGauge) Value(ctx context.Context) (int64, error) {
	if !g.s.usable() {
		return g.fallbackValue(ctx)
	}
	v, err := g.s.run(ctx, gaugeValueScript, g.keys)
	if err != nil {
		if g.s.failed(ctx, err) {
			return g.fallbackValue(ctx)
		}
		return 0, fmt.Errorf("limit: redis: %w", err)
	}
	n, _ := store.Pair(v)
	return n, nil
}

func (g *redisGauge) fallbackValue(ctx context.Context) (int64, error) {
	if g.s.c.Deny {
		return 0, ErrStoreUnavailable
	}
	n, err := g.local.Value(ctx)
	return n + g.held.Load(), err
}
