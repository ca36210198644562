package pipeline

import (
	"context"
	"encoding/binary"
	"math"
	"net/http"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/cache"
	"github.com/layer0ai/layer0/internal/engine"
	"github.com/layer0ai/layer0/internal/llm"
)

// EmbedCall is one embeddings request (POST /v1/embeddings) going through the pipeline.
type EmbedCall struct {
	// Request is the decoded request. Embed does not modify it.
	Request *llm.EmbedRequest
	// Header holds the request's HTTP headers (Cache-Control, and the key when Key is nil).
	Header http.Header
	// Key is the caller, when the server authenticated it already.
	Key *auth.Key
	// Record is filled in as for a generation.
	Record Record
	// Result is the answer, set when Embed returns nil.
	Result *llm.Embeddings
}

// Embed serves an embeddings request through the stages that apply to one: auth, the model's
// permission, the rate limits (a request, a concurrency slot, and the input's tokens; no output),
// the response cache (the exact cache: the same model, texts and dimensions), and the route with
// its fallback chain, each attempt on an engine that embeds (engine.Embedder: the sim, openai
// engines); a model whose engines do not embed is a 400.
func (p *Pipeline) Embed(ctx context.Context, c *EmbedCall) error {
	rec := &c.Record
	req := c.Request
	key, err := p.caller(c.Key, c.Header, rec)
	if err != nil {
		return err
	}
	name, err := p.permit(key, req.Model, rec)
	if err != nil {
		return err
	}
	lease, err := p.limits.Admit(ctx, key.Name)
	if err != nil {
		rec.RateLimited = rateLimited(err)
		return err
	}
	defer lease.Release() //nolint:errcheck // a store that cannot release leaves the limit stricter

	// The cache, before any token is counted: a hit costs no tokens.
	var cm *cache.Model
	var canon *cache.Canon
	if p.cache != nil {
		if cm = p.cache.Model(name); cm != nil {
			ctl := cache.ParseControl(c.Header)
			if ctl.NoStore {
				rec.Cache, cm = CacheBypass, nil
			} else {
				canon = cache.EncodeEmbed(cm.Name, req)
				defer canon.Release()
				rec.Cache = CacheRefresh
				if !ctl.NoCache {
					if e, ok := cm.Get(ctx, canon); ok {
						if res, ok := embeddingsOf(e); ok {
							rec.Cache, rec.Served, rec.Engine, rec.Simulated = CacheHit, e.Served, e.Engine, e.Simulated
							c.Result = res
							return nil
						}
					}
					rec.Cache = CacheMiss
				}
			}
		}
	}

	blocks := make([]llm.Block, len(req.Input))
	for i, s := range req.Input {
		blocks[i] = llm.Block{Type: llm.BlockText, Text: s}
	}
	input, err := p.count(name, &llm.Request{Model: name, Messages: []llm.Message{{Role: llm.RoleUser, Content: blocks}}})
	if err != nil {
		return err
	}
	if err := lease.Reserve(ctx, input); err != nil {
		rec.RateLimited = rateLimited(err)
		return err
	}
	plan, err := p.routes.Plan(name, key.Name, input)
	if err != nil {
		_ = lease.Settle(0, 0)
		return err
	}
	for {
		a, err := plan.Next()
		if err != nil {
			_ = lease.Settle(0, 0)
			return err
		}
		rec.Attempts++
		if a.Fallback != "" {
			rec.Fallbacks = append(rec.Fallbacks, a.Fallback)
		}
		rec.Served, rec.Engine = a.Model, a.Replica.Name
		em, ok := a.Replica.Engine.(engine.Embedder)
		if !ok {
			_ = lease.Settle(0, 0)
			return apierr.Invalid("model", "model %s is served by an engine that does not embed (engines that do: sim, openai)", quote(name))
		}
		up := *req
		up.Model = a.Upstream
		t0 := time.Now()
		res, err := em.Embed(ctx, &up)
		took := time.Since(t0)
		rec.EngineTime += took
		plan.Report(err, took)
		if err == nil {
			sim, _ := a.Replica.Engine.(Simulator)
			rec.Simulated = sim != nil && sim.Simulated()
			if res.InputTokens == 0 {
				res.InputTokens = input
			}
			rec.Usage.InputTokens = res.InputTokens
			_ = lease.Settle(res.InputTokens, 0)
			c.Result = res
			if cm != nil {
				_ = cm.Put(ctx, canon, embedEntry(res, rec, canon, p.cache.Now()))
			}
			return nil
		}
		if ctx.Err() != nil {
			_ = lease.Settle(0, 0)
			return err
		}
	}
}

// An embeddings answer is stored in the response cache as an entry of one event whose text holds
// the vectors: for each, its length (uvarint) and its float32s (little-endian).
func embedEntry(res *llm.Embeddings, rec *Record, canon *cache.Canon, now time.Time) *cache.Entry {
	var b []byte
	for _, v := range res.Vectors {
		b = binary.AppendUvarint(b, uint64(len(v)))
		for _, f := range v {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
		}
	}
	return &cache.Entry{Model: res.Model, Served: rec.Served, Engine: rec.Engine, Simulated: rec.Simulated,
		Events: []llm.Event{{Kind: llm.EventTextDelta, Text: string(b)}},
		Usage:  llm.Usage{InputTokens: res.InputTokens}, Stored: now, Request: canon.Bytes}
}

// embeddingsOf reads the vectors of an entry embedEntry made; false when it is not one.
func embeddingsOf(e *cache.Entry) (*llm.Embeddings, bool) {
	if len(e.Events) != 1 || e.Events[0].Kind != llm.EventTextDelta {
		return nil, false
	}
	b := []byte(e.Events[0].Text)
	res := &llm.Embeddings{Model: e.Model, InputTokens: e.Usage.InputTokens}
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < 4*n {
			return nil, false
		}
		b = b[k:]
		v := make([]float32, n)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		b = b[4*n:]
		res.Vectors = append(res.Vectors, v)
	}
	return res, true
}
