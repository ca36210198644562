package sim

import (
	"fmt"
	"sync"
	"time"

	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/kvevents"
	"github.com/layer0ai/layer0/internal/prefix"
)

// events publishes the simulator's KV-cache events as vLLM's publisher does
// (config.Sim.KVEvents): every prefill's evicted blocks (BlockRemoved) and new blocks
// (BlockStored, with their token ids and parent), and AllBlocksCleared when the cache is
// reset. The blocks are named by the engine's own hashes, not by layer0's keys (engineHash), as
// a real engine's are: a subscriber must map them through the token ids.
type events struct {
	mu       sync.Mutex // orders the cache's changes with their batches
	endpoint string     // the address bound, port 0 resolved
	pub      *kvevents.Publisher
	cfg      config.Sim
	replay   *kvevents.ReplayServer // the last batches, for a subscriber's gap; nil when none
	drop     int                    // batches to lose on the way (DropKVEvents)
	enc      *kvevents.Encoder
	batch    []kvevents.Event
	evicted  []uint64
	hashes   []kvevents.Hash
	removed  []kvevents.Hash
}

// engineSalt makes the engine's block hashes differ from layer0's keys.
const engineSalt = 0x6b76_6576_656e_7473

// engineHash is the hash the simulator publishes for the block layer0 keys key.
func engineHash(key uint64) kvevents.Hash { return kvevents.Hash(prefix.Mix(key ^ engineSalt)) }

func newEvents(cfg config.Sim) (*events, error) {
	pub, err := newPublisher(cfg)
	if err != nil {
		return nil, err
	}
	ev := &events{endpoint: pub.Endpoint(), pub: pub, enc: kvevents.NewEncoder(), cfg: cfg}
	if cfg.KVReplay != "" {
		if ev.replay, err = kvevents.NewReplayServer(cfg.KVReplay, replayBatches); err != nil {
			pub.Close()
			return nil, fmt.Errorf("sim: %w", err)
		}
	}
	return ev, nil
}

// replayBatches is how many batches the replay server keeps.
const replayBatches = 1024

// newPublisher binds the events' endpoint, or connects to it (KVEventsConnect).
func newPublisher(cfg config.Sim) (*kvevents.Publisher, error) {
	open := kvevents.NewPublisher
	if cfg.KVEventsConnect {
		open = kvevents.DialPublisher
	}
	pub, err := open(cfg.KVEvents, cfg.KVEventsTopic)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	return pub, nil
}

// prefill is Engine.prefill's lookup and insertion when events are published: one batch per
// prefill, published in the cache's order.
func (ev *events) prefill(c *prefix.Cache, keys []uint64, toks []uint32, block int) int {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	hit, stored, evicted := c.MatchInsertEvict(keys, ev.evicted[:0])
	ev.evicted = evicted
	ev.batch = ev.batch[:0]
	if len(evicted) > 0 {
		ev.removed = ev.removed[:0]
		for _, k := range evicted {
			ev.removed = append(ev.removed, engineHash(k))
		}
		ev.batch = append(ev.batch, kvevents.Event{Kind: kvevents.BlockRemoved, Hashes: ev.removed})
	}
	if stored > hit {
		ev.hashes = ev.hashes[:0]
		for _, k := range keys[hit:stored] {
			ev.hashes = append(ev.hashes, engineHash(k))
		}
		e := kvevents.Event{Kind: kvevents.BlockStored, Hashes: ev.hashes, Tokens: toks[hit*block : stored*block],
			BlockSize: block}
		if hit > 0 {
			e.Parent, e.HasParent = engineHash(keys[hit-1]), true
		}
		ev.batch = append(ev.batch, e)
	}
	ev.publishLocked()
	return hit
}

// clear empties the cache and publishes AllBlocksCleared.
func (ev *events) clear(c *prefix.Cache) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	c.Reset()
	ev.batch = append(ev.batch[:0], kvevents.Event{Kind: kvevents.AllBlocksCleared})
	ev.publishLocked()
}

func (ev *events) publishLocked() {
	if len(ev.batch) == 0 {
		return
	}
	p, err := ev.enc.Encode(float64(time.Now().UnixNano())/1e9, ev.batch)
	if err != nil {
		return // the events are built here: an encoding error is a bug, and the batch is lost as if dropped
	}
	if ev.replay != nil {
		ev.replay.Keep(ev.pub.Published(), p)
	}
	if ev.drop > 0 {
		ev.drop--
		ev.pub.Skip()
		return
	}
	ev.pub.Publish(p)
}

// restart closes the publisher and opens a new one on the same address, its sequence from 0.
func (ev *events) restart() error {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	if err := ev.pub.Close(); err != nil {
		return fmt.Errorf("sim: close kv events: %w", err)
	}
	cfg := ev.cfg
	cfg.KVEvents = ev.endpoint
	pub, err := newPublisher(cfg)
	if err != nil {
		return err
	}
	ev.pub = pub
	return nil
}

// DropKVEvents loses the engine's next n event batches on the way to its subscribers (their
// sequence numbers taken, the replay server keeping them), for tests of a gap.
func (e *Engine) DropKVEvents(n int) {
	if e.events == nil {
		return
	}
	e.events.mu.Lock()
	e.events.drop += n
	e.events.mu.Unlock()
}

// KVReplayEndpoint returns the endpoint of the engine's replay server (its port resolved); ""
// when it has none.
func (e *Engine) KVReplayEndpoint() string {
	if e.events == nil || e.events.replay == nil {
		return ""
	}
	return e.events.replay.Endpoint()
}

// KVEventsEndpoint returns the endpoint the engine publishes its KV-cache events on (the port
// chosen when sim.kv_events asked for port 0); "" when it publishes none.
func (e *Engine) KVEventsEndpoint() string {
	if e.events == nil {
		return ""
	}
	return e.events.endpoint
}

// KVEventBatches returns how many event batches the engine's current publisher has published
// (the next batch's sequence number); 0 when it publishes none.
func (e *Engine) KVEventBatches() uint64 {
	if e.events == nil {
		return 0
	}
	e.events.mu.Lock()
	defer e.events.mu.Unlock()
	return e.events.pub.Published()
}

// ResetCache empties the prefix KV cache, as vLLM's /reset_prefix_cache does, and publishes
// AllBlocksCleared.
func (e *Engine) ResetCache() {
	if e.events != nil {
		e.events.clear(e.cache)
		return
	}
	e.cache.Reset()
}

// Restart simulates the engine restarting: its prefix cache is emptied and its event publisher
// closed and opened again on the same address, its sequence from 0, without an
// AllBlocksCleared (a restarted engine does not say what it lost).
func (e *Engine) Restart() error {
	e.cache.Reset()
	if e.events == nil {
		return nil
	}
	return e.events.restart()
}
