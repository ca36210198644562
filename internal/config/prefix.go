package config

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// DefaultPrefixCapacityTokens is the prefix cache capacity the index assumes of an OpenAI-kind
// engine that does not state its own: the embedded simulator's default. A vLLM replica's real
// capacity is its num_gpu_blocks times its block size (vllm:cache_config_info).
const DefaultPrefixCapacityTokens = 262144

// PrefixCache describes an engine's prefix KV cache to layer0's prefix index, which estimates
// what each replica holds from the prompts it served (HEAD /v1/cache, cache-aware routing).
type PrefixCache struct {
	// BlockTokens is the engine's KV cache block size in tokens: prompts are keyed in blocks of
	// this many tokens. Default: sim.block_tokens for kind sim (which it must equal), 16 (vLLM's
	// default) otherwise.
	BlockTokens int `yaml:"block_tokens"`
	// CapacityTokens is how many prompt tokens the engine's prefix cache holds: the index of the
	// replica forgets its least recently used blocks beyond it. Default: sim.kv_cache_tokens for
	// kind sim, 262144 for kind openai, none (not indexed) for kinds anthropic and layer0. -1
	// disables the index of the engine.
	CapacityTokens int `yaml:"capacity_tokens"`
	// Mode is how the index learns what the engine holds: "approximate" (from the prompts
	// layer0 sent it, the default) or "precise" (from the engine's KV-cache events, vLLM's
	// ZeroMQ publisher; see Events).
	Mode string `yaml:"mode"`
	// Events is the engine's KV-event endpoint in precise mode ("tcp://10.0.0.5:5557", where
	// vLLM's --kv-events-config endpoint publishes). Required for precise mode, except for kind
	// sim, whose own sim.kv_events is the default.
	Events string `yaml:"events"`
	// EventsTopic is the topic subscribed to. Default "" (every topic).
	EventsTopic string `yaml:"events_topic"`
	// Replay is the engine's replay endpoint ("tcp://10.0.0.5:5558", vLLM's replay_endpoint of
	// --kv-events-config), asked for the batches missed after a gap in the events' sequence
	// instead of emptying the index. Default "" (none).
	Replay string `yaml:"replay"`
	// EventsMaxBytes bounds one KV-event message from the engine (its frames together), in
	// bytes: a publisher that announces a larger frame has its connection closed before the
	// frame is read, and the subscription reconnects with backoff. Default
	// DefaultEventsMaxBytes (16 MiB) in precise mode; at least 4096.
	EventsMaxBytes int `yaml:"events_max_bytes"`
	// Tokenize is whose tokenizer keys the replica's blocks: "gateway" (the gateway's chat
	// templates and cl100k_base; the default, also when unset) or "engine" (the engine's own: vLLM's and SGLang's
	// POST /tokenize for kind openai, the simulator's tokenizer for kind sim). An engine that
	// tokenizes otherwise than the gateway agrees with precise mode only with "engine".
	Tokenize string `yaml:"tokenize"`
	// TokenizeURL is the engine's tokenize endpoint with tokenize: engine. Default: the URL's
	// root (without a trailing /v1) and /tokenize.
	TokenizeURL string `yaml:"tokenize_url"`
	// TokenizeModel is the model named in tokenize requests. Default: the upstream_model of
	// the first model (by name) served by the engine.
	TokenizeModel string `yaml:"tokenize_model"`
	// TokenizeCacheTokens bounds the engine's renderings kept (by tenant and prompt), in
	// tokens of 4 bytes. Default DefaultTokenizeCacheTokens; -1 keeps none.
	TokenizeCacheTokens int `yaml:"tokenize_cache_tokens"`
}

// Tokenizers of the prefix index (PrefixCache.Tokenize).
const (
	TokenizeGateway = "gateway"
	TokenizeEngine  = "engine"
)

// DefaultTokenizeCacheTokens is the default bound of an engine tokenizer's renderings: 4 M
// tokens, 16 MiB.
const DefaultTokenizeCacheTokens = 4 << 20

// DefaultEventsMaxBytes is the default bound on a KV-event message: 16 MiB. A vLLM batch holds
// the events of one scheduler step, about 5 bytes per token stored and up to 35 per block hash
// (a sha256 digest): 16 MiB holds a step that stores over two million tokens.
const DefaultEventsMaxBytes = 16 << 20

