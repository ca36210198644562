package prefix

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"sync"

	"github.com/zeebo/xxh3"

	"github.com/layer0ai/layer0/internal/llm"
)

// Renderer renders a request's prompt as the engine sees it, in token ids: its chat template
// (where layer0 knows it, else a stable rendering of tools, system prompt and messages),
// tokenized. *tokenizer.Codec is one.
type Renderer interface {
	AppendRequest(dst []uint32, r *llm.Request) []uint32
}

// DefaultBlockTokens is the block size of an engine whose block size is not configured:
// vLLM's default.
const DefaultBlockTokens = 16

// Replica is what the index knows of one engine replica: its name, how it renders and blocks
// a prompt, the keys it is estimated to hold, and whose requests put them there. It is safe for
// concurrent use. A nil *Replica is a replica without an index: it records nothing and matches
// nothing.
type Replica struct {
	name   string
	block  int
	render Renderer
	cache  *Cache
	exact  *precise // the engine's own events, in precise mode; nil otherwise
	// owned holds, for each tenant that sent a prompt here (RecordFor), its blocks' keys mixed
	// with the tenant's: what MatchOwn counts. The mix is keyed by seed, random per replica,
	// so that no prompt of one tenant can be made to stand for another tenant's block.
	owned *Cache
	seed  uint64
	pred  predictions // the last predictions checked against the engine (predict.go)
}

// NewReplica returns the index of the replica name, whose engine caches blocks of blockTokens
// tokens (DefaultBlockTokens when not positive) and holds capacityTokens of them. It returns
// nil when capacityTokens holds no block: there is nothing to index.
func NewReplica(name string, render Renderer, blockTokens, capacityTokens int) *Replica {
	if blockTokens <= 0 {
		blockTokens = DefaultBlockTokens
	}
	c := NewCache(capacityTokens / blockTokens)
	if c == nil || render == nil {
		return nil
	}
	var seed [8]byte
	_, _ = rand.Read(seed[:]) // crypto/rand.Read never fails (it crashes the program instead)
	return &Replica{name: name, block: blockTokens, render: render, cache: c, owned: NewCache(c.Capacity()),
		seed: binary.LittleEndian.Uint64(seed[:])}
}

// Name returns the replica's name.
func (r *Replica) Name() string {
	if r == nil {
		return ""
	}
	return r.name
}

// BlockTokens returns the replica's block size in tokens.
func (r *Replica) BlockTokens() int {
	if r == nil {
		return 0
	}
	return r.block
}

// Cache returns the replica's keys.
func (r *Replica) Cache() *Cache {
	if r == nil {
		return nil
	}
	return r.cache
}

// Record notes that the replica served req: every full block of its prompt is now cached
// there, most recently used. It renders and tokenizes the prompt into pooled buffers, so it
// allocates nothing in steady state.
func (r *Replica) Record(req *llm.Request) {
	if r == nil {
		return
	}
	p := GetPrompt()
	p.Render(r.render, req)
	r.RecordPrompt(p)
	PutPrompt(p)
}

// RecordPrompt is Record for a prompt already rendered the replica's way. In precise mode the
// prompt still goes into the approximate index (the fallback), and its first block is checked
// against the engine's events (see EnablePrecise).
func (r *Replica) RecordPrompt(p *Prompt) {
	if r == nil {
		return
	}
	keys := r.keys(p)
	r.cache.Insert(keys)
	if r.exact != nil {
		r.exact.expect(r.name, keys)
	}
}

// RecordFor is RecordPrompt for a prompt the tenant (an API key's name) sent: its blocks are
// also noted as the tenant's own, for MatchOwn.
func (r *Replica) RecordFor(p *Prompt, tenant string) {
	if r == nil {
		return
	}
	r.RecordPrompt(p)
	r.owned.Insert(p.ownedKeys(r.keys(p), r.tenant(tenant)))
}

// tenant is the value the keys of tenant's blocks are mixed with.
func (r *Replica) tenant(name string) uint64 { return xxh3.HashStringSeed(name, r.seed) }

// MatchOwn is Match counting only the blocks tenant's own requests put there (RecordFor): what
// the replica holds of p that the tenant could know of without anyone else's prompts. Another
// tenant's identical prompt counts for nothing, so the answer says nothing of what others sent.
func (r *Replica) MatchOwn(p *Prompt, tenant string) int {
	if r == nil {
		return 0
	}
	n := r.Match(p)
	if n == 0 {
		return 0
	}
	return min(n, r.owned.Match(p.ownedKeys(r.keys(p), r.tenant(tenant)))*r.block)
}

