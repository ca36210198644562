// Package enginetok asks an engine for the token ids of a prompt as it renders and tokenizes
// it: vLLM's and SGLang's POST /tokenize with {"model", "messages", "tools",
// "add_generation_prompt": true}, answered with {"tokens", "count", "max_model_len"}. The
// prefix index of a replica whose engine tokenizes otherwise than the gateway (another model's
// vocabulary, another chat template) keys its blocks by these ids, so that its precise mode
// agrees with the blocks the engine reports storing (prefix_cache.tokenize: engine).
//
// A Tokenizer keeps the renderings it got in a memory-bounded LRU, keyed by a hash of the
// request sent and of the tenant scope it was asked for: a prompt seen before — the same
// request retried, placed and then recorded, asked of /v1/cache, or sent again by the same
// tenant — costs a hash and a map probe, a new one a round trip to the engine. A rendering is
// only reused within the tenant (API key) that asked for it unless the operator shares them.
package enginetok

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/openai"
)

// Options configure a Tokenizer.
type Options struct {
	// URL is the engine's tokenize endpoint ("http://10.0.0.5:8000/tokenize").
	URL string
	// Model is the model name sent; "" omits it.
	Model string
	// Header is added to every request (the engine's credentials).
	Header http.Header
	// Client sends the requests. Default: a client of its own.
	Client *http.Client
	// Timeout bounds one request. Default DefaultTimeout.
	Timeout time.Duration
	// CacheTokens bounds the renderings kept, in tokens (4 bytes each). Default
	// DefaultCacheTokens; negative keeps none.
	CacheTokens int
}

// Defaults of Options.
const (
	DefaultTimeout     = 2 * time.Second
	DefaultCacheTokens = 4 << 20 // 16 MiB of token ids
)

// maxBody bounds the engine's answer: 64 MiB holds the ids of millions of tokens.
const maxBody = 64 << 20

// Tokenizer renders prompts with an engine's tokenizer. It implements prefix.ScopedRenderer
// and is safe for concurrent use.
type Tokenizer struct {
	opt   Options
	cache *lru

	hits, misses, failures atomic.Uint64
	nanos                  atomic.Int64 // time spent in the engine's answers
}

// New returns a tokenizer asking opt.URL.
func New(opt Options) *Tokenizer {
	if opt.Client == nil {
		opt.Client = &http.Client{}
	}
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	if opt.CacheTokens == 0 {
		opt.CacheTokens = DefaultCacheTokens
	}
	return &Tokenizer{opt: opt, cache: newLRU(max(opt.CacheTokens, 0))}
}

// Stats are a tokenizer's counters.
type Stats struct {
	// Hits are renderings answered from the cache, Misses those asked of the engine, Failures
	// the requests that failed (the prompt then matches nothing on the replica).
	Hits, Misses, Failures uint64
	// EngineTime is the time spent waiting for the engine's answers.
	EngineTime time.Duration
	// CachedTokens is how many token ids the cache holds.
	CachedTokens int
}

// Stats returns t's counters.
func (t *Tokenizer) Stats() Stats {
	return Stats{Hits: t.hits.Load(), Misses: t.misses.Load(), Failures: t.failures.Load(),
		EngineTime: time.Duration(t.nanos.Load()), CachedTokens: t.cache.size()}
}

// Identity implements prefix.ScopedRenderer: the replicas of one model tokenize alike.
func (t *Tokenizer) Identity() string { return "engine:" + t.opt.Model }

// AppendRequest implements prefix.Renderer: RenderScoped in the shared scope, nothing
// appended on failure.
func (t *Tokenizer) AppendRequest(dst []uint32, req *llm.Request) []uint32 {
	out, err := t.RenderScoped(context.Background(), dst, req, "")
	if err != nil {
		return dst
	}
	return out
}

// RenderScoped implements prefix.ScopedRenderer: req's prompt as the engine tokenizes it,
// from the cache of scope's renderings or from the engine.
func (t *Tokenizer) RenderScoped(ctx context.Context, dst []uint32, req *llm.Request, scope string) ([]uint32, error) {
	body := Body(nil, req, t.opt.Model)
	key := cacheKey(scope, body)
	if toks, ok := t.cache.get(key, dst); ok {
		t.hits.Add(1)
		return toks, nil
	}
	t.misses.Add(1)
	start := time.Now()
	toks, err := t.ask(ctx, body)
	t.nanos.Add(int64(time.Since(start)))
	if err != nil {
		t.failures.Add(1)
		return dst, err
	}
	t.cache.put(key, toks)
	return append(dst, toks...), nil
}

// cacheKey hashes the scope and the request body: 128 bits, so that two prompts never share
// a rendering by a collision in practice.
func cacheKey(scope string, body []byte) xxh3.Uint128 {
	h := xxh3.New()
	_, _ = h.WriteString(scope)
	_, _ = h.Write([]byte{0})
	_, _ = h.Write(body)
	return h.Sum128()
}

// Body appends the tokenize request of req's prompt to dst: the Chat Completions rendering of
// its system prompt, messages and tools (the engine's chat template then applies to them as it
// does to the request itself), model when not "", and add_generation_prompt.
func Body(dst []byte, req *llm.Request, model string) []byte {
	r := llm.Request{Model: model, System: req.System, Messages: req.Messages, Tools: req.Tools, ToolChoice: req.ToolChoice}
	start := len(dst)
	dst = openai.AppendRequest(dst, &r)
	dst = append(dst[:len(dst)-1], `,"add_generation_prompt":true}`...)
	if model == "" {
		// {"model":"",… → {…: the engine then takes its own model.
		if rest, ok := bytes.CutPrefix(dst[start:], []byte(`{"model":"",`)); ok {
			n := copy(dst[start+1:], rest)
			dst = dst[:start+1+n]
		}
	}
	return dst
}

// Answer is the engine's /tokenize answer.
type Answer struct {
	Tokens      []uint32 `json:"tokens"`
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
}

// ask sends body to the engine and returns its token ids.
func (t *Tokenizer) ask(ctx context.Context, body []byte) ([]uint32, error) {
	ctx, cancel := context.WithTimeout(ctx, t.opt.Timeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, t.opt.URL, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("enginetok: %w", err)
	}
	hr.Header.Set("Content-Type", "application/json")
	for k, v := range t.opt.Header {
		hr.Header[k] = v
	}
	resp, err := t.opt.Client.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("enginetok: POST %s: %w", t.opt.URL, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("enginetok: reading the answer of %s: %w", t.opt.URL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("enginetok: POST %s: status %d: %.200s", t.opt.URL, resp.StatusCode, data)
	}
	if len(data) > maxBody {
		return nil, fmt.Errorf("enginetok: the answer of %s exceeds %d bytes", t.opt.URL, maxBody)
	}
	var a Answer
	if err := json.Unmarshal(data, &a); err != nil {
		return nil, fmt.Errorf("enginetok: decoding the answer of %s: %w", t.opt.URL, err)
	}
	if a.Count != 0 && a.Count != len(a.Tokens) {
		return nil, errors.New("enginetok: the answer's count is not its number of tokens")
	}
	return a.Tokens, nil
}
