package config

import (
	"time"
)

// Sim configures the embedded simulated engine. Its zero delays make it as fast as possible
// (the default, for tests and benchmarks); Preset "realistic" sets demo timings.
type Sim struct {
	// Preset fills unset timings: "fast" (all zero, the default) or "realistic"
	// (ttft 150ms, prefill_per_token 50µs, inter_token_latency 20ms).
	Preset string `yaml:"preset"`
	// TTFT is the fixed delay before the first token. Default 0.
	TTFT time.Duration `yaml:"ttft"`
	// PrefillPerToken is added to TTFT for each prompt token not found in the KV cache. Default 0.
	PrefillPerToken time.Duration `yaml:"prefill_per_token"`
	// InterTokenLatency is the delay between output tokens. Default 0.
	InterTokenLatency time.Duration `yaml:"inter_token_latency"`
	// MaxConcurrency is how many sequences generate at once. Default 256.
	MaxConcurrency int `yaml:"max_concurrency"`
	// MaxQueue is how many requests may wait for a slot; beyond it, 529 overloaded_error.
	// Default 1024.
	MaxQueue int `yaml:"max_queue"`
	// KVCacheTokens is the prefix KV cache's capacity in tokens. Default 262144.
	KVCacheTokens int `yaml:"kv_cache_tokens"`
	// BlockTokens is the KV cache block size in tokens. Default 16.
	BlockTokens int `yaml:"block_tokens"`
	// Mode is "lorem" (deterministic readable pseudo-text seeded by the prompt, the default) or
	// "echo" (repeats the last user message).
	Mode string `yaml:"mode"`
	// ContextWindow is the model's context size in tokens. Default 200000.
	ContextWindow int `yaml:"context_window"`
	// KVEvents, when set, is the ZeroMQ endpoint ("tcp://127.0.0.1:5557"; port 0 picks a free
	// one) on which the simulator publishes its KV-cache events as vLLM does (BlockStored,
	// BlockRemoved, AllBlocksCleared), for the prefix index's precise mode. Default "" (none).
	KVEvents string `yaml:"kv_events"`
	// KVEventsConnect makes the simulator connect to KVEvents instead of binding it, as vLLM's
	// publisher does to llm-d's router (which binds). Default false.
	KVEventsConnect bool `yaml:"kv_events_connect"`
	// KVEventsTopic is the topic the events are published under. Default "".
	KVEventsTopic string `yaml:"kv_events_topic"`
	// KVReplay, when set, is the endpoint of a replay server of the last 1,024 batches, as vLLM's
	// replay_endpoint ("tcp://127.0.0.1:5558"; port 0 picks a free one). Default "" (none).
	KVReplay string `yaml:"kv_replay"`
	// Tokenizer is how the simulator renders and tokenizes a prompt: "cl100k" (the gateway's
	// own chat framing and cl100k_base; the default, also when unset) or "bytes" (another template, one token a
	// byte: an engine whose token ids are not the gateway's, as a vLLM serving another model's
	// vocabulary is; the gateway's prefix index then agrees with it only by asking it for the
	// tokens, prefix_cache.tokenize: engine).
	Tokenizer string `yaml:"tokenizer"`
	// Fail injects failures, for tests.
	Fail SimFail `yaml:"fail"`
}

// SimFail injects failures into the simulator. The zero value injects none.
type SimFail struct {
	// Status, when non-zero, answers every request with this HTTP status (429, 500, 529, …)
	// before any token.
	Status int `yaml:"status"`
	// Message is the error message for Status or AfterTokens. Default "simulated failure".
	Message string `yaml:"message"`
	// AfterTokens, when positive, fails inside the stream after this many output tokens.
	AfterTokens int `yaml:"after_tokens"`
	// Hang, when true, never produces a token (until the client gives up).
	Hang bool `yaml:"hang"`
	// FirstRequests, when positive, limits Status, AfterTokens and Hang to the first this many
	// requests the engine receives; later ones succeed. Default 0: every request fails.
	FirstRequests int `yaml:"first_requests"`
}

// SetDefaults fills the simulator's unset fields with their defaults (each field's comment
// names it); the "realistic" preset fills the delays left at zero.
func (s *Sim) SetDefaults() {
	if s.Preset == "realistic" {
		setDefault(&s.TTFT, 150*time.Millisecond)
		setDefault(&s.PrefillPerToken, 50*time.Microsecond)
		setDefault(&s.InterTokenLatency, 20*time.Millisecond)
	}
	setDefault(&s.MaxConcurrency, 256)
	setDefault(&s.MaxQueue, 1024)
	setDefault(&s.KVCacheTokens, 262144)
	setDefault(&s.BlockTokens, 16)
	setDefault(&s.Mode, "lorem")

	setDefault(&s.ContextWindow, 200000)
	setDefault(&s.Fail.Message, "simulated failure")
}

// Validate checks a simulator's configuration with its defaults filled in (SetDefaults), for
// an engine built outside a Config, and returns an *Errors naming each field under "sim", or
// nil.
func (s *Sim) Validate() error {
	errs := &Errors{}
	s.validate("sim", errs)
	if len(errs.List) == 0 {
		return nil
	}
	return errs
}

func (s *Sim) validate(p string, errs *Errors) {
	switch s.Preset {
	case "", "fast", "realistic":
	default:
		errs.add(p+".preset", "unknown preset %q (want fast or realistic)", s.Preset)
	}
	switch s.Tokenizer {
	case "", SimTokenizerCL100K, SimTokenizerBytes:
	default:
		errs.add(p+".tokenizer", "unknown tokenizer %q (want cl100k or bytes)", s.Tokenizer)
	}
	switch s.Mode {
	case "lorem", "echo":
	default:
		errs.add(p+".mode", "unknown mode %q (want lorem or echo)", s.Mode)
	}
	notNegative(errs, p+".ttft", s.TTFT)
	notNegative(errs, p+".prefill_per_token", s.PrefillPerToken)
	notNegative(errs, p+".inter_token_latency", s.InterTokenLatency)
	if s.MaxConcurrency < 0 {
		errs.add(p+".max_concurrency", "must be positive")
	}
	notNegative(errs, p+".max_queue", s.MaxQueue)
	notNegative(errs, p+".kv_cache_tokens", s.KVCacheTokens)
	if s.BlockTokens < 1 {
		errs.add(p+".block_tokens", "must be positive")
	}
	notNegative(errs, p+".context_window", s.ContextWindow)
	if s.KVReplay != "" {
		if err := CheckZMQEndpoint(s.KVReplay); err != nil {
			errs.add(p+".kv_replay", "%v", err)
		}
	}
	if s.KVEvents != "" {
		if err := CheckZMQEndpoint(s.KVEvents); err != nil {
			errs.add(p+".kv_events", "%v", err)
		}
	}
	notNegative(errs, p+".fail.after_tokens", s.Fail.AfterTokens)
	notNegative(errs, p+".fail.first_requests", s.Fail.FirstRequests)
	if f := s.Fail.Status; f != 0 && (f < 400 || f > 599) {
		errs.add(p+".fail.status", "must be an HTTP error status (400-599), got %d", f)
	}
}

// The simulator's tokenizers (Sim.Tokenizer).
const (
	SimTokenizerCL100K = "cl100k"
	SimTokenizerBytes  = "bytes"
)