// Match returns how many of p's tokens the replica holds: its cached leading blocks times the
// block size. In precise mode, while it follows the engine's events, they answer; otherwise
// the approximate index does.
func (r *Replica) Match(p *Prompt) int {
	if r == nil {
		return 0
	}
	keys := r.keys(p)
	if r.exact != nil && r.exact.active() {
		return r.exact.match(keys) * r.block
	}
	return r.cache.Match(keys) * r.block
}

// GroupKey names p's prefix for the prefix picker's hot prefixes: the chained key of p's
// leading blocks as the replica keys them, as many as fit in maxTokens (at least one), mixed
// with p's tenant scope (SetScope) when it has one, so that two tenants' identical prompts
// have distinct keys unless their scope is shared. ok is false when p has no full block.
func (r *Replica) GroupKey(p *Prompt, maxTokens int) (key uint64, ok bool) {
	if r == nil {
		return 0, false
	}
	keys := r.keys(p)
	n := min(len(keys), max(maxTokens/r.block, 1))
	if n == 0 {
		return 0, false
	}
	key = keys[n-1]
	if p.scope != "" {
		key = Mix(key ^ xxh3.HashString(p.scope))
	}
	return key, true
}

// keys returns the chained keys of p's blocks as the replica's engine sees them: rendered by
// the replica's renderer (the gateway's, or the engine's own tokenizer) in its block size.
func (r *Replica) keys(p *Prompt) []uint64 { return p.keysFor(r.render, r.block) }

// Prompt is a rendered prompt, its tokens and its block keys for one block size, computed once
// and reused for every replica of that block size. Get one with GetPrompt and return it with
// PutPrompt; the zero value is ready to use. A Prompt is not safe for concurrent use.
type Prompt struct {
	// Tokens are the prompt's token ids as the gateway's renderer sees them.
	Tokens []uint32
	block  int // the block size keys holds keys of; 0 when none
	keys   []uint64
	owned  []uint64 // keys mixed with a tenant (ownedKeys), rewritten on each call

	// What other renderers need to render the prompt their way (engine.go): the request, and
	// the context and tenant scope of an engine's tokenizer.
	base  Renderer // rendered Tokens; nil when set by SetTokens
	req   *llm.Request
	ctx   context.Context
	scope string
	alts  []alt // the prompt rendered by other renderers, on demand
}

var prompts = sync.Pool{New: func() any { return new(Prompt) }}

// maxPooled is the largest prompt, in tokens, whose buffers go back to the pool: a huge one
// is left to the collector rather than pinned.
const maxPooled = 1 << 17

// GetPrompt returns an empty Prompt from the pool.
func GetPrompt() *Prompt { return prompts.Get().(*Prompt) }

// PutPrompt returns p to the pool; p must not be used after.
func PutPrompt(p *Prompt) {
	if cap(p.Tokens) > maxPooled {
		return
	}
	p.Reset()
	prompts.Put(p)
}

// Reset empties p, keeping its buffers.
func (p *Prompt) Reset() {
	p.Tokens, p.keys, p.owned, p.block = p.Tokens[:0], p.keys[:0], p.owned[:0], 0
	p.base, p.req, p.ctx, p.scope = nil, nil, nil, ""
	p.alts = p.alts[:0]
}

// Render sets p to req's prompt as render renders it, keeping its scope (SetScope). req must
// stay valid while p is used: a replica that renders prompts its own way (an engine's
// tokenizer) renders it again.
func (p *Prompt) Render(render Renderer, req *llm.Request) {
	ctx, scope := p.ctx, p.scope
	p.Reset()
	p.Tokens = render.AppendRequest(p.Tokens, req)
	p.base, p.req, p.ctx, p.scope = render, req, ctx, scope
}

// SetTokens sets p to the prompt of token ids toks (copied).
func (p *Prompt) SetTokens(toks []uint32) {
	p.Reset()
	p.Tokens = append(p.Tokens, toks...)
}

// Keys returns the chained keys of p's full blocks of block tokens, computed on the first call
// for that block size. The slice is valid until the next call with another size.
func (p *Prompt) Keys(block int) []uint64 {
	if p.block != block {
		p.keys = AppendKeys(p.keys[:0], p.Tokens, block)
		p.block = block
	}
	return p.keys
}

