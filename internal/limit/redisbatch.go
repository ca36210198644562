package limit

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A request's limit operations on Redis, each in one round trip whatever the number of cells:
// admission (concurrency, requests, the output-token check) is one script per scope that checks
// every cell and takes them all or none; the key's scope and the global one go in one pipeline.
// Reservations, settlements, charges, undos and releases are one scopeScript running the
// per-cell operations: one for all the cells on one Redis, one per scope on a Redis Cluster.
// Each reports false when it did not run (Redis unreachable, or the call failed, which marks it
// so): the Limiter then runs the cells one by one, which serve from this replica's own state.

// admitScript checks and takes one scope's admission atomically. KEYS: the requests cell, the
// output-tokens cell, the concurrency slots and leases — all of one hash tag (an absent cell's
// key is another of the scope's, never touched). ARGV: now (s, ns), the requests interval
// (0: unlimited) and period, the room one output token needs (0: unlimited) and the period,
// the replica's field, the field it replaces and the count to assert (-1: none; see concLua),
// the concurrency max (0: unlimited), the lease TTL (ms), and this replica's heartbeat entry
// (empty: no check) in the heartbeat set, KEYS[5] (on one Redis only: a Cluster's script takes
// keys of one shard).
// Returns {0, slots after, requests TAT offset after, output TAT offset} when taken (the offsets
// for the rate-limit headers); {1, slots} refused by concurrency; {2, TAT offset} by requests;
// {3, TAT offset} by output tokens; {4, 0} when the replica's field was lost (nothing taken: the
// caller re-asserts and tries again); {5, 0} when the heartbeat entry is gone: Redis lost its
// state, and this admission waits for every replica to write its counts back (nothing taken).
// The GCRA arithmetic is gcraScript's. The slot is one HINCRBY on the replica's field, checked
// against the sum of the live fields, so admissions of one replica commute and need no order. The lease is written (ZADD and both keys' PEXPIRE) only
// when the field is new or its lease has less than two thirds of the TTL left: a current lease
// outlives the next renewal (every TTL/3).
var admitScript = redis.NewScript(concLua + `
if ARGV[12] ~= '' and not redis.call('ZSCORE', KEYS[5], ARGV[12]) then return {5, 0} end
local nh, nl = tonumber(ARGV[1]), tonumber(ARGV[2])
local function rel(k)
  local s = redis.call('GET', k)
  if not s then return 0 end
  local r = (tonumber(string.sub(s, 1, -10)) - nh) * 1e9 + (tonumber(string.sub(s, -9)) - nl)
  if r < 0 then return 0 end
  return r
end
local cmax, n = tonumber(ARGV[10]), 0
if cmax > 0 then
  if not concOpen(KEYS[3], KEYS[4], ARGV[7], ARGV[8], tonumber(ARGV[9]), tonumber(ARGV[11]), concNow(), false) then
    return {4, 0}
  end
  n = concSum(KEYS[3])
  if n >= cmax then return {1, n} end
end
local rinc, rnext = tonumber(ARGV[3]), 0
if rinc > 0 then
  local r = rel(KEYS[1])
  rnext = r + rinc
  if rnext > tonumber(ARGV[4]) then return {2, r} end
end
local need, orel = tonumber(ARGV[5]), 0
if need > 0 then
  orel = rel(KEYS[2])
  if tonumber(ARGV[6]) - orel < need then return {3, orel} end
end
if cmax > 0 then
  redis.call('HINCRBY', KEYS[3], ARGV[7], 1)
  n = n + 1
end
if rinc > 0 then
  local lo = nl + rnext
  local carry = math.floor(lo / 1e9)
  redis.call('SET', KEYS[1], string.format('%d%09d', nh + carry, lo - carry * 1e9), 'PX', math.floor(rnext / 1e6) + 1)
end
return {0, n, rnext, orel}
`)

// scriptCall is one script run of a pipeline.
type scriptCall struct {
	sc   *redis.Script
	keys []string
	args []any
	cmd  *redis.Cmd
}

