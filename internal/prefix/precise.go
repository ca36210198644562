package prefix

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/layer0ai/layer0/internal/kvevents"
)

// Precise mode: the replica's index follows the engine's own KV-cache events instead of
// estimating from what layer0 sent there. The engine names its blocks by its own hashes (a
// sha256 of its block contents, an integer of a Python hash, depending on its version), which
// layer0 cannot and need not reproduce: each BlockStored carries the blocks' token ids and the
// engine hash of the block before, so layer0 looks the parent up (engine hash → layer0 key),
// chains its own key over the token ids, and keeps both. Lookups then compare layer0's keys of
// a prompt, as in approximate mode. This is exact when layer0 renders and tokenizes the prompt
// exactly as the engine does (same token ids, same block size); the replica checks both:
//
//   - a BlockStored of another block size than the replica's switches it to approximate mode
//     at once;
//   - the first block of each of the first PreciseOptions.Checks prompts served there must
//     show up in the events within PreciseOptions.Grace (held when the prompt was served, or
//     stored since: a block evicted again before the check still counts); when fewer than half do, layer0's
//     tokenization does not agree with the engine's and the replica falls back to approximate
//     mode.
//
// Either is logged once, and the mode is reported by Mode. While the subscription is not
// connected the approximate estimate answers too: the approximate cache keeps learning from
// every request in precise mode, so that it is warm when it is needed.

// PreciseOptions tunes a replica's precise mode. Zero fields take the defaults.
type PreciseOptions struct {
	// Checks is how many served prompts are checked against the events before the agreement
	// is decided. Default 16.
	Checks int
	// Grace is how long after a prompt was served its first block must be in the events.
	// Default 2s.
	Grace time.Duration
	// Logger receives the fallback to approximate mode, once; nil discards it.
	Logger *slog.Logger
	// Now is the clock of the checks; nil means time.Now.
	Now func() time.Time
}

// Agreement verdicts.
const (
	checking int32 = iota
	agreed
	disagreed
)

// precise is a replica's exact index: what the engine's events say it holds.
type precise struct {
	opt PreciseOptions
	max int // blocks held at most

	mu     sync.RWMutex
	engine map[kvevents.Hash]block // engine block hash → its layer0 key and parent's
	keys   map[uint64]keyed        // layer0 key → the engine blocks keyed so
	// open is set when a key was removed while blocks chained on it stayed: the keys held are
	// then not closed under "the block before", and a lookup must probe every block in turn
	// instead of bisecting. An engine evicts a prompt's blocks from its end, so this is rare;
	// a reset clears it.
	open bool

	connected atomic.Bool
	verdict   atomic.Int32
	why       atomic.Pointer[string] // why the replica fell back; nil while it did not

	checkMu          sync.Mutex
	pending          []check
	checked, matched int

	stored, removed, orphans, dropped, cleared atomic.Uint64
	ignored                                    atomic.Uint64
}

// block is one engine block: its layer0 key, and its parent's (0 for none: a chained key is 0
// with a chance of 2⁻⁶⁴).
type block struct {
	key, parent uint64
}

// keyed counts the engine blocks with one layer0 key, and those chained on it.
type keyed struct {
	refs, children int32
}

type check struct {
	key  uint64
	at   time.Time
	seen bool // the block was held when the prompt was served, or stored since
}

// maxPending bounds the prompts waiting to be checked.
const maxPending = 64

// EnablePrecise switches r to precise mode: its index follows the engine's KV-cache events,
// given to it as a kvevents.Handler. It holds at most the replica's capacity in blocks; events
// beyond are dropped (and counted), so the capacity should be at least the engine's KV cache.
// It returns r.
func (r *Replica) EnablePrecise(opt PreciseOptions) *Replica {
	if r == nil {
		return nil
	}
	if opt.Checks <= 0 {
		opt.Checks = 16
	}
	if opt.Grace <= 0 {
		opt.Grace = 2 * time.Second
	}
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	n := r.cache.Capacity()
	r.exact = &precise{opt: opt, max: n, engine: make(map[kvevents.Hash]block, n), keys: make(map[uint64]keyed, n)}
	return r
}

