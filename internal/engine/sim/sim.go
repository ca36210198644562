// Package sim is the embedded simulated engine: a model that runs nowhere but behaves like one
// served by vLLM, so that every layer above it can be exercised and measured on a laptop. The
// prompt is tokenized with the real cl100k_base tokenizer; at most MaxConcurrency sequences
// generate at once and up to MaxQueue wait in FIFO order (beyond that: 529 overloaded_error); a
// prefix KV cache of BlockTokens-token blocks keyed by chained hashes, with LRU eviction, makes
// repeated prefixes free to prefill and reports them as cache_read_input_tokens. The answer is
// deterministic readable pseudo-English seeded by the prompt ("lorem" mode) or the last user
// message ("echo" mode), or a tool_use block whose input follows the tool's JSON schema.
//
// Timing: TTFT plus PrefillPerToken per uncached prompt token before the first token, then
// InterTokenLatency between tokens. With zero delays (the "fast" preset, the default) nothing
// waits: no timer, no goroutine, and the whole response reaches the sink before one Flush.
// The "realistic" preset, for demos, fills unset delays with the figures of a mid-size model on
// one GPU: TTFT 150ms, PrefillPerToken 50µs (20,000 prompt tokens/s, so a 4,000-token uncached
// prompt adds 200ms) and InterTokenLatency 20ms (50 tokens/s).
//
// With KVEvents set, the engine publishes its prefix cache's changes as vLLM does (BlockStored,
// BlockRemoved, AllBlocksCleared over ZeroMQ; package kvevents), naming its blocks by its own
// hashes, for the prefix index's precise mode.
//
// Failures for the tests of the layers above come from config.SimFail: an error status before
// any event, an error inside the stream after N tokens, or a hang until the context ends,
// optionally for the first N requests only.
//
// The engine says it is a simulator through Simulated, which the server turns into a response
// header on every answer.
package sim

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/prefix"
	"github.com/layer0ai/layer0/internal/tokenizer"
)

// Natural answer lengths in lorem mode, in tokens: a deterministic function of the prompt in
// [minAnswer, minAnswer+spanAnswer), rounded up to the end of a sentence.
const (
	minAnswer  = 20
	spanAnswer = 101
)

// Engine is the simulated engine. It implements engine.Engine and engine.Counter; it is safe
// for concurrent use. Create it with New.
type Engine struct {
	cfg config.Sim
	tok *tokenizer.Codec
	// render renders a prompt into the token ids its KV cache holds (config.Sim.Tokenizer).
	render prefix.Renderer
	lex    *lexicon
	slots  admission
	cache  *prefix.Cache // the prefix KV cache, in blocks; nil when disabled
	// events publishes the cache's changes (config.Sim.KVEvents); nil when not published.
	events *events

	kvBlocks   int64        // KV capacity in blocks, shared by the running sequences
	heldBlocks atomic.Int64 // blocks held by running sequences
	received   atomic.Int64 // requests received, for Fail.FirstRequests
	queried    atomic.Int64 // prompt tokens looked up in the prefix cache
	hits       atomic.Int64 // prompt tokens found there

	runs sync.Pool // *run
}