// pipe runs calls in one round trip, bounded by the store's timeout: each by EVALSHA in one
// pipeline; those Redis answers NOSCRIPT (it restarted, or never saw the script) go again by EVAL,
// which loads it. It returns the first error; on success every call's reply is in its cmd.
func (s *Redis) pipe(ctx context.Context, calls []scriptCall) error {
	ctx, cancel := context.WithTimeout(ctx, s.c.Timeout)
	defer cancel()
	if len(calls) == 1 {
		c := &calls[0]
		c.cmd = c.sc.Run(ctx, s.c.Client, c.keys, c.args...)
		if err := c.cmd.Err(); err != nil {
			return err
		}
		s.ok()
		return nil
	}
	p := s.c.Client.Pipeline()
	for i := range calls {
		c := &calls[i]
		c.cmd = c.sc.EvalSha(ctx, p, c.keys, c.args...)
	}
	_, _ = p.Exec(ctx) // each command's error is looked at below
	var again redis.Pipeliner
	for i := range calls {
		if c := &calls[i]; redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
			if again == nil {
				again = s.c.Client.Pipeline()
			}
			c.cmd = c.sc.Eval(ctx, again, c.keys, c.args...)
		}
	}
	if again != nil {
		_, _ = again.Exec(ctx)
	}
	for i := range calls {
		if err := calls[i].cmd.Err(); err != nil {
			return fmt.Errorf("limit: redis: %w", err)
		}
	}
	s.ok()
	return nil
}

// reply decodes a script's reply of numbers (two, or four for an admission that took).
func reply(c *scriptCall) (int64, int64, error) {
	v, err := c.cmd.Slice()
	if err != nil || len(v) < 2 {
		return 0, 0, fmt.Errorf("limit: redis: unexpected reply %v %v", v, err)
	}
	a, _ := v[0].(int64)
	b, _ := v[1].(int64)
	return a, b, nil
}

// replyAt returns the i-th number of a script's reply, 0 when there is none.
func replyAt(c *scriptCall, i int) int64 {
	v, _ := c.cmd.Slice()
	if i >= len(v) {
		return 0
	}
	n, _ := v[i].(int64)
	return n
}

// batched reports whether to run a request's operations in one round trip now: Redis is up. When
// it is not, the cells one by one count the errors and serve from their fallback.
func (s *Redis) batched() bool { return s.st.Up() }

// mine returns c as a cell of this store, or nil (a cell of another store, kept by Adopt).
func (s *Redis) mine(c RateCell) *redisRate {
	if r, ok := c.(*redisRate); ok && r.s == s {
		return r
	}
	return nil
}

func (s *Redis) mineGauge(g Gauge) *redisGauge {
	if r, ok := g.(*redisGauge); ok && r.s == s {
		return r
	}
	return nil
}

// admission is one scope's outcome of a batched admission.
type admission struct {
	refused step  // stepNone: taken; else the step that refused (stepConc, stepReq, stepOut), or stepLost
	n       int64 // the concurrency count, or the refusing cell's TAT (Unix ns)
	req     int64 // when taken: the requests cell's TAT after (Unix ns)
	out     int64 // when taken: the output cell's TAT (Unix ns)
}

const (
	// stepOut marks a refusal by the output-token check (it takes nothing, so it is never undone).
	stepOut step = 100
	// stepLost marks a scope that took nothing because this replica's concurrency count in Redis
	// was lost (Redis restarted empty, or the lease expired): its gauge is stale, and the Limiter
	// runs the scope's admission cell by cell, which writes the count again first.
	stepLost step = 101
)