// Mode returns the replica's index mode: "precise" while it follows the engine's events,
// "approximate" otherwise; with why a replica configured precise is not ("not connected",
// or the disagreement found).
func (r *Replica) Mode() (mode, why string) {
	if r == nil || r.exact == nil {
		return "approximate", ""
	}
	x := r.exact
	if w := x.why.Load(); w != nil {
		return "approximate", *w
	}
	if !x.connected.Load() {
		return "approximate", "not connected to the engine's KV events"
	}
	return "precise", ""
}

// Precise reports whether r is configured for precise mode, and whether it is in it now.
func (r *Replica) Precise() (configured, active bool) {
	if r == nil || r.exact == nil {
		return false, false
	}
	return true, r.exact.active()
}

func (x *precise) active() bool {
	return x.connected.Load() && x.verdict.Load() != disagreed
}

// PreciseStats are a precise replica's event counters.
type PreciseStats struct {
	// Blocks is how many blocks the exact index holds.
	Blocks int
	// Stored and Removed count the blocks applied; Cleared the resets (AllBlocksCleared, a
	// reconnection, a gap in the events).
	Stored, Removed, Cleared uint64
	// Orphans are stored blocks whose parent was unknown (stored before the subscription),
	// Dropped those beyond the capacity, Ignored those of another medium, KV-cache group or a
	// LoRA adapter.
	Orphans, Dropped, Ignored uint64
}

// PreciseStats returns r's event counters; zero when r is not in precise mode.
func (r *Replica) PreciseStats() PreciseStats {
	if r == nil || r.exact == nil {
		return PreciseStats{}
	}
	x := r.exact
	x.mu.RLock()
	n := len(x.engine)
	x.mu.RUnlock()
	return PreciseStats{Blocks: n, Stored: x.stored.Load(), Removed: x.removed.Load(), Cleared: x.cleared.Load(),
		Orphans: x.orphans.Load(), Dropped: x.dropped.Load(), Ignored: x.ignored.Load()}
}

// Reset, SetConnected and Apply make a replica in precise mode a kvevents.Handler; they must
// not be called before EnablePrecise.

// Reset implements kvevents.Handler: the replica forgets what the events said.
func (r *Replica) Reset() {
	x := r.exact
	x.mu.Lock()
	clear(x.engine)
	clear(x.keys)
	x.open = false
	x.mu.Unlock()
	x.cleared.Add(1)
}

// SetConnected implements kvevents.Handler.
func (r *Replica) SetConnected(c bool) { r.exact.connected.Store(c) }

// Apply implements kvevents.Handler.
func (r *Replica) Apply(b *kvevents.Batch) {
	x := r.exact
	for i := range b.Events {
		e := &b.Events[i]
		if e.Kind == kvevents.AllBlocksCleared {
			r.Reset()
			continue
		}
		if e.Group != 0 || e.LoRA || e.Medium != "" && !strings.EqualFold(e.Medium, "GPU") {
			// Another tier, another group of a hybrid model, or a LoRA adapter's blocks (whose
			// keys include the adapter): not what a prompt's keys are matched against.
			x.ignored.Add(uint64(len(e.Hashes)))
			continue
		}
		switch e.Kind {
		case kvevents.BlockStored:
			if e.BlockSize != r.block {
				x.disagree(r.name, fmt.Sprintf("the engine's block size is %d tokens, the index's %d", e.BlockSize, r.block))
				continue
			}
			x.store(e, r.block)
			if !e.HasParent && len(e.Tokens) >= r.block && x.verdict.Load() == checking {
				// A prompt's first block, which the agreement check looks for: seen now, so
				// that its eviction before the check does not count against the agreement.
				x.saw(HashTokens(fnvOffset, e.Tokens[:r.block]))
			}
		case kvevents.BlockRemoved:
			x.remove(e.Hashes)
		}
	}
	x.settle(r.name)
}

