package sim

import "sync"

// kvCache is the prefix KV cache: which prompt blocks the simulated GPU still holds. A block is
// BlockTokens prompt tokens keyed by a chained hash (the previous block's key and the block's
// tokens), so a key stands for the whole prefix up to its block and a prompt's cached part is
// its longest run of leading blocks found. Capacity is fixed in blocks; the least recently used
// block goes first. Slots live in one array linked by index, so steady state allocates nothing.
// A nil *kvCache is a disabled cache.
type kvCache struct {
	mu       sync.Mutex
	capacity int
	index    map[uint64]int32 // key → slot
	slots    []kvSlot
	head     int32 // most recently used, -1 when empty
	tail     int32 // least recently used
}

type kvSlot struct {
	key        uint64
	prev, next int32
}

func newKVCache(blocks int) *kvCache {
	if blocks <= 0 {
		return nil
	}
	return &kvCache{capacity: blocks, index: make(map[uint64]int32, min(blocks, 1<<16)), head: -1, tail: -1}
}

// match returns how many of the leading keys are cached, then makes every key cached, evicting
// the least recently used blocks of other prompts as needed. The prompt's blocks end up most
// recently used with its first block first, so under pressure a prefix is evicted from its end
// and the rest stays usable (vLLM frees a sequence's blocks in reverse for the same reason).
// scratch is reused to hold slot numbers.
func (c *kvCache) match(keys []uint64, scratch *[]int32) int {
	if c == nil {
		return 0
	}
	keys = keys[:min(len(keys), c.capacity)]
	slots := (*scratch)[:0]
	c.mu.Lock()
	hit := 0
	for _, k := range keys {
		s, ok := c.index[k]
		if !ok {
			break
		}
		slots = append(slots, s)
		hit++
	}
	// Found blocks move to the front first, so the evictions below never take one of them:
	// the prompt has at most capacity blocks, so some other block is always behind them.
	for _, s := range slots {
		c.moveFrontLocked(s)
	}
	for _, k := range keys[hit:] {
		s, ok := c.index[k]
		if !ok {
			if len(c.slots) < c.capacity {
				s = int32(len(c.slots))
				c.slots = append(c.slots, kvSlot{prev: -1, next: -1})
			} else {
				s = c.tail
				c.unlinkLocked(s)
				delete(c.index, c.slots[s].key)
			}
			c.slots[s].key = k
			c.index[k] = s
		} else {
			c.unlinkLocked(s)
		}
		c.pushFrontLocked(s)
		slots = append(slots, s)
	}
	for i := len(slots) - 1; i >= 0; i-- {
		c.moveFrontLocked(slots[i])
	}
	c.mu.Unlock()
	*scratch = slots
	return hit
}

// len returns the number of cached blocks.
func (c *kvCache) len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.index)
}

func (c *kvCache) moveFrontLocked(s int32) {
	if c.head == s {
		return
	}
	c.unlinkLocked(s)
	c.pushFrontLocked(s)
}

func (c *kvCache) unlinkLocked(s int32) {
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

func (c *kvCache) pushFrontLocked(s int32) {
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

// Hashing: FNV-1a over the token ids, finished with splitmix64's mixer.
const (
	fnvOffset = 0xcbf29ce484222325
	fnvPrime  = 0x100000001b3
)

func mix(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	return h ^ h>>31
}

// hashTokens hashes toks, chained onto h.
func hashTokens(h uint64, toks []uint32) uint64 {
	for _, t := range toks {
		h = (h ^ uint64(t)) * fnvPrime
	}
	return mix(h)
}

// blockHashes appends the chained key of every full block of toks to dst.
func blockHashes(dst []uint64, toks []uint32, block int) []uint64 {
	h := uint64(fnvOffset)
	for i := 0; i+block <= len(toks); i += block {
		h = hashTokens(h, toks[i:i+block])
		dst = append(dst, h)
	}
	return dst
}