// admit runs the admission of every scope that limits anything in one round trip. ok is false
// when it did not run. The gauges' operations run side by side: an admission adds one to this
// replica's count (no lock is held across the round trip), except when a gauge is stale, whose
// admission then writes the exact count first (see concLua).
func (s *Redis) admit(ctx context.Context, now time.Time, scopes [2]*scope) (res [2]admission, ok bool) {
	n := now.UnixNano()
	var calls [2]scriptCall
	var idx [2]int
	var ops [2]gaugeOp
	nc := 0
	for i, sc := range scopes {
		idx[i] = -1
		if sc.req.cell == nil && sc.out.cell == nil && sc.conc.cell == nil {
			continue
		}
		c, ok := s.admitCall(sc, n)
		if !ok {
			return res, false
		}
		calls[nc] = c
		idx[i] = nc
		nc++
	}
	if nc == 0 {
		return res, true
	}
	if s.settled(ctx) != nil {
		return res, false // the cells one by one wait too, and refuse
	}
	// Enter the gauges, the key's first, always (a stale one waits for the operations in flight).
	for i, sc := range scopes {
		if idx[i] < 0 || sc.conc.cell == nil {
			continue
		}
		op, entered := s.mineGauge(sc.conc.cell).enter(ctx, false)
		if !entered {
			for j := range i {
				if ops[j].g != nil {
					ops[j].exit(opNotSent)
				}
			}
			return res, false
		}
		ops[i] = op
		a := calls[idx[i]].args
		a[6], a[7], a[8] = op.args()
	}
	if err := s.pipe(ctx, calls[:nc]); err != nil {
		for i := range ops {
			if ops[i].g != nil {
				ops[i].exit(opFailed) // it may have run: the count is written again
			}
		}
		s.failed(ctx, err)
		return res, false
	}
	var bad error
	for i := range scopes {
		if idx[i] < 0 {
			continue
		}
		if err := s.admitReply(&calls[idx[i]], scopes[i], &ops[i], n, &res[i]); err != nil {
			bad = cmp.Or(bad, err)
		}
	}
	if bad != nil {
		s.failed(ctx, bad)
		return res, false
	}
	return res, true
}

// admitCall is the admission script's call for scope sc at n (Unix ns), the arguments of its
// gauge's operation left blank for when the gauge is entered. ok is false when a cell of the
// scope is not this store's.
func (s *Redis) admitCall(sc *scope, n int64) (scriptCall, bool) {
	var keys [5]string
	req, out, g := s.mine(sc.req.cell), s.mine(sc.out.cell), s.mineGauge(sc.conc.cell)
	if (sc.req.cell != nil && req == nil) || (sc.out.cell != nil && out == nil) || (sc.conc.cell != nil && g == nil) {
		return scriptCall{}, false
	}
	var some string
	if g != nil {
		keys[2], keys[3], some = g.keys[0], g.keys[1], g.keys[0]
	}
	var rinc, need int64
	if req != nil {
		keys[0], some, rinc = req.key[0], req.key[0], interval(sc.req.rate, 1)
	}
	if out != nil {
		keys[1], some = out.key[0], out.key[0]
		need = (int64(sc.out.rate.Period) + sc.out.rate.Limit - 1) / sc.out.rate.Limit
	}
	beat := ""
	if !s.cluster {
		keys[4], beat = s.st.Heartbeat()
	}
	for k := range keys {
		if keys[k] == "" {
			keys[k] = some // never touched: the scope's hash tag, for Redis Cluster
		}
	}
	return scriptCall{sc: admitScript, keys: keys[:], args: []any{n / 1e9, n % 1e9, rinc,
		int64(sc.req.rate.Period), need, int64(sc.out.rate.Period), "", "", minusOne, sc.conc.max, s.ttlMS, beat}}, true
}

// admitReply reads scope sc's admission reply c, its script run at n (Unix ns), into r, and
// ends the operation op on the scope's gauge, if any, as the reply says. A reply that cannot be
// read is the error.
func (s *Redis) admitReply(c *scriptCall, sc *scope, op *gaugeOp, n int64, r *admission) error {
	code, v, err := reply(c)
	if err != nil {
		if op.g != nil {
			op.exit(opFailed)
		}
		return err
	}
	result := opDone
	switch code {
	case 0:
		if op.g != nil {
			op.g.held.Add(1)
		}
		r.req, r.out = n+replyAt(c, 2), n+replyAt(c, 3)
		if c := s.mine(sc.req.cell); c != nil {
			c.seen.Store(r.req)
		}
		if c := s.mine(sc.out.cell); c != nil {
			c.seen.Store(r.out)
		}
	case 1:
		r.refused, r.n = stepConc, v
	case 2:
		r.refused, r.n = stepReq, n+v
	case 3:
		r.refused, r.n = stepOut, n+v
	case 5:
		r.refused, result = stepLost, opNotSent // nothing ran: the cells one by one wait
		if beat, _ := c.args[11].(string); s.st.Current(beat) {
			s.lost("an admission")
		} // else it carried an entry of a generation whose loss was found already
	default:
		r.refused, result = stepLost, opLost
	}
	if op.g != nil {
		op.exit(result)
	}
	return nil
}