func (x *precise) store(e *kvevents.Event, size int) {
	if len(e.Tokens) != len(e.Hashes)*size {
		x.ignored.Add(uint64(len(e.Hashes))) // not whole blocks: the event cannot be chained
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	key, parent := uint64(fnvOffset), uint64(0)
	if e.HasParent {
		b, ok := x.engine[e.Parent]
		if !ok {
			x.orphans.Add(uint64(len(e.Hashes)))
			return
		}
		key, parent = b.key, b.key
	}
	for i, h := range e.Hashes {
		key = HashTokens(key, e.Tokens[i*size:(i+1)*size])
		if _, ok := x.engine[h]; ok {
			parent = key
			continue // stored again: already counted
		}
		if len(x.engine) >= x.max {
			x.dropped.Add(uint64(len(e.Hashes) - i))
			return
		}
		x.engine[h] = block{key: key, parent: parent}
		k := x.keys[key]
		k.refs++
		x.keys[key] = k
		if parent != 0 {
			p := x.keys[parent]
			p.children++
			x.keys[parent] = p
		}
		parent = key
		x.stored.Add(1)
	}
}

func (x *precise) remove(hs []kvevents.Hash) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, h := range hs {
		b, ok := x.engine[h]
		if !ok {
			continue
		}
		delete(x.engine, h)
		k := x.keys[b.key]
		if k.refs--; k.refs > 0 {
			x.keys[b.key] = k
		} else {
			if k.children > 0 {
				x.open = true // blocks chained on it stay
			}
			delete(x.keys, b.key)
		}
		if p, ok := x.keys[b.parent]; ok && b.parent != 0 {
			p.children--
			x.keys[b.parent] = p
		}
		x.removed.Add(1)
	}
}

// match returns how many of the leading keys the engine holds, counting from the first to the
// first missing, as the engine's lookup does: by bisection while the keys held are closed
// under "the block before" (see open), else probing each in turn.
func (x *precise) match(keys []uint64) int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.open {
		for i, k := range keys {
			if _, ok := x.keys[k]; !ok {
				return i
			}
		}
		return len(keys)
	}
	return heldPrefix(keys, x.keys)
}

// expect notes that a prompt with these keys was served: its first block must show up.
func (x *precise) expect(name string, keys []uint64) {
	if len(keys) == 0 || x.verdict.Load() != checking {
		return
	}
	x.mu.RLock()
	_, held := x.keys[keys[0]]
	x.mu.RUnlock()
	x.checkMu.Lock()
	if len(x.pending) < maxPending {
		x.pending = append(x.pending, check{key: keys[0], at: x.opt.Now(), seen: held})
	}
	x.checkMu.Unlock()
	x.settle(name)
}

// saw marks the prompts waiting to be checked whose first block is key as seen.
func (x *precise) saw(key uint64) {
	x.checkMu.Lock()
	for i := range x.pending {
		if x.pending[i].key == key {
			x.pending[i].seen = true
		}
	}
	x.checkMu.Unlock()
}

// settle checks the prompts served more than the grace ago, and decides the agreement once
// enough were checked.
func (x *precise) settle(name string) {
	if x.verdict.Load() != checking {
		return
	}
	now := x.opt.Now()
	x.checkMu.Lock()
	defer x.checkMu.Unlock()
	n := 0
	for _, c := range x.pending {
		if now.Sub(c.at) < x.opt.Grace {
			break
		}
		n++
		if !x.connected.Load() {
			continue // nothing could be seen: not evidence either way
		}
		ok := c.seen
		if !ok {
			x.mu.RLock()
			_, ok = x.keys[c.key]
			x.mu.RUnlock()
		}
		x.checked++
		if ok {
			x.matched++
		}
	}
	x.pending = append(x.pending[:0], x.pending[n:]...)
	if x.checked < x.opt.Checks {
		return
	}
	if 2*x.matched >= x.checked {
		x.verdict.Store(agreed)
		return
	}
	x.disagree(name, fmt.Sprintf("only %d of the first %d prompts served were found in the engine's KV events: "+
		"layer0 does not tokenize them as the engine does", x.matched, x.checked))
}

// disagree switches the replica to approximate mode for good, logging why once.
func (x *precise) disagree(name, why string) {
	if x.verdict.Swap(disagreed) == disagreed {
		return
	}
	x.why.Store(&why)
	x.opt.Logger.Warn("prefix index: precise mode cannot agree with the engine; falling back to approximate mode",
		"engine", name, "reason", why)
}
