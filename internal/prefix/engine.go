package prefix

import (
	"context"

	"github.com/layer0ai/layer0/internal/llm"
)

// An engine that tokenizes with another tokenizer or chat template than the gateway's stores
// blocks of other token ids: its replica renders prompts with the engine's own tokenizer
// (prefix_cache.tokenize: engine, package enginetok), a ScopedRenderer. A Prompt is rendered
// once by the gateway's renderer, for the input count and for every replica that shares it,
// and once more by each other renderer a replica asks for, on demand: a pick and the record of
// the replica served both use the one rendering.

// ScopedRenderer is a Renderer that renders for a tenant scope and may wait or fail: an
// engine's tokenizer behind HTTP, with a cache of the prompts it rendered for the scope.
type ScopedRenderer interface {
	Renderer
	// RenderScoped appends req's prompt as the engine tokenizes it to dst. scope is the
	// tenant whose cached renderings may answer ("" when they are shared).
	RenderScoped(ctx context.Context, dst []uint32, req *llm.Request, scope string) ([]uint32, error)
	// Identity names the tokenization: two renderers of one identity (the replicas of one
	// model, each asking its own server) render every prompt alike, so a prompt is rendered
	// once for all of them — by another of them when the first fails.
	Identity() string
}

// alt is the prompt rendered by a renderer other than the gateway's.
type alt struct {
	render Renderer
	ident  string // the ScopedRenderer's Identity
	toks   []uint32
	failed bool // the renderer failed: the prompt matches nothing there
	block  int
	keys   []uint64
}

// SetScope gives p the context and the tenant scope an engine's tokenizer renders it with
// (ScopedRenderer). Without it the background context and the shared scope are used.
func (p *Prompt) SetScope(ctx context.Context, scope string) { p.ctx, p.scope = ctx, scope }

// keysFor returns the keys of p's blocks of block tokens as render renders the prompt: p's own
// keys when render made Tokens (or p was set from tokens), else those of render's rendering,
// made on the first call and kept with p. A renderer that fails leaves no keys: the prompt
// matches nothing on its replicas and records nothing there.
func (p *Prompt) keysFor(render Renderer, block int) []uint64 {
	if render == p.base || p.req == nil || render == nil {
		return p.Keys(block)
	}
	a := p.alt(render)
	if a.failed {
		return nil
	}
	if a.block != block {
		a.keys = AppendKeys(a.keys[:0], a.toks, block)
		a.block = block
	}
	return a.keys
}

// alt returns render's rendering of p, rendering it on the first call.
func (p *Prompt) alt(render Renderer) *alt {
	sr, scoped := render.(ScopedRenderer)
	ident := ""
	if scoped {
		ident = sr.Identity()
	}
	var a *alt
	for i := range p.alts {
		b := &p.alts[i]
		if b.render == render || ident != "" && b.ident == ident {
			if !b.failed || b.render == render {
				return b
			}
			a = b // failed by another renderer of the identity: this one tries
			break
		}
	}
	if a == nil {
		if len(p.alts) < cap(p.alts) {
			p.alts = p.alts[:len(p.alts)+1] // reuses the buffers of a pooled prompt
		} else {
			p.alts = append(p.alts, alt{})
		}
		a = &p.alts[len(p.alts)-1]
	}
	a.render, a.ident, a.failed, a.block, a.keys = render, ident, false, 0, a.keys[:0]
	if scoped {
		ctx := p.ctx
		if ctx == nil {
			ctx = context.Background()
		}
		toks, err := sr.RenderScoped(ctx, a.toks[:0], p.req, p.scope)
		a.toks, a.failed = toks, err != nil
		return a
	}
	a.toks = render.AppendRequest(a.toks[:0], p.req)
	return a
}

// TokensFor returns p's tokens as r's engine sees them: the gateway's rendering, or the
// engine's own (ScopedRenderer); nil when the engine's tokenizer failed.
func (p *Prompt) TokensFor(r *Replica) []uint32 {
	if r == nil || r.render == p.base || p.req == nil {
		return p.Tokens
	}
	a := p.alt(r.render)
	if a.failed {
		return nil
	}
	return a.toks
}

// Renderer returns how the replica renders prompts: the gateway's renderer, or the engine's
// own tokenizer.
func (r *Replica) Renderer() Renderer {
	if r == nil {
		return nil
	}
	return r.render
}