// rateOp is one operation on a rate cell of a batch: peek (read), take (check and take), or add
// (unconditionally; a negative cost refunds).
type rateOp struct {
	slot *rateSlot
	peek bool
	take bool
	cost int64
	ok   bool  // the take fitted
	tat  int64 // the cell's TAT after the operation (Unix ns)
	ran  bool  // it ran in Redis: tat is the cell's state
}

// rateOps runs ops in one round trip. ok is false when it did not run.
func (s *Redis) rateOps(ctx context.Context, now time.Time, ops []rateOp) bool {
	ran, _ := s.settle(ctx, now, ops, nil)
	return ran
}

// release gives back one slot of each gauge in one round trip (see settle). ok is false when it
// did not run.
func (s *Redis) release(ctx context.Context, gauges []Gauge) bool {
	_, released := s.settle(ctx, time.Time{}, nil, gauges) // gauges read Redis's own clock
	return released
}

// scopeScript runs operations on several rate cells and gives back a slot of gauges, in one
// scope (one hash tag) on a Redis Cluster, else in any: the end of a request (its settlement and
// its release) is one script. KEYS: the m cells, then each gauge's slots and leases. ARGV: now
// (s, ns), m, each cell's op, interval and period (gcraScript's), then the lease TTL (ms) and, for
// each gauge, the replica's field, the field it replaces and the count to assert (-1: give back
// one; see concRelease). Returns each cell's took and TAT offset, in order, then for each gauge 1,
// or 0 when the replica's field was lost.
var scopeScript = redis.NewScript(gcraLua + concLua + `
local nh, nl, m = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local out = {}
for i = 1, m do
  local a = i * 3
  out[2 * i - 1], out[2 * i] = gcra(KEYS[i], ARGV[a + 1], nh, nl, tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]))
end
local g = m * 3 + 4
local now = nil
for j = g + 1, #ARGV, 3 do
  local k = m + 2 * math.floor((j - g - 1) / 3)
  now = now or concNow()
  if concRelease(KEYS[k + 1], KEYS[k + 2], ARGV[j], ARGV[j + 1], tonumber(ARGV[j + 2]), tonumber(ARGV[g]), now) then
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
`)

// hashTag returns the part of key that Redis Cluster hashes: between its first '{' and the next
// '}' (every key of this store has one: its scope).
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// scopeCall is the building of one scope's scopeScript call.
type scopeCall struct {
	tag    string
	keys   []string
	cells  []any // op, interval, period of each cell
	ops    []int // the indexes in ops of its cells
	gauges []int // the indexes in the gauges' operations of its gauges
}

