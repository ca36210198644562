package tokenizer

import "math"

// noRank marks a pair that cannot merge; as a limit it allows every rank.
const noRank = math.MaxUint32

// part is a boundary inside a piece: the token from off to the next part's off, and the rank of
// the token that merging it with the next part would make.
type part struct {
	off  int32
	rank uint32
}

// scanMax is the longest piece merged by the quadratic scan in a stack buffer; longer pieces
// (rare: long words, runs of spaces or symbols) use the O(n log n) heap merge.
const scanMax = 128

// bpeScratch is merge's working memory: a stack buffer for short pieces and a lazily grown one
// for long pieces, reused across the pieces of one call.
type bpeScratch struct {
	small [scanMax + 1]part
	large []part
	nodes []mergeNode
	heap  mergeHeap
}

// merge splits piece into the tokens byte-pair encoding makes of it, using only ranks below
// limit, and returns their boundaries: token k is piece[parts[k].off:parts[k+1].off]. It merges
// the lowest-ranked adjacent pair first, the leftmost among equals, exactly as tiktoken does.
func (c *Codec) merge(s *bpeScratch, piece string, limit uint32) []part {
	if len(piece) > scanMax {
		return c.mergeHeap(s, piece, limit)
	}
	parts := s.small[:len(piece)+1]
	for i := range parts {
		parts[i] = part{int32(i), noRank}
	}
	// rankAt is the rank of the token spanning parts[i] to parts[i+skip+2].
	rankAt := func(i, skip int) uint32 {
		if i+skip+2 < len(parts) {
			if r, ok := c.ranks[piece[parts[i].off:parts[i+skip+2].off]]; ok && r < limit {
				return r
			}
		}
		return noRank
	}
	for i := 0; i < len(parts)-2; i++ {
		parts[i].rank = rankAt(i, 0)
	}
	for len(parts) > 1 {
		low, at := uint32(noRank), 0
		for i, p := range parts[:len(parts)-1] {
			if p.rank < low {
				low, at = p.rank, i
			}
		}
		if low == noRank {
			break
		}
		parts[at].rank = rankAt(at, 1)
		if at > 0 {
			parts[at-1].rank = rankAt(at-1, 1)
		}
		parts = append(parts[:at+1], parts[at+2:]...)
	}
	return parts
}

// mergeNode is a boundary in mergeHeap's linked list; rank is that of merging it with the next.
type mergeNode struct {
	prev, next int32
	rank       uint32
}

// mergeCandidate is a pair that can merge, valid while its node still has that rank.
type mergeCandidate struct {
	rank uint32
	off  int32
}

// mergeHeap is a min-heap of candidates by rank, then offset, so the leftmost of equal ranks
// merges first, as in the scan.
type mergeHeap []mergeCandidate

func (h mergeHeap) less(a, b int) bool {
	if h[a].rank != h[b].rank {
		return h[a].rank < h[b].rank
	}
	return h[a].off < h[b].off
}

func (h mergeHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (h mergeHeap) down(i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if r := c + 1; r < len(h) && h.less(r, c) {
			c = r
		}
		if !h.less(c, i) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// mergeHeap gives the same parts as the scan in O(n log n), for long pieces.
func (c *Codec) mergeHeap(s *bpeScratch, piece string, limit uint32) []part {
	n := int32(len(piece))
	nodes := grow(s.nodes, int(n)+1)
	s.nodes = nodes
	for i := range nodes {
		nodes[i] = mergeNode{prev: int32(i) - 1, next: int32(i) + 1, rank: noRank}
	}
	nodes[n].next = -1
	rankOf := func(i int32) uint32 {
		j := nodes[i].next
		if j < 0 {
			return noRank
		}
		k := nodes[j].next
		if k < 0 {
			return noRank
		}
		if r, ok := c.ranks[piece[i:k]]; ok && r < limit {
			return r
		}
		return noRank
	}
	h := s.heap[:0]
	for i := int32(0); i+2 <= n; i++ {
		if r := rankOf(i); r != noRank {
			nodes[i].rank = r
			h = append(h, mergeCandidate{r, i})
		}
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
	for len(h) > 0 {
		top := h[0]
		last := len(h) - 1
		h[0] = h[last]
		h = h[:last]
		h.down(0)
		i := top.off
		if nodes[i].rank != top.rank {
			continue // stale: the pair changed since it was pushed
		}
		j := nodes[i].next
		k := nodes[j].next
		nodes[j].rank = noRank
		nodes[i].next = k
		if k >= 0 {
			nodes[k].prev = i
		}
		for _, b := range [2]int32{i, nodes[i].prev} {
			if b < 0 {
				continue
			}
			nodes[b].rank = rankOf(b)
			if nodes[b].rank != noRank {
				h = append(h, mergeCandidate{nodes[b].rank, b})
				h.up(len(h) - 1)
			}
		}
	}
	s.heap = h
	parts := s.large[:0]
	for i := int32(0); i >= 0; i = nodes[i].next {
		parts = append(parts, part{i, nodes[i].rank})
	}
	s.large = parts
	return parts
}

func grow[T any](b []T, n int) []T {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]T, n)
}