// New returns a simulated engine configured by cfg, tokenizing with tok (nil means
// tokenizer.Default()). Zero fields get the documented defaults of config.Sim, so the zero
// config.Sim is a fast engine; the "realistic" preset fills the delays left at zero.
func New(cfg config.Sim, tok *tokenizer.Codec) (*Engine, error) {
	if tok == nil {
		tok = tokenizer.Default()
	}
	if err := normalize(&cfg); err != nil {
		return nil, err
	}
	lex, err := newLexicon(tok)
	if err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:      cfg,
		tok:      tok,
		render:   tok,
		lex:      lex,
		slots:    admission{limit: cfg.MaxConcurrency, maxWait: cfg.MaxQueue},
		cache:    prefix.NewCache(cfg.KVCacheTokens / cfg.BlockTokens),
		kvBlocks: int64(cfg.KVCacheTokens / cfg.BlockTokens),
	}
	e.runs.New = func() any { return new(run) }
	if cfg.Tokenizer == config.SimTokenizerBytes {
		e.render = bytesRenderer{}
	}
	if cfg.KVEvents != "" && e.cache != nil {
		if e.events, err = newEvents(cfg); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// normalize fills the defaults of config.Sim and checks it as config.Validate does, for
// callers that build a config.Sim by hand: the config package is the one place both live.
func normalize(c *config.Sim) error {
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

// Simulated reports that the engine is a simulator; the server says so in a response header.
func (e *Engine) Simulated() bool { return true }

// CountTokens implements engine.Counter: the prompt's tokens as the engine sees them, framing
// included (tokenizer.CountRequest).
func (e *Engine) CountTokens(req *llm.Request) (int, error) {
	if e.cfg.Tokenizer == config.SimTokenizerBytes {
		return len(appendBytesPrompt(nil, req, true)), nil
	}
	return e.tok.CountRequest(req), nil
}

// Stats is a snapshot of the engine's load, with the meaning of vLLM's gauges of the same name.
type Stats struct {
	// Running is the number of sequences generating (vllm:num_requests_running).
	Running int
	// Waiting is the number of requests queued for a slot (vllm:num_requests_waiting).
	Waiting int
	// KVCacheUsage is the fraction, 0 to 1, of the KV capacity held by the running sequences'
	// prompt and output tokens, in whole blocks (vllm:kv_cache_usage_perc). Cached prefixes of
	// finished requests are reusable space, not usage, as in vLLM.
	KVCacheUsage float64
	// CachedBlocks is the number of prompt blocks held in the prefix cache.
	CachedBlocks int
	// PrefixQueryTokens and PrefixHitTokens count the prompt tokens looked up in the prefix
	// cache and those found (vllm:prefix_cache_queries and vllm:prefix_cache_hits).
	PrefixQueryTokens, PrefixHitTokens int64
}

// Stats returns the engine's current load.
func (e *Engine) Stats() Stats {
	s := Stats{CachedBlocks: e.cache.Len(), PrefixQueryTokens: e.queried.Load(), PrefixHitTokens: e.hits.Load()}
	s.Running, s.Waiting = e.slots.stats()
	if e.kvBlocks > 0 {
		s.KVCacheUsage = min(1, float64(e.heldBlocks.Load())/float64(e.kvBlocks))
	}
	return s
}

// failing reports whether the injected failures apply to this request.
func (e *Engine) failing() bool {
	f := &e.cfg.Fail
	if f.Status == 0 && f.AfterTokens == 0 && !f.Hang {
		return false
	}
	n := e.received.Add(1)
	return f.FirstRequests == 0 || n <= int64(f.FirstRequests)
}

// Close implements engine.Engine. The simulator holds no connection (its waits belong to the
// requests); it closes its KV-event publisher, when it has one.
func (e *Engine) Close() error {
	if e.events == nil {
		return nil
	}
	e.events.mu.Lock()
	defer e.events.mu.Unlock()
	if e.events.replay != nil {
		_ = e.events.replay.Close()
	}
	return e.events.pub.Close()
}

// Generate implements engine.Engine.
func (e *Engine) Generate(ctx context.Context, req *llm.Request, sink llm.Sink) error {
	fail := e.failing()
	if fail && e.cfg.Fail.Status != 0 {
		st := e.cfg.Fail.Status
		err := &apierr.Error{Kind: apierr.KindForStatus(st), Message: e.cfg.Fail.Message,
			Cause: fmt.Errorf("sim: injected failure with status %d", st)}
		if st == 429 || st == 529 {
			err.RetryAfter = time.Second
		}
		return err
	}
	r := e.runs.Get().(*run)
	defer e.putRun(r)
	r.reset(e, ctx, sink)

	r.prompt = e.render.AppendRequest(r.prompt[:0], req)
	n := len(r.prompt)
	if n > e.cfg.ContextWindow {
		return &apierr.Error{Kind: apierr.InvalidRequest, Param: "messages", Code: "context_length_exceeded",
			Message: fmt.Sprintf("prompt is too long: %d tokens > %d maximum", n, e.cfg.ContextWindow)}
	}
	if err := e.slots.acquire(ctx); err != nil {
		return err
	}
	defer e.slots.release()
	if fail && e.cfg.Fail.Hang {
		<-ctx.Done()
		return ctx.Err()
	}

	cached := e.prefill(r)
	held := int64((n + e.cfg.BlockTokens - 1) / e.cfg.BlockTokens)
	e.heldBlocks.Add(held)
	defer func() { e.heldBlocks.Add(-r.held) }()
	r.held, r.total = held, n
	if fail {
		r.failAfter = e.cfg.Fail.AfterTokens
	}

	r.usage = llm.Usage{InputTokens: n - cached, CacheReadInputTokens: cached}
	limit := e.cfg.ContextWindow - n
	if req.MaxTokens > 0 && req.MaxTokens < limit {
		limit = req.MaxTokens
	}
	if err := r.plan(req, limit); err != nil {
		return err
	}
	return r.stream(req.Model, e.cfg.TTFT+time.Duration(n-cached)*e.cfg.PrefillPerToken)
}

// prefill looks the prompt up in the prefix cache, inserts its new blocks, and returns how many
// prompt tokens were found. At least one token is always computed, as in vLLM.
func (e *Engine) prefill(r *run) int {
	n := len(r.prompt)
	r.seed = prefix.HashTokens(0x9e3779b97f4a7c15, r.prompt)
	if e.cache == nil || n == 0 {
		return 0
	}
	r.hashes = prefix.AppendKeys(r.hashes[:0], r.prompt, e.cfg.BlockTokens)
	var cached int
	if e.events != nil {
		cached = e.events.prefill(e.cache, r.hashes, r.prompt, e.cfg.BlockTokens) * e.cfg.BlockTokens
	} else {
		cached = e.cache.MatchInsert(r.hashes) * e.cfg.BlockTokens
	}
	cached = min(cached, n-1)
	e.queried.Add(int64(n))
	e.hits.Add(int64(cached))
	return cached
}

func (e *Engine) putRun(r *run) {
	r.release()
	const maxKeep = 1 << 16 // do not pin the scratch of a huge request in the pool
	if cap(r.prompt) > maxKeep || cap(r.out) > maxKeep || cap(r.text) > 4*maxKeep {
		return
	}
	e.runs.Put(r)
}
