package enginetok

import (
	"container/list"
	"sync"

	"github.com/zeebo/xxh3"
)

// lru keeps renderings, least recently used out first, bounded by their tokens in total. A
// rendering larger than the whole bound is not kept.
type lru struct {
	mu    sync.Mutex
	limit int // tokens
	used  int
	order *list.List // of *entry, most recent first
	index map[xxh3.Uint128]*list.Element
}

type entry struct {
	key  xxh3.Uint128
	toks []uint32
}

func newLRU(limit int) *lru {
	return &lru{limit: limit, order: list.New(), index: map[xxh3.Uint128]*list.Element{}}
}

// get appends key's rendering to dst, if kept, and makes it most recent.
func (c *lru) get(key xxh3.Uint128, dst []uint32) ([]uint32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.index[key]
	if !ok {
		return dst, false
	}
	c.order.MoveToFront(el)
	return append(dst, el.Value.(*entry).toks...), true
}

// put keeps toks as key's rendering (the cache owns toks), evicting as needed.
func (c *lru) put(key xxh3.Uint128, toks []uint32) {
	if len(toks) > c.limit {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.index[key]; ok {
		return
	}
	for c.used+len(toks) > c.limit {
		el := c.order.Back()
		e := el.Value.(*entry)
		c.order.Remove(el)
		delete(c.index, e.key)
		c.used -= len(e.toks)
	}
	c.index[key] = c.order.PushFront(&entry{key: key, toks: toks})
	c.used += len(toks)
}

// size returns the tokens kept.
func (c *lru) size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}
