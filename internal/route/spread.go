package route

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/prefix"
)

// MaxSpreadReplicas is the most replicas a hot prefix's set may hold (Spread.MaxReplicas).
const MaxSpreadReplicas = config.MaxSpreadReplicas

// Spread tunes how the prefix picker spreads a hot prefix over a set of replicas. A prefix (the
// key of a prompt's leading PrefixTokens, per tenant scope) is hot when the replica it would go
// to was over the load guard for at least HotShare of its last Window requests or so: the
// cheapest replica not yet in the prefix's set, by the picker's cost, joins it (a second, then
// a third, up to MaxReplicas), and the prefix's requests go to the cheapest member — among
// members that hold the prefix alike, the least loaded — or, when that one is over the guard,
// the least loaded member. While the set holds two or more, the share measured is of requests
// whose least loaded member was at the guard (one request more would put it over); the set
// shrinks by its newest member when, for HotShare of the requests, one member fewer would have
// carried the members' requests in flight within the guard. The zero value uses the defaults
// (config.DefaultSpreadMaxReplicas and the others).
type Spread struct {
	// MaxReplicas bounds a hot prefix's set. Default 3; 1 turns sets off (the guard alone then
	// sends each request over it elsewhere). At most MaxSpreadReplicas.
	MaxReplicas int
	// HotShare is the share of a prefix's recent requests over the guard that makes it hot, and
	// of those that one member fewer would have carried that cools it. Default 0.5.
	HotShare float64
	// Window is about how many of a prefix's recent requests the shares are measured over (an
	// exponentially weighted average of weight 1/Window). Default 32.
	Window int
	// PrefixTokens is how many of a prompt's leading tokens name its prefix, rounded down to
	// whole blocks (at least one). Default 256.
	PrefixTokens int
	// MaxPrefixes bounds the prefixes tracked at once (about 150 bytes each, allocated at the
	// first pick); the least recently seen makes room for a new one. Default 1024.
	MaxPrefixes int
	// Idle is how long a prefix may go without requests before its set is forgotten. Default
	// one minute.
	Idle time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

func (s Spread) withDefaults() Spread {
	if s.MaxReplicas <= 0 {
		s.MaxReplicas = config.DefaultSpreadMaxReplicas
	}
	s.MaxReplicas = min(s.MaxReplicas, MaxSpreadReplicas)
	if s.HotShare <= 0 || s.HotShare > 1 {
		s.HotShare = config.DefaultSpreadHotShare
	}
	if s.Window <= 0 {
		s.Window = config.DefaultSpreadWindow
	}
	if s.PrefixTokens <= 0 {
		s.PrefixTokens = config.DefaultSpreadPrefixTokens
	}
	if s.MaxPrefixes <= 0 {
		s.MaxPrefixes = config.DefaultSpreadMaxPrefixes
	}
	if s.Idle <= 0 {
		s.Idle = config.DefaultSpreadIdle
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	return s
}

// hotShards is how many locks the hot prefixes are split over.
const hotShards = 16

// hotSets are the prefix picker's hot prefixes, split over shards by key so that picks of
// different prefixes rarely wait on one another. Each shard's sets are allocated at once, its
// map sized for them: tracking a new prefix allocates nothing.
type hotSets struct {
	once   sync.Once
	cfg    Spread
	n      atomic.Int64 // prefixes tracked, all shards
	shards [hotShards]hotShard
}

type hotShard struct {
	mu   sync.Mutex
	m    map[uint64]*hotSet
	free []*hotSet
}

// hotSet is one prefix's replica set and the shares of its recent requests.
type hotSet struct {
	key     uint64
	members [MaxSpreadReplicas]*Replica // in the order they joined
	n       int
	hot     float64 // weighted share of requests over the guard
	cool    float64 // weighted share of requests one member fewer would have carried
	seen    int64   // the last request's time, in Unix nanoseconds
}

func (h *hotSets) init(cfg Spread) {
	h.once.Do(func() {
		h.cfg = cfg.withDefaults()
		per := (h.cfg.MaxPrefixes + hotShards - 1) / hotShards
		for i := range h.shards {
			sh := &h.shards[i]
			sets := make([]hotSet, per)
			sh.m = make(map[uint64]*hotSet, per)
			sh.free = make([]*hotSet, per)
			for j := range sets {
				sh.free[j] = &sets[j]
			}
		}
	})
}

// Len returns how many prefixes are tracked.
func (h *hotSets) Len() int { return int(h.n.Load()) }

// track returns key's set in sh, a new one (seeded with first) when over, nil otherwise;
// sh.mu is held. A full shard gives up its least recently seen set.
func (h *hotSets) track(sh *hotShard, key uint64, first *Replica, over bool, now int64) *hotSet {
	if s := sh.m[key]; s != nil {
		if now-s.seen > int64(h.cfg.Idle) {
			s.reset(first)
		}
		return s
	}
	if !over {
		return nil
	}
	if len(sh.free) == 0 {
		var old *hotSet
		for _, s := range sh.m {
			if old == nil || s.seen < old.seen {
				old = s
			}
		}
		h.drop(sh, old)
	}
	s := sh.free[len(sh.free)-1]
	sh.free = sh.free[:len(sh.free)-1]
	s.key = key
	s.reset(first)
	sh.m[key] = s
	h.n.Add(1)
	return s
}

// drop forgets s; sh.mu is held.
func (h *hotSets) drop(sh *hotShard, s *hotSet) {
	delete(sh.m, s.key)
	s.reset(nil)
	sh.free = append(sh.free, s)
	h.n.Add(-1)
}

// reset makes s a set of first alone, with nothing measured.
func (s *hotSet) reset(first *Replica) {
	s.members = [MaxSpreadReplicas]*Replica{first}
	s.n, s.hot, s.cool = 1, 0, 0
	if first == nil {
		s.n = 0
	}
}

// remove takes the member at j out of s, keeping the others' order.
func (s *hotSet) remove(j int) {
	copy(s.members[j:s.n], s.members[j+1:s.n])
	s.n--
	s.members[s.n] = nil
}

// spread notes the request in the hot set of its prompt's prefix, in the model pool (a hash of
// its name), and returns the candidate to send it to and the set's size. A size below 2 leaves
// the choice to the cost: best, the cost's choice, is the prefix's one replica, over whether it
// is over the guard against leastOut. cost returns candidate i's cost and load.
func (p *Prefix) spread(cands []*Replica, pr *prefix.Prompt, pool uint64, best int, over bool, leastOut int64,
	cost func(i int) (float64, float64)) (int, int) {
	h := &p.hot
	h.init(p.Spread)
	cfg := &h.cfg
	if cfg.MaxReplicas < 2 || !over && h.n.Load() == 0 {
		return best, 0 // nothing hot: no key, no lock
	}
	var key uint64
	ok := false
	for _, r := range cands {
		if r.Prefix != nil {
			key, ok = r.Prefix.GroupKey(pr, cfg.PrefixTokens)
			break
		}
	}
	if !ok {
		return best, 0
	}
	if pool != 0 {
		key = prefix.Mix(key ^ pool)
	}
	now := cfg.Now().UnixNano()
	sh := &h.shards[key>>60&(hotShards-1)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s := h.track(sh, key, cands[best], over, now)
	if s == nil {
		return best, 0
	}
	s.seen = now
	alpha := 1 / float64(cfg.Window)

	// The members among the candidates (absent ones stay members: an ejection is brief).
	m := s.among(cands, cost)
	if m.k <= 1 {
		// A set of one follows the cost's choice: its share is of requests whose cheapest
		// replica was over the guard.
		hot := s.hot
		s.reset(cands[best])
		s.hot = hot + alpha*(b2f(over)-hot)
		if s.hot >= cfg.HotShare && len(cands) > 1 {
			return p.admit(s, cands, best, cost), 2
		}
		if s.hot < alpha/2 {
			h.drop(sh, s) // cooled: no longer tracked
		}
		return best, 1
	}
	// The set is full when its least loaded member is at the guard: one more request would
	// put it over.
	s.hot += alpha * (b2f(p.Guard.Over(cands[m.least].Outstanding()+1, leastOut)) - s.hot)
	// One member fewer would carry the members' requests in flight: all of them, an upper
	// bound of the prefix's own.
	fewer := (m.sum + int64(m.k) - 2) / int64(m.k-1)
	s.cool += alpha * (b2f(!p.Guard.Over(fewer, leastOut)) - s.cool)
	switch {
	case s.hot >= cfg.HotShare && m.k < cfg.MaxReplicas && m.k < len(cands):
		return p.admit(s, cands, -1, cost), m.k + 1
	case s.cool >= cfg.HotShare:
		// The newest present member leaves; the others take the request.
		for j := s.n - 1; j >= 0; j-- {
			if containsReplica(cands, s.members[j]) {
				s.remove(j)
				break
			}
		}
		s.hot, s.cool = 0, 0
		m = s.among(cands, cost)
	}
	// The cheapest member — the one holding most of the prompt when the members' loads are
	// alike, so that a conversation stays where its turns are cached — unless it is over the
	// guard, then the least loaded.
	if p.Guard.Over(cands[m.cheap].Outstanding(), leastOut) {
		return m.least, m.k
	}
	return m.cheap, m.k
}

// present is what a pick knows of a hot set's members among the candidates.
type present struct {
	k            int   // members among the candidates
	least, cheap int   // the least loaded (ties to the cheaper) and the cheapest (ties to the less loaded)
	sum          int64 // their requests in flight
}

// among returns s's members among cands; cost is the picker's.
func (s *hotSet) among(cands []*Replica, cost func(i int) (float64, float64)) present {
	m := present{least: -1, cheap: -1}
	var lCost, lLoad, cCost, cLoad float64
	for j := 0; j < s.n; j++ {
		for i, r := range cands {
			if r != s.members[j] {
				continue
			}
			m.k++
			m.sum += r.Outstanding()
			c, l := cost(i)
			if m.least < 0 || l < lLoad || l == lLoad && c < lCost {
				m.least, lCost, lLoad = i, c, l
			}
			if m.cheap < 0 || c < cCost || c == cCost && l < cLoad {
				m.cheap, cCost, cLoad = i, c, l
			}
			break
		}
	}
	return m
}

// admit adds to s the cheapest candidate not in it (ties to the less loaded) — where the guard
// sends the prefix's overflow, so often a replica that holds some of it already, rather than an
// idle cold one — in place of a member absent from cands when s is full, and returns it; seed,
// when not negative, is the candidate s holds alone (it was just reset). The shares start over.
func (p *Prefix) admit(s *hotSet, cands []*Replica, seed int, cost func(i int) (float64, float64)) int {
	pick := -1
	var pCost, pLoad float64
next:
	for i, r := range cands {
		if i == seed {
			continue
		}
		for j := 0; j < s.n; j++ {
			if s.members[j] == r {
				continue next
			}
		}
		c, l := cost(i)
		if pick < 0 || c < pCost || c == pCost && l < pLoad {
			pick, pCost, pLoad = i, c, l
		}
	}
	if s.n == len(s.members) || s.n >= p.hot.cfg.MaxReplicas {
		// Full of members absent from cands: the oldest absent one makes room.
		for j := 0; j < s.n; j++ {
			if !containsReplica(cands, s.members[j]) {
				s.remove(j)
				break
			}
		}
	}
	s.members[s.n] = cands[pick]
	s.n++
	s.hot, s.cool = 0, 0
	return pick
}

func containsReplica(cands []*Replica, r *Replica) bool {
	for _, c := range cands {
		if c == r {
			return true
		}
	}
	return false
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
