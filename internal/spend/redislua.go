package spend

import (
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The scripts of the Redis ledger. Every budget cell is one hash, all under the hash tag {spend}
// so that one script reaches a request's key, team and global cells on a Redis Cluster too:
//
//	s              settled spending of a calendar period
//	b<bucket>      settled spending of one bucket of a rolling window
//	q/<replica>/<id>  one reservation outstanding, of a replica whose lease is current
//
// The leases are one sorted set: each replica, scored by its expiry on Redis's clock. A
// reservation of a replica whose lease ran out (it crashed, or was cut off for a whole lease) is
// not counted, and is deleted by the next script that meets it. Amounts are Lua numbers, exact
// to 2^53 (nine billion units of money in micro-units).

// usedLua defines used(key, bucket): a cell's settled spending and live reservations, dropping
// the buckets that left the window and the reservations of dead replicas. It needs now, me,
// leases and alive in scope.
var usedLua = `
local function used(key, bucket)
  local f = redis.call('HGETALL', key)
  local spent, res = 0, 0
  for i = 1, #f, 2 do
    local k, v = f[i], tonumber(f[i + 1])
    local c = string.sub(k, 1, 1)
    if k == 's' or k == 'p' then
      spent = spent + v
    elseif c == 'b' or c == 'c' then
      if tonumber(string.sub(k, 2)) > bucket - ` + strconv.Itoa(windowBuckets) + ` then
        spent = spent + v
      else
        redis.call('HDEL', key, k)
      end
    elseif c == 'q' then
      local r = string.match(k, '^q/(.+)/[^/]+$')
      local a = alive[r]
      if a == nil then
        local sc = redis.call('ZSCORE', leases, r)
        a = sc ~= false and tonumber(sc) > now
        alive[r] = a
      end
      if a then res = res + v else redis.call('HDEL', key, k) end
    end
  end
  return spent, res
end
`

// preludeLua reads the clock and writes this replica's lease (ARGV[1], ARGV[3] ms), noting
// whether it was there (had). A replica name marked with a leading '!' (see guarded) says the
// lease must be there: when it is not, Redis lost the ledger (a restart without persistence, a
// FLUSHALL), and the script answers {-1} having changed nothing, so that no reservation is
// decided and no settlement written on a ledger that lacks the spending before the loss.
const preludeLua = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = #KEYS - 1
local leases = KEYS[n + 1]
local me = ARGV[1]
local expect = string.sub(me, 1, 1) == '!'
if expect then me = string.sub(me, 2) end
local had = redis.call('ZSCORE', leases, me)
if expect and not had then return {-1} end
redis.call('ZADD', leases, now + tonumber(ARGV[3]), me)
redis.call('PEXPIRE', leases, ARGV[3])
local alive = {}
alive[me] = true
`

// reserveScript: KEYS are the cells and the leases; ARGV: me, the reservation's id, the lease
// TTL (ms), then per cell its limit, amount, bucket (0 for a calendar period) and TTL (ms). It
// reserves every amount if each fits and returns {1 or 0, the first cell that did not fit
// (1-based), 1 if the lease was there, then each cell's spent and reserved before}. An amount of
// 0 writes nothing (the report reads the cells so).
var reserveScript = redis.NewScript(preludeLua + usedLua + `
local out = {1, 0, had and 1 or 0}
for i = 1, n do
  local a = 3 + (i - 1) * 4
  local limit, amount = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local spent, res = used(KEYS[i], tonumber(ARGV[a + 3]))
  out[#out + 1] = spent
  out[#out + 1] = res
  if out[1] == 1 and amount > 0 and spent + res + amount > limit then
    out[1] = 0
    out[2] = i
  end
end
if out[1] == 1 then
  for i = 1, n do
    local a = 3 + (i - 1) * 4
    if tonumber(ARGV[a + 2]) > 0 then
      redis.call('HSET', KEYS[i], 'q/' .. me .. '/' .. ARGV[2], ARGV[a + 2])
      redis.call('PEXPIRE', KEYS[i], ARGV[a + 4])
    end
  end
end
return out
`)

// settleScript: KEYS are the cells and the leases; ARGV: me, the reservation's id, the lease TTL
// (ms), 1 for a settlement written late (it failed, or was made while Redis was unreachable),
// then per cell the actual amount, bucket and TTL (ms). A late one adds to p (c<bucket> for a
// window) instead of s (b<bucket>): a write-back raises s to what a replica saw and never
// touches p, so a late settlement, which no replica saw, is never absorbed by another's seed. It deletes the reservation, adds
// the actual amount to the period or the bucket, and returns {1 if the lease was there, then
// each cell's spent and reserved after}. Running it for a reservation Redis does not hold (taken
// while Redis was unreachable, or one whose reserve timed out) only adds the amount.
var settleScript = redis.NewScript(preludeLua + usedLua + `
local out = {had and 1 or 0}
for i = 1, n do
  local a = 4 + (i - 1) * 3
  redis.call('HDEL', KEYS[i], 'q/' .. me .. '/' .. ARGV[2])
  local amount, bucket = tonumber(ARGV[a + 1]), ARGV[a + 2]
  if amount > 0 then
    if bucket == '0' then
      redis.call('HINCRBY', KEYS[i], ARGV[4] == '1' and 'p' or 's', amount)
    else
      redis.call('HINCRBY', KEYS[i], (ARGV[4] == '1' and 'c' or 'b') .. bucket, amount)
    end
  end
  redis.call('PEXPIRE', KEYS[i], ARGV[a + 3])
  local spent, res = used(KEYS[i], tonumber(bucket))
  out[#out + 1] = spent
  out[#out + 1] = res
end
return out
`)

// restoreScript writes back one cell (only s, or the current bucket's b, is raised: see settle) after Redis lost it or was unreachable: KEYS are the cell
// and the leases; ARGV: me, unused, the lease TTL, the spending this replica last saw, the
// bucket, the TTL (ms), then pairs of this replica's reservations (id, amount) to hold. The
// settled spending is raised to what was seen (never lowered: a seed), in the current bucket for
// a window.
var restoreScript = redis.NewScript(preludeLua + usedLua + `
local seen, bucket = tonumber(ARGV[4]), tonumber(ARGV[5])
local spent = 0
if bucket == 0 then
  spent = tonumber(redis.call('HGET', KEYS[1], 's') or '0')
else
  local f = redis.call('HGETALL', KEYS[1])
  for i = 1, #f, 2 do
    if string.sub(f[i], 1, 1) == 'b' and tonumber(string.sub(f[i], 2)) > bucket - ` + strconv.Itoa(windowBuckets) + ` then
      spent = spent + tonumber(f[i + 1])
    end
  end
end
if seen > spent then
  if bucket == 0 then
    redis.call('HINCRBY', KEYS[1], 's', seen - spent)
  else
    redis.call('HINCRBY', KEYS[1], 'b' .. ARGV[5], seen - spent)
  end
end
for i = 7, #ARGV, 2 do
  redis.call('HSET', KEYS[1], 'q/' .. me .. '/' .. ARGV[i], ARGV[i + 1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return {had and 1 or 0}
`)

// leaseScript renews this replica's lease and returns {1 if it was there}. With ARGV[3] "1"
// (the lease must be there) a lease that is gone is not written again: the write-back does that,
// after it has written this replica's state.
var leaseScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local had = redis.call('ZSCORE', KEYS[1], ARGV[1])
if ARGV[3] == '1' and not had then return {0} end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if had then return {1} end
return {0}
`)
