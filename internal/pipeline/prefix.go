package pipeline

import (
	"context"
	"net/http"

	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/prefix"
	"github.com/layer0ai/layer0/internal/route"
)

// Prefix is the prefix index the pipeline records served prompts in; nil when none.
func (p *Pipeline) Prefix() *prefix.Index { return p.prefix }

// indexed reports whether name has replicas in the prefix index, whose picker and records need
// the prompt's tokens.
func (p *Pipeline) indexed(name string) bool {
	return p.prefix != nil && len(p.prefix.Replicas(name)) > 0
}

// countPrompt counts the request's input tokens. For a name whose replicas are indexed it
// renders the prompt into tokens instead of only counting them — about 20% more work than
// counting; the index renders prompts as those engines see them, and the count is the
// rendering's length — and
// keeps them on the call for the router and for recording what the replica served.
//
// A replica whose engine tokenizes the prompt itself (prefix_cache.tokenize: engine) renders it
// again when first weighed, in ctx and for the caller's key — its renderings are kept per key
// unless the model shares its cached state across keys.
func (p *Pipeline) countPrompt(ctx context.Context, c *Call, name string, req *llm.Request) (int, error) {
	if !p.indexed(name) {
		return p.count(name, req)
	}
	c.pr = prefix.GetPrompt()
	p.prefix.Render(c.pr, req)
	scope := c.Record.Key
	if m := p.byID[name]; m != nil && m.ShareAcrossKeys {
		scope = ""
	}
	c.pr.SetScope(ctx, scope)
	return len(c.pr.Tokens), nil
}

// putPrompt returns the call's rendered prompt to its pool.
func (c *Call) putPrompt() {
	if c.pr != nil {
		prefix.PutPrompt(c.pr)
		c.pr = nil
	}
}

// record notes in the index that r served the call's prompt: its blocks' keys (hashed already
// when a prefix picker weighed the prompt) inserted for the replica, as the caller's key's.
func (p *Pipeline) record(c *Call, r *route.Replica) {
	if c.pr == nil {
		return
	}
	p.engines[r].Prefix.RecordFor(c.pr, c.Record.Key)
}

// CacheLookup reports how much of req's prompt the best replica of its model holds in its
// prefix cache, as the index estimates it, without running anything. It counts only what the
// caller's key itself sent there, unless the model shares its cached state across keys
// (Model.ShareAcrossKeys): another key's prompts are no answer to give. The request goes
// through the directives stage as a message does — the engine never sees the directives, and an
// offload target (directive, or the X-Offload-Target header in h) names the model looked up,
// with the same errors — so the answer is for the model a message would go to. The caller
// checks that the key may use the model asked for.
func (p *Pipeline) CacheLookup(key *auth.Key, h http.Header, req *llm.Request) (prefix.Match, error) {
	name, ok := p.routes.Resolve(req.Model)
	if !ok {
		return prefix.Match{}, notFound(req.Model)
	}
	c := &Call{Request: req, Header: h}
	req, name, err := p.applyDirectives(c, key, name)
	if err != nil {
		return prefix.Match{}, err
	}
	if p.prefix == nil || len(p.prefix.Replicas(name)) == 0 {
		// Nothing indexed for the model: none of the prompt is known to be cached.
		n, err := p.count(name, req)
		return prefix.Match{Replica: -1, PromptTokens: n}, err
	}
	if m := p.byID[name]; m != nil && m.ShareAcrossKeys {
		return p.prefix.Lookup(name, req), nil
	}
	return p.prefix.LookupOwn(name, key.Name, req), nil
}

// Prediction is a prefix picker's prediction of the prompt tokens the served replica held,
// next to what its engine reported serving from its cache.
type Prediction struct {
	// Checked is set when the engine's report was compared (the engine reports cached tokens).
	Checked bool
	// Predicted and Engine are the picker's and the engine's cached prompt tokens.
	Predicted, Engine int
}

// Predicted is the prediction of a replica's cached prompt tokens checked against the engine's
// report: what the prefix index expected it to hold (cached) of a prompt of n tokens, at most
// all but the last, which an engine computes whatever it holds. A trace read by the request's
// own key makes its prediction the same way (trace.Trace.Own).
func Predicted(cached, n int) int { return min(cached, max(n-1, 0)) }

// checkPrediction compares what the prefix picker predicted the served replica held of the
// prompt (Predicted) with what its engine reported serving from its cache, on the record and in
// the replica's drift check (prefix.Replica.Observe).
func (p *Pipeline) checkPrediction(c *Call) {
	rec := &c.Record
	d := &rec.Pick
	if c.pr == nil || d.Picker != "prefix" || d.Chosen < 0 || d.Chosen >= d.N || d.Candidates[d.Chosen].Replica != rec.Engine {
		return
	}
	r := p.prefix.Replica(rec.Engine)
	u := &rec.Usage
	pred := Predicted(d.Candidates[d.Chosen].Cached, u.InputTokens+u.CacheReadInputTokens+u.CacheCreationInputTokens)
	if r.Observe(pred, u.CacheReadInputTokens) {
		rec.Prediction = Prediction{Checked: true, Predicted: pred, Engine: u.CacheReadInputTokens}
	}
}
