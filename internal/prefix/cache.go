// Package prefix is layer0's index of the prompt prefixes each engine replica has served: an
// estimate, kept in the gateway, of what every replica still holds in its prefix KV cache, so
// that a client can ask how much of a prompt is cached (/v1/cache) and the router can place a
// request where its prompt is already cached.
//
// A prompt is rendered as the engine sees it and tokenized (Renderer), cut into blocks of the
// engine's block size, and each full block is keyed by a chained hash that covers the block's
// tokens and every block before it, as vLLM's automatic prefix caching keys its blocks: one key
// stands for a whole prefix, and a prompt's cached part is its longest run of leading keys
// found. The hash is the embedded simulator's (FNV-1a over the token ids, finished with
// splitmix64's mixer), so an index of a sim replica fed the same prompts holds the same keys.
//
// Each replica's Cache is bounded in blocks and forgets the least recently used first. Every
// block of a prompt is touched with its ancestors after it (the first block most recent), so a
// block is never more recent than the blocks before it: eviction takes a prefix from its end,
// the set of cached keys is closed under "the block before", and Match finds the cached run by
// binary search — O(log n) map probes per replica instead of n.
//
// In precise mode (EnablePrecise) a replica follows its engine's own KV-cache events instead
// of estimating: see precise.go.
//
// Memory: a cached block costs one map entry (8-byte key, 4-byte slot) and one 16-byte slot,
// about 40 bytes with the map's overhead and growth slack, so 1 M cached tokens at 16 tokens a
// block (62,500 blocks) take about 2.5 MB; BenchmarkMemory measures it and TestMemoryBound
// holds it under 4 MB. A replica keeps two caches of its capacity — its blocks, and whose
// requests put them there (Replica.RecordFor) — so an indexed replica of 1 M tokens takes about
// 5 MB. A Cache never holds more than its capacity, so the index's memory is bounded by the
// capacities configured.
package prefix

import "sync"

// Cache is one replica's set of cached block keys, bounded in blocks, least recently used
// first out. Slots live in one array linked by index, so steady state allocates nothing. It is
// safe for concurrent use: lookups share a read lock, insertions take the write lock. A nil
// *Cache holds nothing.
type Cache struct {
	mu       sync.RWMutex
	capacity int
	index    map[uint64]int32 // key → slot
	slots    []slot
	head     int32 // most recently used, -1 when empty
	tail     int32 // least recently used
}

type slot struct {
	key        uint64
	prev, next int32
}

// NewCache returns a cache of capacity blocks, its memory allocated at once (about 40 bytes a
// block); nil when capacity is not positive.
func NewCache(capacity int) *Cache {
	if capacity <= 0 {
		return nil
	}
	// Both tables are sized for the capacity at once: the memory is what a full cache takes
	// from the start, and no growth doubles it on the way.
	return &Cache{capacity: capacity, index: make(map[uint64]int32, capacity), slots: make([]slot, 0, capacity),
		head: -1, tail: -1}
}

// Capacity returns the cache's capacity in blocks.
func (c *Cache) Capacity() int {
	if c == nil {
		return 0
	}
	return c.capacity
}

// Len returns the number of cached blocks.
func (c *Cache) Len() int {
	if c == nil {
		return 0
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.index)
}

// Match returns how many of the leading keys are cached, without changing what is cached or
// its order. keys are a prompt's chained block keys (AppendKeys).
func (c *Cache) Match(keys []uint64) int {
	if c == nil || len(keys) == 0 {
		return 0
	}
	keys = keys[:min(len(keys), c.capacity)]
	c.mu.RLock()
	// The cached keys of a chain are a prefix of it (see the package comment).
	n := heldPrefix(keys, c.index)
	c.mu.RUnlock()
	return n
}