// settle runs ops and gives back one slot of each gauge, all in one round trip of one script (one
// per scope on a Redis Cluster, whose scripts take keys of one shard only): the end of a request
// (its settlement and its release) costs one. A slot taken from the local share while Redis was
// unreachable goes back there. ran reports that ops ran (else the caller runs them on the cells,
// whose fallback serves), released that the slots were given back (a write that failed leaves the
// gauge stale: the next operation or renewal writes its count); both are false for a cell or
// gauge of another store.
func (s *Redis) settle(ctx context.Context, now time.Time, ops []rateOp, gauges []Gauge) (ran, released bool) {
	var mine [2]*redisGauge
	for i, gg := range gauges {
		if mine[i] = s.mineGauge(gg); mine[i] == nil {
			return false, false
		}
	}
	taking := false
	for i := range ops {
		if s.mine(ops[i].slot.cell) == nil {
			return false, false
		}
		taking = taking || ops[i].take
	}
	if taking && s.settled(ctx) != nil {
		return false, false
	}
	var buf [4]scopeCall
	scopes := buf[:0]
	_, cluster := s.c.Client.(*redis.ClusterClient)
	in := func(key string) *scopeCall {
		tag := "" // one Redis: every scope in one script
		if cluster {
			tag = hashTag(key) // each scope's keys on their own shard
		}
		for i := range scopes {
			if scopes[i].tag == tag {
				return &scopes[i]
			}
		}
		scopes = append(scopes, scopeCall{tag: tag})
		return &scopes[len(scopes)-1]
	}
	for i := range ops {
		o := &ops[i]
		c := s.mine(o.slot.cell)
		op, inc := "add", interval(o.slot.rate, o.cost)
		switch {
		case o.peek:
			op, inc = "peek", 0
		case o.take:
			op = "take"
		case o.cost < 0:
			op, inc = "refund", interval(o.slot.rate, -o.cost)
		}
		sc := in(c.key[0])
		sc.keys = append(sc.keys, c.key[0])
		sc.cells = append(sc.cells, op, inc, int64(o.slot.rate.Period))
		sc.ops = append(sc.ops, i)
	}
	// The gauges, the key's first, always: each release subtracts one from this replica's count
	// (a stale gauge's writes the exact count), side by side with the replica's other operations.
	var gops [2]gaugeOp
	ng := 0
	for _, g := range mine[:len(gauges)] {
		if g.decLocal() {
			continue
		}
		op, ok := g.enter(context.WithoutCancel(ctx), false)
		g.decHeld()
		if !ok { // the count is written by the next operation
			g.markStale()
			continue
		}
		gops[ng] = op
		ng++
		sc := in(g.keys[0])
		sc.gauges = append(sc.gauges, ng-1)
	}
	if len(scopes) == 0 {
		return true, true
	}
	n := now.UnixNano()
	calls := s.settleCalls(n, scopes, gops[:ng])
	if err := s.pipe(ctx, calls); err != nil {
		for j := range gops[:ng] {
			gops[j].exit(opFailed) // it may have run: the count is written again
		}
		if s.failed(ctx, err) || taking {
			return false, true // the cells serve from their fallback, or a take is asked again
		}
		// Redis is slow, not gone, and the operations may have run: running them again could
		// refund twice. Charges are kept for later (stricter if they ran), refunds dropped.
		for i := range ops {
			if o := &ops[i]; !o.peek && o.cost > 0 {
				s.mine(o.slot.cell).owe(o.slot.rate, o.cost)
			}
		}
		return true, true
	}
	if bad := s.settleReplies(n, scopes, calls, ops, gops[:ng]); bad != nil {
		s.failed(ctx, bad)
		return false, true
	}
	return true, true
}

// settleCalls is the scope script's call for each scope at n (Unix ns): its cells' operations,
// then its gauges' (gops, indexed by the scopes' gauges).
func (s *Redis) settleCalls(n int64, scopes []scopeCall, gops []gaugeOp) []scriptCall {
	calls := make([]scriptCall, len(scopes))
	for i := range scopes {
		sc := &scopes[i]
		args := make([]any, 0, 4+len(sc.cells)+3*len(sc.gauges))
		args = append(args, n/1e9, n%1e9, len(sc.ops))
		args = append(args, sc.cells...)
		args = append(args, s.ttlMS)
		for _, j := range sc.gauges {
			op := &gops[j]
			sc.keys = append(sc.keys, op.g.keys...)
			f, old, base := op.args()
			args = append(args, f, old, base)
		}
		calls[i] = scriptCall{sc: scopeScript, keys: sc.keys, args: args}
	}
	return calls
}

// settleReplies reads each scope's reply to its call, run at n (Unix ns): the outcome and the
// cell's state of each op, and the end of each gauge operation in gops. The first reply that
// cannot be read is returned; the operations of its scope count as failed.
func (s *Redis) settleReplies(n int64, scopes []scopeCall, calls []scriptCall, ops []rateOp, gops []gaugeOp) error {
	var bad error
	for i := range scopes {
		v, err := calls[i].cmd.Slice()
		m := 2 * len(scopes[i].ops)
		if err != nil || len(v) != m+len(scopes[i].gauges) {
			bad = cmp.Or(bad, fmt.Errorf("limit: redis: unexpected reply %v %v", v, err))
			for _, j := range scopes[i].gauges {
				gops[j].exit(opFailed)
			}
			continue
		}
		for j, k := range scopes[i].ops {
			took, _ := v[2*j].(int64)
			rel, _ := v[2*j+1].(int64)
			ops[k].ok, ops[k].tat, ops[k].ran = took == 1, n+rel, true
			s.mine(ops[k].slot.cell).seen.Store(n + rel)
		}
		for j, k := range scopes[i].gauges {
			if f, _ := v[m+j].(int64); f == 1 {
				gops[k].exit(opDone)
			} else {
				gops[k].exit(opLost) // the slot went with the lost count: the next operation writes it
			}
		}
	}
	return bad
}
