package config

import (
	"strings"
	"testing"
	"time"
)

func TestPrefixCacheDefaults(t *testing.T) {
	cfg, err := Parse([]byte(`
engines:
  s: {kind: sim, sim: {kv_cache_tokens: 4096, block_tokens: 32}}
  d: {kind: sim}
  v: {kind: openai, url: "http://10.0.0.5:8000"}
  w: {kind: openai, url: "http://10.0.0.6:8000", prefix_cache: {block_tokens: 8, capacity_tokens: 1000000}}
  off: {kind: openai, url: "http://10.0.0.7:8000", prefix_cache: {capacity_tokens: -1}}
  a: {kind: anthropic, url: "https://api.anthropic.com"}
  l: {kind: layer0, url: "http://10.0.0.8:8080", prefix_cache: {capacity_tokens: 65536}}
models:
  m: {engines: [s, d, v, w, off, a, l]}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		pc      PrefixCache
		indexed bool
	}{
		"s":   {pcOf(32, 4096), true},
		"d":   {pcOf(16, 262144), true},
		"v":   {pcOf(16, DefaultPrefixCapacityTokens), true},
		"w":   {pcOf(8, 1000000), true},
		"off": {pcOf(16, -1), false},
		"a":   {pcOf(16, 0), false},
		"l":   {pcOf(16, 65536), true},
	}
	for name, w := range want {
		pc := cfg.Engines[name].PrefixCache
		if pc != w.pc || pc.Indexed() != w.indexed {
			t.Errorf("%s: %+v indexed=%v, want %+v indexed=%v", name, pc, pc.Indexed(), w.pc, w.indexed)
		}
	}
}

// pcOf is an approximate-mode PrefixCache.
func pcOf(block, capacity int) PrefixCache {
	return PrefixCache{BlockTokens: block, CapacityTokens: capacity, Mode: PrefixApproximate}
}

func TestPrefixCachePrecise(t *testing.T) {
	cfg, err := Parse([]byte(`
engines:
  s: {kind: sim, sim: {kv_events: "tcp://127.0.0.1:0"}, prefix_cache: {mode: precise}}
  v: {kind: openai, url: "http://10.0.0.5:8000", prefix_cache: {mode: precise, events: "tcp://10.0.0.5:5557", events_topic: kv}}
  u: {kind: openai, url: "http://10.0.0.4:8000", prefix_cache: {mode: precise, events: "tcp://10.0.0.4:5557", events_max_bytes: 65536}}
models:
  m: {engines: [s, v, u]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if pc := cfg.Engines["s"].PrefixCache; pc.Mode != PrefixPrecise || pc.Events != "tcp://127.0.0.1:0" {
		t.Errorf("s: %+v: want precise on the sim's own endpoint", pc)
	}
	if pc := cfg.Engines["v"].PrefixCache; pc.Mode != PrefixPrecise || pc.Events != "tcp://10.0.0.5:5557" || pc.EventsTopic != "kv" ||
		pc.EventsMaxBytes != DefaultEventsMaxBytes {
		t.Errorf("v: %+v", pc)
	}
	if pc := cfg.Engines["u"].PrefixCache; pc.EventsMaxBytes != 65536 {
		t.Errorf("u: events_max_bytes %d, want 65536", pc.EventsMaxBytes)
	}
	_, err = Parse([]byte(`
engines:
  s: {kind: sim, prefix_cache: {mode: precise}}
  v: {kind: openai, url: "http://10.0.0.5:8000", prefix_cache: {mode: precise}}
  w: {kind: openai, url: "http://10.0.0.6:8000", prefix_cache: {mode: precise, events: "http://10.0.0.6:5557"}}
  x: {kind: openai, url: "http://10.0.0.7:8000", prefix_cache: {mode: exact}}
  y: {kind: openai, url: "http://10.0.0.8:8000", prefix_cache: {mode: precise, capacity_tokens: -1, events: "tcp://10.0.0.8:5557"}}
  z: {kind: sim, sim: {kv_events: "10.0.0.9:5557"}}
  t: {kind: openai, url: "http://10.0.0.3:8000", prefix_cache: {mode: precise, events: "tcp://10.0.0.3:5557", events_max_bytes: 100}}
models:
  m: {engines: [s, v, w, x, y, z, t]}
`))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"engines.s.prefix_cache.events: required for precise mode: set sim.kv_events",
		"engines.v.prefix_cache.events: required for precise mode",
		`engines.w.prefix_cache.events: "http://10.0.0.6:5557" is not a ZeroMQ TCP endpoint`,
		`engines.x.prefix_cache.mode: unknown mode "exact"`,
		"engines.y.prefix_cache.mode: precise needs the index",
		`engines.z.sim.kv_events: "10.0.0.9:5557" is not a ZeroMQ TCP endpoint`,
		"engines.t.prefix_cache.events_max_bytes: must be at least 4096, got 100",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestPrefixCacheValidate(t *testing.T) {
	_, err := Parse([]byte(`
engines:
  s: {kind: sim, prefix_cache: {block_tokens: 32}}
  v: {kind: openai, url: "http://10.0.0.5:8000", prefix_cache: {block_tokens: -4, capacity_tokens: -2}}
models:
  m: {engines: [s, v]}
`))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		"engines.s.prefix_cache.block_tokens: must equal sim.block_tokens (16)",
		"engines.v.prefix_cache.block_tokens: must be positive",
		"engines.v.prefix_cache.capacity_tokens: must be positive, or -1",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestPrefixRoutingConfig(t *testing.T) {
	cfg, err := Parse([]byte("routing: {picker: prefix, prefix: {load_tokens: 256, imbalance: 3, slack: 2}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	defSpread := PrefixSpread{MaxReplicas: 3, HotShare: 0.5, Window: 32, PrefixTokens: 256, MaxPrefixes: 1024, Idle: time.Minute}
	if r := cfg.Routing; r.Picker != PickerPrefix || r.Prefix != (PrefixRouting{256, 3, 2, defSpread}) {
		t.Fatalf("%+v", r)
	}
	cfg, err = Parse([]byte("routing: {prefix: {spread: {max_replicas: 4, hot_share: 0.25, window: 64, prefix_tokens: 512, max_prefixes: 100, idle: 30s}}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Routing.Prefix.Spread; s != (PrefixSpread{4, 0.25, 64, 512, 100, 30 * time.Second}) {
		t.Fatalf("spread %+v", s)
	}
	_, err = Parse([]byte("routing: {prefix: {spread: {max_replicas: 9, hot_share: 1.5, window: -1, prefix_tokens: -1, max_prefixes: -2, idle: -1s}}}\n"))
	for _, want := range []string{"spread.max_replicas", "spread.hot_share", "spread.window", "spread.prefix_tokens", "spread.max_prefixes", "spread.idle"} {
		if err == nil || !strings.Contains(err.Error(), "routing.prefix."+want) {
			t.Errorf("error lacks %s: %v", want, err)
		}
	}
	_, err = Parse([]byte("routing: {picker: prefix, prefix: {load_tokens: -1, imbalance: 0.5, slack: -1}}\n"))
	for _, want := range []string{"routing.prefix.load_tokens", "routing.prefix.imbalance", "routing.prefix.slack"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %s: %v", want, err)
		}
	}
}

// TestPrefixBoundEndpoint: a * host is accepted (the engines connect to layer0), and the
// engine's tokenizer takes its defaults from the engine's URL and its first model.
func TestPrefixBoundEndpoint(t *testing.T) {
	c, err := Parse([]byte(`
engines:
  v: {kind: openai, url: "http://10.0.0.5:8000/v1", prefix_cache: {mode: precise, events: "tcp://*:5557", events_topic: "kv@10.0.0.5:8000@", tokenize: engine}}
models:
  b: {engines: [v], upstream_model: llama}
  a: {engines: [v], upstream_model: qwen}
`))
	if err != nil {
		t.Fatal(err)
	}
	pc := c.Engines["v"].PrefixCache
	if pc.TokenizeURL != "http://10.0.0.5:8000/tokenize" || pc.TokenizeModel != "qwen" || pc.TokenizeCacheTokens != DefaultTokenizeCacheTokens {
		t.Errorf("%+v", pc)
	}
	if _, err := Parse([]byte("engines:\n  a: {kind: anthropic, url: \"http://x\", prefix_cache: {tokenize: engine, capacity_tokens: 1024}}\nmodels:\n  m: {engines: [a]}\n")); err == nil {
		t.Error("tokenize: engine accepted for an anthropic engine")
	}
}