// minEventsMaxBytes is the smallest events_max_bytes accepted (kvevents.MinMaxBytes).
const minEventsMaxBytes = 4096

// Prefix index modes.
const (
	PrefixApproximate = "approximate"
	PrefixPrecise     = "precise"
)

// CheckZMQEndpoint checks a ZeroMQ TCP endpoint: tcp://host:port.
func CheckZMQEndpoint(ep string) error {
	rest, ok := strings.CutPrefix(ep, "tcp://")
	if !ok {
		return fmt.Errorf("%q is not a ZeroMQ TCP endpoint (want tcp://host:port)", ep)
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil || host == "" {
		return fmt.Errorf("%q is not a ZeroMQ TCP endpoint (want tcp://host:port)", ep)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: bad port %q", ep, port)
	}
	return nil
}

// Indexed reports whether the engine's prompts are kept in the prefix index.
func (p PrefixCache) Indexed() bool { return p.CapacityTokens >= p.BlockTokens && p.BlockTokens > 0 }

func (e *Engine) setPrefixDefaults() {
	pc := &e.PrefixCache
	switch e.Kind {
	case KindSim:
		setDefault(&pc.BlockTokens, e.Sim.BlockTokens)
		setDefault(&pc.CapacityTokens, e.Sim.KVCacheTokens)
	case KindOpenAI:
		setDefault(&pc.CapacityTokens, DefaultPrefixCapacityTokens)
	}
	setDefault(&pc.BlockTokens, 16)
	setDefault(&pc.Mode, PrefixApproximate)
	if pc.Tokenize == TokenizeEngine {
		if pc.TokenizeURL == "" && e.Kind == KindOpenAI {
			root := strings.TrimSuffix(strings.TrimRight(e.URL, "/"), "/v1")
			pc.TokenizeURL = root + "/tokenize"
		}
		setDefault(&pc.TokenizeCacheTokens, DefaultTokenizeCacheTokens)
	}
	if pc.Mode == PrefixPrecise && pc.EventsMaxBytes == 0 {
		pc.EventsMaxBytes = DefaultEventsMaxBytes
	}
	if pc.Mode == PrefixPrecise && pc.Events == "" && e.Kind == KindSim {
		pc.Events = e.Sim.KVEvents
	}
}

func (e *Engine) validatePrefix(p string, errs *Errors) {
	pc := &e.PrefixCache
	if pc.BlockTokens < 1 {
		errs.add(p+".block_tokens", "must be positive")
	}
	if pc.CapacityTokens < -1 {
		errs.add(p+".capacity_tokens", "must be positive, or -1 to disable the index")
	}
	if pc.EventsMaxBytes != 0 && pc.EventsMaxBytes < minEventsMaxBytes {
		errs.add(p+".events_max_bytes", "must be at least %d, got %d", minEventsMaxBytes, pc.EventsMaxBytes)
	}
	if pc.Replay != "" {
		if err := CheckZMQEndpoint(pc.Replay); err != nil {
			errs.add(p+".replay", "%v", err)
		}
	}
	switch pc.Tokenize {
	case "", TokenizeGateway:
	case TokenizeEngine:
		if e.Kind != KindOpenAI && e.Kind != KindSim {
			errs.add(p+".tokenize", "engine needs kind openai (POST /tokenize) or sim, not %s", e.Kind)
		}
		if pc.TokenizeCacheTokens < -1 {
			errs.add(p+".tokenize_cache_tokens", "must be positive, or -1 to keep none")
		}
	default:
		errs.add(p+".tokenize", "unknown tokenizer %q (want gateway or engine)", pc.Tokenize)
	}
	switch pc.Mode {
	case PrefixApproximate:
	case PrefixPrecise:
		switch {
		case !pc.Indexed():
			errs.add(p+".mode", "precise needs the index (capacity_tokens of at least one block)")
		case pc.Events == "" && e.Kind == KindSim:
			errs.add(p+".events", "required for precise mode: set sim.kv_events (the simulator publishes there) or this")
		case pc.Events == "":
			errs.add(p+".events", "required for precise mode: the engine's KV-event endpoint (tcp://host:port)")
		default:
			if err := CheckZMQEndpoint(pc.Events); err != nil {
				errs.add(p+".events", "%v", err)
			} else if strings.HasSuffix(pc.Events, ":0") && (e.Kind != KindSim || pc.Events != e.Sim.KVEvents) {
				errs.add(p+".events", "%q: port 0 cannot be connected to", pc.Events)
			}
		}
	default:
		errs.add(p+".mode", "unknown mode %q (want approximate or precise)", pc.Mode)
	}
	if e.Kind == KindSim && pc.BlockTokens != e.Sim.BlockTokens {
		errs.add(p+".block_tokens", "must equal sim.block_tokens (%d): the index keys blocks as the engine does, got %d",
			e.Sim.BlockTokens, pc.BlockTokens)
	}
}

// setTokenizeModels names, for each engine tokenizing with its own tokenizer and no
// tokenize_model, the upstream model of the first model (by name) that it serves.
func (c *Config) setTokenizeModels() {
	for _, id := range sortedKeys(c.Models) {
		m := c.Models[id]
		for _, name := range m.Engines {
			e, ok := c.Engines[name]
			if !ok || e.PrefixCache.Tokenize != TokenizeEngine || e.PrefixCache.TokenizeModel != "" {
				continue
			}
			e.PrefixCache.TokenizeModel = m.UpstreamModel
			c.Engines[name] = e
		}
	}
}

// PrefixRouting tunes the prefix picker (routing.picker: prefix), which scores each replica by
// the prefill it must still compute for the prompt (the prompt less what the prefix index
// expects it holds) plus the work queued ahead (load_tokens per request in flight).
type PrefixRouting struct {
	// LoadTokens is the prefill work one request in flight is worth, in prompt tokens: the
	// higher, the more load outweighs a cached prefix. Default 128.
	LoadTokens float64 `yaml:"load_tokens"`
	// Imbalance and Slack make the hot-prefix guard: when the replica with the prompt cached
	// has more than imbalance × the least loaded replica's requests in flight, plus slack, the
	// request goes to another replica, which then warms. Defaults DefaultRoutingImbalance (2)
	// and DefaultRoutingSlack (4).
	Imbalance float64 `yaml:"imbalance"`
	Slack     int     `yaml:"slack"`
	// Spread spreads a hot prefix — one whose replica stays over the guard — over a set of
	// replicas that share its requests by load.
	Spread PrefixSpread `yaml:"spread"`
}

// PrefixSpread tunes the prefix picker's hot prefixes (routing.prefix.spread). A prefix (a
// prompt's leading prefix_tokens, per API key unless the model shares its cached state across
// keys) is hot when its replica was over the guard for hot_share of its recent requests (about
// the last window): the least loaded other replica joins its set, then another while it stays
// hot, up to max_replicas, and its requests go to the least loaded member. The set loses its
// newest member when, for hot_share of the requests, one member fewer would do.
type PrefixSpread struct {
	// MaxReplicas bounds a hot prefix's set; 1 turns spreading off. Default 3, at most 8.
	MaxReplicas int `yaml:"max_replicas"`
	// HotShare is the share of recent requests over the guard that makes a prefix hot (and of
	// those one member fewer would carry that cools it), above 0 and at most 1. Default 0.5.
	HotShare float64 `yaml:"hot_share"`
	// Window is about how many of a prefix's recent requests the shares weigh. Default 32.
	Window int `yaml:"window"`
	// PrefixTokens is how many leading prompt tokens name a prefix. Default 256.
	PrefixTokens int `yaml:"prefix_tokens"`
	// MaxPrefixes bounds the prefixes tracked at once; the least recently seen make room.
	// Default 1024.
	MaxPrefixes int `yaml:"max_prefixes"`
	// Idle is how long a prefix may go without requests before its set is forgotten. Default
	// 1m.
	Idle time.Duration `yaml:"idle"`
}

// The defaults of routing.prefix.spread, and the bounds of max_replicas and max_prefixes.
const (
	DefaultSpreadMaxReplicas  = 3
	DefaultSpreadHotShare     = 0.5
	DefaultSpreadWindow       = 32
	DefaultSpreadPrefixTokens = 256
	DefaultSpreadMaxPrefixes  = 1024
	DefaultSpreadIdle         = time.Minute
	MaxSpreadReplicas         = 8
	MaxSpreadPrefixes         = 1 << 20
)

func (s *PrefixSpread) setDefaults() {
	setDefault(&s.MaxReplicas, DefaultSpreadMaxReplicas)
	setDefault(&s.HotShare, DefaultSpreadHotShare)
	setDefault(&s.Window, DefaultSpreadWindow)
	setDefault(&s.PrefixTokens, DefaultSpreadPrefixTokens)
	setDefault(&s.MaxPrefixes, DefaultSpreadMaxPrefixes)
	setDefault(&s.Idle, DefaultSpreadIdle)
}

func (s *PrefixSpread) validate(errs *Errors) {
	const p = "routing.prefix.spread"
	if s.MaxReplicas < 1 || s.MaxReplicas > MaxSpreadReplicas {
		errs.add(p+".max_replicas", "must be 1 to %d, got %d", MaxSpreadReplicas, s.MaxReplicas)
	}
	if !(s.HotShare > 0 && s.HotShare <= 1) {
		errs.add(p+".hot_share", "must be above 0 and at most 1, got %g", s.HotShare)
	}
	if s.Window < 1 {
		errs.add(p+".window", "must be positive, got %d", s.Window)
	}
	if s.PrefixTokens < 1 {
		errs.add(p+".prefix_tokens", "must be positive, got %d", s.PrefixTokens)
	}
	if s.MaxPrefixes < 1 || s.MaxPrefixes > MaxSpreadPrefixes {
		errs.add(p+".max_prefixes", "must be 1 to %d, got %d", MaxSpreadPrefixes, s.MaxPrefixes)
	}
	if s.Idle <= 0 {
		errs.add(p+".idle", "must be positive, got %v", s.Idle)
	}
}

// The overload guard's defaults, shared by the prefix and sticky pickers.
const (
	DefaultRoutingImbalance = 2
	DefaultRoutingSlack     = 4
)

func (r *PrefixRouting) setDefaults() {
	setDefault(&r.Imbalance, DefaultRoutingImbalance)
	setDefault(&r.Slack, DefaultRoutingSlack)
	r.Spread.setDefaults()
}

func (r *PrefixRouting) validate(errs *Errors) {
	notNegative(errs, "routing.prefix.load_tokens", r.LoadTokens)
	validateGuard("routing.prefix", r.Imbalance, r.Slack, errs)
	r.Spread.validate(errs)
}

func validateGuard(p string, imbalance float64, slack int, errs *Errors) {
	if imbalance < 0 || imbalance > 0 && imbalance < 1 {
		errs.add(p+".imbalance", "must be at least 1, got %g", imbalance)
	}
	notNegative(errs, p+".slack", slack)
}

// Sticky fallbacks: what keys a request without the session header.
const (
	StickyFallbackKey  = "key"
	StickyFallbackLoad = "load"
)

// DefaultStickyHeader is the header the sticky picker reads the session from.
const DefaultStickyHeader = "x-session-id"

// StickyRouting tunes the sticky picker (routing.picker: sticky), which sends every request of
// one session to one replica by a rendezvous hash of the session over the healthy replicas.
type StickyRouting struct {
	// Header names the session. Default "x-session-id".
	Header string `yaml:"header"`
	// Fallback keys a request without the header: "key" (the API key's name is the session)
	// or "load" (no affinity: the less loaded of two replicas). Default "key".
	Fallback string `yaml:"fallback"`
	// Imbalance and Slack make the overload guard, as the prefix picker's: a session's replica
	// with more than imbalance × the least loaded replica's requests in flight, plus slack, is
	// passed over for the next in the session's hash order. Defaults DefaultRoutingImbalance
	// (2) and DefaultRoutingSlack (4).
	Imbalance float64 `yaml:"imbalance"`
	Slack     int     `yaml:"slack"`
}

func (r *StickyRouting) setDefaults() {
	setDefault(&r.Header, DefaultStickyHeader)
	setDefault(&r.Fallback, StickyFallbackKey)
	setDefault(&r.Imbalance, DefaultRoutingImbalance)
	setDefault(&r.Slack, DefaultRoutingSlack)
}

func (r *StickyRouting) validate(errs *Errors) {
	if !httpguts.ValidHeaderFieldName(r.Header) {
		errs.add("routing.sticky.header", "%q is not a valid header name", r.Header)
	}
	switch r.Fallback {
	case StickyFallbackKey, StickyFallbackLoad:
	default:
		errs.add("routing.sticky.fallback", "unknown fallback %q (want key or load)", r.Fallback)
	}
	validateGuard("routing.sticky", r.Imbalance, r.Slack, errs)
}