// ownedKeys returns keys, a prompt's block keys, mixed with a tenant's value t: a chain as the
// keys are (each depends on the blocks before it), in a buffer valid until the next call.
func (p *Prompt) ownedKeys(keys []uint64, t uint64) []uint64 {
	p.owned = p.owned[:0]
	for _, k := range keys {
		p.owned = append(p.owned, Mix(k^t))
	}
	return p.owned
}

// Match is how much of a prompt the best of a set of replicas holds.
type Match struct {
	// Replica is the index, in the set looked up, of the replica holding the most; -1 when
	// none holds any of the prompt.
	Replica int
	// Name is that replica's name, "" when none.
	Name string
	// CachedTokens is how many of the prompt's leading tokens it holds.
	CachedTokens int
	// PromptTokens is the prompt's length in tokens.
	PromptTokens int
}

// Hit reports whether any of the prompt is cached.
func (m Match) Hit() bool { return m.CachedTokens > 0 }

// Ratio is the cached share of the prompt's tokens, 0 to 1.
func (m Match) Ratio() float64 {
	if m.PromptTokens <= 0 {
		return 0
	}
	return float64(m.CachedTokens) / float64(m.PromptTokens)
}

// Best returns the replica among reps (nil entries allowed) that holds the longest leading
// part of p; ties go to the first. cached, when not nil, receives each replica's cached tokens
// (it must be as long as reps), for a router that weighs them against load.
func Best(p *Prompt, reps []*Replica, cached []int) Match {
	return best(p, reps, cached, (*Replica).Match)
}

// best is Best with the replicas' holdings counted by match.
func best(p *Prompt, reps []*Replica, cached []int, match func(*Replica, *Prompt) int) Match {
	m := Match{Replica: -1, PromptTokens: len(p.Tokens)}
	for i, r := range reps {
		n := match(r, p)
		if cached != nil {
			cached[i] = n
		}
		if n > m.CachedTokens {
			m.Replica, m.Name, m.CachedTokens = i, r.name, n
		}
	}
	return m
}

// Index is the prefix index of a configuration: for each name clients may ask for, the
// replicas that may serve it. It is immutable once built; the replicas' caches carry the state
// and may outlive it (a reload keeps an unchanged engine's).
type Index struct {
	render Renderer
	models map[string][]*Replica
	byName map[string]*Replica
}

// NewIndex returns the index of models: canonical name → the replicas that may serve it (nil
// entries and names without replicas are dropped). render renders the prompts looked up.
func NewIndex(render Renderer, models map[string][]*Replica) *Index {
	x := &Index{render: render, models: make(map[string][]*Replica, len(models)), byName: map[string]*Replica{}}
	if render == nil {
		return x // nothing can be rendered: nothing is indexed
	}
	for name, reps := range models {
		var keep []*Replica
		for _, r := range reps {
			if r != nil {
				keep = append(keep, r)
				x.byName[r.name] = r
			}
		}
		if len(keep) > 0 {
			x.models[name] = keep
		}
	}
	return x
}

// Replicas returns the indexed replicas that may serve the canonical name model; none when
// its engines keep no prefix cache the index knows of. The slice must not be modified.
func (x *Index) Replicas(model string) []*Replica {
	if x == nil {
		return nil
	}
	return x.models[model]
}

// Replica returns the indexed replica named name; nil when there is none.
func (x *Index) Replica(name string) *Replica {
	if x == nil {
		return nil
	}
	return x.byName[name]
}

// Render sets p to req's prompt as the index renders it.
func (x *Index) Render(p *Prompt, req *llm.Request) { p.Render(x.render, req) }

// Lookup renders req's prompt and returns how much of it the best replica of the canonical
// name model holds, whoever sent it. It runs nothing and changes nothing.
func (x *Index) Lookup(model string, req *llm.Request) Match {
	return x.lookup(model, "", req, (*Replica).Match)
}

// LookupOwn is Lookup counting only what tenant's own requests left in the replicas
// (Replica.MatchOwn).
func (x *Index) LookupOwn(model, tenant string, req *llm.Request) Match {
	return x.lookup(model, tenant, req, func(r *Replica, p *Prompt) int { return r.MatchOwn(p, tenant) })
}

// lookup is Lookup and LookupOwn's work; scope is the tenant an engine's tokenizer renders for.
func (x *Index) lookup(model, scope string, req *llm.Request, match func(*Replica, *Prompt) int) Match {
	if x == nil || x.render == nil {
		return Match{Replica: -1}
	}
	p := GetPrompt()
	p.Render(x.render, req)
	p.SetScope(context.Background(), scope)
	m := best(p, x.models[model], nil, match)
	PutPrompt(p)
	return m
}