// heldPrefix returns how many of the leading keys held has, finding the first key it lacks by
// bisection: the keys held of a chain must be a prefix of it.
func heldPrefix[V any](keys []uint64, held map[uint64]V) int {
	lo, hi := 0, len(keys)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if _, ok := held[keys[m]]; ok {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// Insert makes every key cached and most recently used, the first key most recent, evicting
// the least recently used keys of other prompts as needed. Keys beyond the capacity are left
// out, as an engine cannot hold a prompt larger than its cache either.
func (c *Cache) Insert(keys []uint64) {
	if c == nil || len(keys) == 0 {
		return
	}
	keys = keys[:min(len(keys), c.capacity)]
	c.mu.Lock()
	c.insertLocked(keys, nil)
	c.mu.Unlock()
}

// MatchInsert is Match then Insert as one step, as an engine's cache serves a prompt: it
// returns how many of the leading keys were cached, counting from the first (a chain broken by
// an eviction ends the match), then makes every key cached, the first most recent. The embedded
// simulator's KV cache is one.
func (c *Cache) MatchInsert(keys []uint64) int {
	hit, _ := c.matchInsert(keys, nil)
	return hit
}

// MatchInsertEvict is MatchInsert that also says what changed, for an engine that publishes
// its cache's events: it returns the keys inserted (keys[hit:stored], within the capacity)
// and appends the keys evicted to make room to evicted.
func (c *Cache) MatchInsertEvict(keys, evicted []uint64) (hit, stored int, _ []uint64) {
	hit, stored = c.matchInsert(keys, &evicted)
	return hit, stored, evicted
}

// matchInsert is MatchInsert's work; evicted, when not nil, receives the keys evicted.
func (c *Cache) matchInsert(keys []uint64, evicted *[]uint64) (hit, stored int) {
	if c == nil || len(keys) == 0 {
		return 0, 0
	}
	keys = keys[:min(len(keys), c.capacity)]
	c.mu.Lock()
	for _, k := range keys {
		if _, ok := c.index[k]; !ok {
			break
		}
		hit++
	}
	c.insertLocked(keys, evicted)
	c.mu.Unlock()
	return hit, len(keys)
}

// insertLocked is Insert's work, with c.mu held and keys within the capacity; the keys
// evicted are appended to *evicted when it is not nil.
func (c *Cache) insertLocked(keys []uint64, evicted *[]uint64) {
	// Keys already cached move to the front first, so the evictions below never take one of
	// them: the prompt has at most capacity keys, so some other key is always behind them.
	for _, k := range keys {
		if s, ok := c.index[k]; ok {
			c.moveFrontLocked(s)
		}
	}
	// Then every key, last to first, so that the first ends most recent.
	for i := len(keys) - 1; i >= 0; i-- {
		k := keys[i]
		s, ok := c.index[k]
		if !ok {
			if len(c.slots) < c.capacity {
				s = int32(len(c.slots))
				c.slots = append(c.slots, slot{prev: -1, next: -1})
			} else {
				s = c.tail
				c.unlinkLocked(s)
				delete(c.index, c.slots[s].key)
				if evicted != nil {
					*evicted = append(*evicted, c.slots[s].key)
				}
			}
			c.slots[s].key = k
			c.index[k] = s
			c.pushFrontLocked(s)
			continue
		}
		c.moveFrontLocked(s)
	}
}

// Reset forgets every key (the engine restarted or cleared its cache).
func (c *Cache) Reset() {
	if c == nil {
		return
	}
	c.mu.Lock()
	clear(c.index)
	c.slots = c.slots[:0]
	c.head, c.tail = -1, -1
	c.mu.Unlock()
}

func (c *Cache) moveFrontLocked(s int32) {
	if c.head == s {
		return
	}
	c.unlinkLocked(s)
	c.pushFrontLocked(s)
}

func (c *Cache) unlinkLocked(s int32) {
	sl := &c.slots[s]
	if sl.prev >= 0 {
		c.slots[sl.prev].next = sl.next
	} else {
		c.head = sl.next
	}
	if sl.next >= 0 {
		c.slots[sl.next].prev = sl.prev
	} else {
		c.tail = sl.prev
	}
	sl.prev, sl.next = -1, -1
}

func (c *Cache) pushFrontLocked(s int32) {
	sl := &c.slots[s]
	sl.prev, sl.next = -1, c.head
	if c.head >= 0 {
		c.slots[c.head].prev = s
	}
	c.head = s
	if c.tail < 0 {
		c.tail = s
	}
}

// Hashing: FNV-1a over the token ids, finished with splitmix64's mixer; the embedded simulator
// keys its blocks with the same functions.
const (
	fnvOffset = 0xcbf29ce484222325
	fnvPrime  = 0x100000001b3
)

// Mix is splitmix64's finalizer: it spreads every bit of h over the result. HashTokens ends
// with it; the simulator's word picker uses it as its generator's output function.
func Mix(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}

// AppendKeys appends the chained key of every full block of toks to dst and returns it: the
// key of block i hashes block i's tokens onto the key of block i-1, so it depends on every
// token before the block's end. A last partial block has no key (engines cache full blocks).
func AppendKeys(dst []uint64, toks []uint32, block int) []uint64 {
	if block <= 0 {
		return dst
	}
	h := uint64(fnvOffset)
	for i := 0; i+block <= len(toks); i += block {
		h = HashTokens(h, toks[i:i+block])
		dst = append(dst, h)
	}
	return dst
}

// HashTokens hashes toks onto h: FNV-1a over the token ids, finished with splitmix64's mixer.
// A block's key is its tokens hashed onto the key of the block before it.
func HashTokens(h uint64, toks []uint32) uint64 {
	for _, t := range toks {
		h = (h ^ uint64(t)) * fnvPrime
	}
	return Mix(h)
}
