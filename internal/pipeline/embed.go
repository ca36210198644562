package pipeline

import (
	"context"
	"encoding/base64"
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
		rec.RateLimited = apierr.IsRateLimit(err)
		return err
	}
	defer lease.Release() //nolint:errcheck // a store that cannot release leaves the limit stricter

	// The cache, before any token is counted: a hit costs no tokens.
	cm, canon, hit := p.embedCached(ctx, c, name)
	if canon != nil {
		defer canon.Release()
	}
	if hit {
		return nil
	}
	input, err := p.countEmbed(name, req)
	if err != nil {
		return err
	}
	if err := lease.Reserve(ctx, input); err != nil {
		rec.RateLimited = apierr.IsRateLimit(err)
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
			// Only the model asked for, with no fallback, fills its cache: a fallback's vectors
			// are another model's, in another space.
			if cm != nil && storable(rec, cm) {
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

// embedCached looks the request up in the model's response cache, as the request's
// Cache-Control allows, and records what the cache did. On a hit it sets c.Result and reports
// hit. cm is the model's cache to store the answer in, nil when there is none or the request
// may not be stored; canon is the request's cache key, which the caller releases (nil when cm
// is).
func (p *Pipeline) embedCached(ctx context.Context, c *EmbedCall, name string) (cm *cache.Model, canon *cache.Canon, hit bool) {
	if p.cache == nil {
		return nil, nil, false
	}
	if cm = p.cache.Model(name); cm == nil {
		return nil, nil, false
	}
	rec := &c.Record
	ctl := cache.ParseControl(c.Header)
	if ctl.NoStore {
		rec.Cache = CacheBypass
		return nil, nil, false
	}
	// Answers belong to the key that asked, unless the model shares them across keys (as for a
	// generation): another key's texts are never this key's hit.
	canon = cache.EncodeEmbed(cm.Tenant(rec.Key), cm.Name, c.Request)
	rec.Cache = CacheRefresh
	if ctl.NoCache {
		return cm, canon, false
	}
	if e, ok := cm.Get(ctx, canon); ok {
		if res, ok := embeddingsOf(e); ok {
			rec.Cache, rec.Served, rec.Engine, rec.Simulated = CacheHit, e.Served, e.Engine, e.Simulated
			c.Result = res
			return cm, canon, true
		}
	}
	rec.Cache = CacheMiss
	return cm, canon, false
}

// countEmbed counts the input texts of req in model name's tokenizer, as one user message of a
// text block each.
func (p *Pipeline) countEmbed(name string, req *llm.EmbedRequest) (int, error) {
	blocks := make([]llm.Block, len(req.Input))
	for i, s := range req.Input {
		blocks[i] = llm.Block{Type: llm.BlockText, Text: s}
	}
	return p.count(name, &llm.Request{Model: name, Messages: []llm.Message{{Role: llm.RoleUser, Content: blocks}}})
}

// An embeddings answer is stored in the response cache as an entry of one event whose text holds
// the vectors in base64: for each, its length (uvarint) and its float32s (little-endian). The
// text is base64, not the raw bytes, because a store shared by replicas keeps entries as JSON,
// where bytes that are not UTF-8 would be replaced (and the entry never read back).
func embedEntry(res *llm.Embeddings, rec *Record, canon *cache.Canon, now time.Time) *cache.Entry {
	var b []byte
	for _, v := range res.Vectors {
		b = binary.AppendUvarint(b, uint64(len(v)))
		for _, f := range v {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
		}
	}
	return &cache.Entry{Model: res.Model, Served: rec.Served, Engine: rec.Engine, Simulated: rec.Simulated,
		Events: []llm.Event{{Kind: llm.EventTextDelta, Text: base64.StdEncoding.EncodeToString(b)}},
		Usage:  llm.Usage{InputTokens: res.InputTokens}, Stored: now, Request: canon.Bytes}
}

// embeddingsOf reads the vectors of an entry embedEntry made; false when it is not one.
func embeddingsOf(e *cache.Entry) (*llm.Embeddings, bool) {
	if len(e.Events) != 1 || e.Events[0].Kind != llm.EventTextDelta {
		return nil, false
	}
	b, err := base64.StdEncoding.DecodeString(e.Events[0].Text)
	if err != nil {
		return nil, false
	}
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
