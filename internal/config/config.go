// Package config is layer0's one configuration file: a typed struct decoded strictly from YAML
// (unknown keys are errors), filled with documented defaults, and validated with every problem
// reported at once with its path. A Config is never mutated after Load; reload builds a new one.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the whole configuration. The zero value is not usable; use Default or Load.
type Config struct {
	// Server configures the listener and request limits.
	Server Server `yaml:"server"`
	// Engines are the named backends (each one replica). Default: one sim engine named "sim".
	Engines map[string]Engine `yaml:"engines"`
	// Models are the model ids clients may ask for, each served by a pool of engines.
	// Default: model "sim" on engine "sim".
	Models map[string]Model `yaml:"models"`
	// Log configures the process log and the access log.
	Log Log `yaml:"log"`
	// Debug configures the decision traces kept for operators (docs/operations.md).
	Debug Debug `yaml:"debug"`
	// Keys are the API keys clients present, declared by their SHA-256 hashes. Default none:
	// layer0 then serves without auth, and only on a loopback address.
	Keys []Key `yaml:"keys"`
	// Auth holds the settings of authentication beyond the keys themselves.
	Auth Auth `yaml:"auth"`
	// Limits are the global rate limits and the request size limits.
	Limits Limits `yaml:"limits"`
	// Aliases map another name to a model or a split ("claude-latest": "claude-3-5-sonnet").
	// Default none.
	Aliases map[string]string `yaml:"aliases"`
	// Splits route one name to several models by weight (A/B tests, version rollouts). Default
	// none.
	Splits map[string]Split `yaml:"splits"`
	// Routing configures replica picking, health, fallbacks and retries.
	Routing Routing `yaml:"routing"`
	// OffloadTargets are the names a client may give in the offload directive or the
	// X-Offload-Target header to send its request elsewhere (docs/directives.md). Default none.
	OffloadTargets map[string]OffloadTarget `yaml:"offload_targets"`
	// Store says where the rate-limit counters live: this process (default) or a Redis shared
	// by every replica.
	Store Store `yaml:"store"`
	// CORS says which pages of other origins may call the APIs from a browser. Default none.
	CORS CORS `yaml:"cors"`
	// Playground serves the web playground at GET /playground (and redirects GET / there): a
	// page comparing the transports side by side. Default false in a file, true in the
	// embedded default (Default).
	Playground bool `yaml:"playground"`
	// Telemetry exports OpenTelemetry traces of the requests (docs/operations.md); off by
	// default.
	Telemetry Telemetry `yaml:"telemetry"`
	// Responses configures the Responses API's stored responses (docs/responses.md).
	Responses Responses `yaml:"responses"`
	// Admission queues requests in front of saturated pools, by priority and weight
	// (docs/admission.md); off by default.
	Admission Admission `yaml:"admission"`
	// Prices say what each model's tokens (or engine time) cost (docs/spend.md). Default none:
	// requests cost nothing.
	Prices map[string]ModelPrice `yaml:"prices"`
	// Teams group keys (keys[].team) under budgets of their own. Default none.
	Teams map[string]Team `yaml:"teams"`
	// Spend configures costs and the global budgets (docs/spend.md).
	Spend Spend `yaml:"spend"`
}

// Engine kinds.
const (
	KindSim       = "sim"
	KindOpenAI    = "openai"
	KindAnthropic = "anthropic"
	KindLayer0    = "layer0"
)

// Engine is one backend replica.
type Engine struct {
	// Kind is sim, openai, anthropic or layer0. Required.
	Kind string `yaml:"kind"`
	// URL is the engine's base URL (for example http://10.0.0.5:8000). Required except for sim.
	URL string `yaml:"url"`
	// APIKeyEnv names the environment variable holding the engine's credential. Optional; the
	// value is read at start and never printed or logged.
	APIKeyEnv string `yaml:"api_key_env"`
	// MaxConcurrency caps requests in flight to this engine; 0 means no cap. Default 0.
	MaxConcurrency int `yaml:"max_concurrency"`
	// Timeouts bound the calls to the engine.
	Timeouts Timeouts `yaml:"timeouts"`
	// Sim configures the embedded simulator (kind sim only).
	Sim Sim `yaml:"sim"`
	// HealthPath, when set, is the path under URL that active health checks GET every
	// routing.health.interval; a 2xx answer is healthy. Default "" (no active checks).
	HealthPath string `yaml:"health_path"`
	// MetricsPath, when set, is the path under URL of the engine's Prometheus metrics, scraped
	// every routing.utilization_interval for vllm:kv_cache_usage_perc and
	// vllm:num_requests_waiting to set the replica's utilisation. Default "" (not scraped; sim
	// engines report their load directly).
	MetricsPath string `yaml:"metrics_path"`
	// PrefixCache describes the engine's prefix KV cache to the prefix index.
	PrefixCache PrefixCache `yaml:"prefix_cache"`
	// Responses says the engine serves the OpenAI Responses API itself (POST /v1/responses;
	// kind openai only): a Responses request that keeps no state (store false, no
	// previous_response_id) passes through to it unchanged but for the model name, instead of
	// being translated to Chat Completions. Default false.
	Responses bool `yaml:"responses"`
	// Options are the settings of an application's own engine kind (registered with
	// layer0.WithEngine), kept as decoded and handed to its factory, which checks them. The
	// built-in kinds take none. Default none.
	Options map[string]any `yaml:"options,omitempty"`
}

// Timeouts bound an engine call. Zero means no bound.
type Timeouts struct {
	// Connect bounds dialing. Default 5s.
	Connect time.Duration `yaml:"connect"`
	// FirstByte bounds the wait for the first response byte. Default 60s.
	FirstByte time.Duration `yaml:"first_byte"`
	// Idle bounds the gap between two streamed tokens. Default 60s.
	Idle time.Duration `yaml:"idle"`
	// Total bounds the whole call. Default 10m.
	Total time.Duration `yaml:"total"`
}

// Model is a model id clients may ask for.
type Model struct {
	// Engines is the pool of engine names that serve the model. Required.
	Engines []string `yaml:"engines"`
	// UpstreamModel is the model name sent to the engine. Default: the model id.
	UpstreamModel string `yaml:"upstream_model"`
	// DisplayName is shown in the models list. Default: the model id.
	DisplayName string `yaml:"display_name"`
	// ContextWindow is the input limit in tokens; longer inputs get 400. Default 200000.
	ContextWindow int `yaml:"context_window"`
	// Created is the model's creation time shown in the models list. Default 2025-01-01T00:00:00Z.
	Created time.Time `yaml:"created"`
	// Fallback lists the models tried, in order, when this one cannot serve a request (429, 529,
	// 5xx, timeout, out of memory, context overflow, or an error inside the stream before any
	// content). A fallback's own fallbacks follow it. Default none.
	Fallback []string `yaml:"fallback"`
	// Cache is the model's response cache (docs/caching.md). Default: off.
	Cache Cache `yaml:"cache"`
	// Context says what happens to an input larger than every context window of the model's
	// fallback chain: refused (the default) or cut to fit (docs/directives.md).
	Context Context `yaml:"context"`
	// Required makes /readyz answer 503 while no replica of the model can take a request.
	// Default true; false for a model whose outage should not take the gateway out of a load
	// balancer.
	Required *bool `yaml:"required"`
	// Routing is the model's own routing: its picker, in place of routing.picker.
	Routing ModelRouting `yaml:"routing"`
}

// ModelRouting is what a model sets of the routing on its own.
type ModelRouting struct {
	// Picker places the model's requests among its replicas, as routing.picker does for every
	// model (p2c, round_robin, prefix or sticky; the latter two tuned by routing.prefix and
	// routing.sticky). Default: routing.picker's choice.
	Picker string `yaml:"picker"`
}

// Cache is a model's response cache policy.
type Cache struct {
	// Enabled turns the cache on for the model (and its aliases). Default false.
	Enabled bool `yaml:"enabled"`
	// TTL is how long a stored answer is served. Default 5m.
	TTL time.Duration `yaml:"ttl"`
	// MaxBytes is the memory the model's stored answers may take; the least recently used are
	// evicted beyond it. Default 67108864 (64 MiB).
	MaxBytes int64 `yaml:"max_bytes"`
	// CacheSampled caches answers to requests that do not ask for temperature 0 too (sampled
	// answers: a cache hit then repeats one sample). Default false.
	CacheSampled bool `yaml:"cache_sampled"`
	// ShareAcrossKeys shares the model's cached state between API keys: a key is served the
	// answers any key stored (and shares an identical request in flight with any key), and
	// /v1/cache tells a key how much of a prompt any key's requests left in the engines' prefix
	// caches. Default false: each key sees only what its own requests made.
	ShareAcrossKeys bool `yaml:"share_across_keys"`
}

// minCacheBytes is the smallest cache budget: less could not hold a short answer.
const minCacheBytes = 4096

// Defaults of a model's cache.
const (
	DefaultCacheTTL      = 5 * time.Minute
	DefaultCacheMaxBytes = 64 << 20
)

// Auth holds the settings of authentication beyond the keys themselves.
type Auth struct {
	// AllowNone lets a reload remove every key while keys are in force, which turns auth off
	// (and layer0 then serves only on a loopback address). Default false: such a reload is
	// refused, as a file emptied or cut short while being written would otherwise do it.
	AllowNone bool `yaml:"allow_none"`
}

// Default returns the embedded default configuration: the sim engine as model "sim".
func Default() *Config {
	c := &Config{Playground: true, Debug: Debug{Requests: DefaultDebugRequests}}
	c.SetDefaults()
	return c
}

// Served is what `layer0 serve` runs without a file: Default, with the sim paced like a GPU
// serving a model (Sim's "realistic" preset), so that the playground's times and rates mean
// something from the first run. Default's sim, which tests, benchmarks and an application's
// New(nil) get, and a file's sims are as fast as possible unless they ask to be paced.
func Served() *Config {
	c := Default()
	sim := c.Engines["sim"]
	sim.Sim = Sim{Preset: "realistic"}
	sim.Sim.SetDefaults()
	c.Engines["sim"] = sim
	return c
}

// Known are the names a configuration may use beyond the built-in ones: an application's own
// engine kinds and replica pickers (registered with the root package's WithEngine and
// WithPicker). The zero value knows the built-in ones only.
type Known struct {
	// EngineKinds are the engine kinds accepted beside sim, openai, anthropic and layer0.
	EngineKinds []string
	// Pickers are the replica pickers accepted beside p2c, round_robin, prefix and sticky, by
	// routing.picker and a model's routing.picker.
	Pickers []string
}

// Load reads, decodes, defaults and validates the file at path (see LoadBytes), knowing the
// built-in names only; Known.Load knows an application's too.
func Load(path string) (*Config, error) { return Known{}.Load(path) }

// LoadBytes is Known.LoadBytes knowing the built-in names only.
func LoadBytes(path string, b []byte) (*Config, error) { return Known{}.LoadBytes(path, b) }

// Parse is Known.Parse knowing the built-in names only.
func Parse(b []byte) (*Config, error) { return Known{}.Parse(b) }

// Load reads, decodes, defaults and validates the file at path (see LoadBytes), accepting the
// names of k beside the built-in ones.
func (k Known) Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return k.LoadBytes(path, b)
}

// LoadBytes decodes, defaults and validates b, the content of the file at path. Unlike Parse it
// refuses a document without a setting (empty, blank or only comments): a file is meant to
// configure something, and an empty one is most likely being written, not the wish to run the
// embedded default (which starting without a file gives).
func (k Known) LoadBytes(path string, b []byte) (*Config, error) {
	if empty(b) {
		return nil, fmt.Errorf("config: %s: %w", path, &Errors{List: []string{
			"the file is empty (no settings); start without a config file for the embedded default"}})
	}
	if cut := bareSections(b); len(cut) > 0 {
		errs := &Errors{}
		for _, name := range cut {
			errs.add(name, "the section has no value; is the file complete?")
		}
		return nil, fmt.Errorf("config: %s: %w", path, errs)
	}
	c, err := k.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes, defaults and validates a YAML document, accepting the names of k beside the
// built-in ones (see Validate). Its error is an *Errors listing every problem found.
func (k Known) Parse(b []byte) (*Config, error) {
	c := &Config{}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, &Errors{List: []string{RedactUserinfo(strings.TrimPrefix(err.Error(), "yaml: "))}}
	}
	errs := &Errors{}
	if len(root.Content) > 0 {
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
			var te *yaml.TypeError
			if !errors.As(err, &te) {
				return nil, &Errors{List: []string{RedactUserinfo(strings.TrimPrefix(err.Error(), "yaml: "))}}
			}
			// The decoder went on past these: report them, then everything Validate finds in
			// what was decoded, so one typo does not hide the other problems.
			paths := map[int]string{}
			nodePaths(root.Content[0], "", paths)
			for _, m := range te.Errors {
				errs.List = append(errs.List, withPath(strings.TrimPrefix(m, "yaml: "), paths))
			}
		}
		var extra yaml.Node
		if err := dec.Decode(&extra); err == nil {
			errs.add("", "line %d: a second YAML document; the configuration is one document", extra.Line)
		}
	}
	c.SetDefaults()
	if err := c.Validate(k); err != nil {
		var v *Errors
		if errors.As(err, &v) {
			errs.List = append(errs.List, v.List...)
		} else {
			errs.List = append(errs.List, err.Error())
		}
	}
	if len(errs.List) > 0 {
		for i, m := range errs.List {
			errs.List[i] = RedactUserinfo(m) // a value quoted by the YAML library or by Validate
		}
		return nil, errs
	}
	return c, nil
}

// SetDefaults fills every unset field with its default (the value each field's comment
// names); set fields are kept. Load, Parse and Default apply it, and the gateway applies it to
// a configuration built in code, so a field left zero means its default wherever the
// configuration came from.
func (c *Config) SetDefaults() {
	c.Responses.setDefaults()
	c.Admission.setDefaults()
	c.Spend.setDefaults()
	c.Server.setDefaults()
	if len(c.Engines) == 0 && len(c.Models) == 0 {
		c.Engines = map[string]Engine{"sim": {Kind: KindSim}}
		c.Models = map[string]Model{"sim": {Engines: []string{"sim"}}}
	}
	for name, e := range c.Engines {
		e.setDefaults()
		e.setPrefixDefaults()
		c.Engines[name] = e
	}
	for id, m := range c.Models {
		m.setDefaults(id)
		c.Models[id] = m
	}
	c.Log.setDefaults()
	c.setPolicyDefaults()
	c.setTokenizeModels()
	c.setContextDefaults()
	c.Store.setDefaults()
	c.CORS.setDefaults()
	c.Telemetry.setDefaults()
}

// setDefaults fills the unset fields of model id: its upstream and display names are its id.
func (m *Model) setDefaults(id string) {
	setDefault(&m.UpstreamModel, id)
	setDefault(&m.DisplayName, id)
	setDefault(&m.ContextWindow, 200000)
	if m.Created.IsZero() {
		m.Created = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	setDefault(&m.Cache.TTL, DefaultCacheTTL)
	setDefault(&m.Cache.MaxBytes, DefaultCacheMaxBytes)
	if m.Required == nil {
		t := true
		m.Required = &t
	}
}

func (e *Engine) setDefaults() {
	t := &e.Timeouts
	setDefault(&t.Connect, 5*time.Second)
	setDefault(&t.FirstByte, 60*time.Second)
	setDefault(&t.Idle, 60*time.Second)
	setDefault(&t.Total, 10*time.Minute)
	if e.Kind == KindSim {
		e.Sim.SetDefaults()
	}
}

// Errors lists every problem found in a configuration, each prefixed with its path.
type Errors struct {
	List []string
}

// notNegative adds the problem of a negative v, the value at path.
func notNegative[T ~int | ~int64 | ~float64](errs *Errors, path string, v T) {
	if v < 0 {
		errs.add(path, "must not be negative")
	}
}

func (e *Errors) add(path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	e.List = append(e.List, msg)
}

// Error implements error, one problem per line.
func (e *Errors) Error() string {
	return strings.Join(e.List, "\n")
}

// builtinKind reports whether kind is one of the engine kinds layer0 builds itself.
func builtinKind(kind string) bool {
	switch kind {
	case KindSim, KindOpenAI, KindAnthropic, KindLayer0:
		return true
	}
	return false
}

// Validate checks the configuration and returns an *Errors with every problem, or nil. An
// engine's kind must be one of the built-in kinds or one of k's (an application's own, which its
// engine factory checks the rest of), and a picker one of the built-in pickers or of k's.
func (c *Config) Validate(k Known) error {
	errs := &Errors{}
	c.Responses.validate(c, errs)
	c.validateAdmission(errs)
	c.Server.validate(errs)
	for _, name := range sortedKeys(c.Engines) {
		e := c.Engines[name]
		p := "engines." + name
		if e.Responses && e.Kind != KindOpenAI {
			errs.add(p+".responses", "only for kind openai")
		}
		if len(e.Options) > 0 && builtinKind(e.Kind) {
			errs.add(p+".options", "kind %s takes no options (they are for an application's own engine kinds)", e.Kind)
		}
		switch e.Kind {
		case KindSim:
			e.Sim.validate(p+".sim", errs)
		case KindOpenAI, KindAnthropic, KindLayer0:
			if e.URL == "" {
				errs.add(p+".url", "required for kind %s", e.Kind)
			} else if msg := checkURL(e.URL); msg != "" {
				errs.add(p+".url", "%s, got %q", msg, RedactUserinfo(e.URL))
			}
		case "":
			errs.add(p+".kind", "required (sim, openai, anthropic or layer0)")
		default:
			if !slices.Contains(k.EngineKinds, e.Kind) {
				errs.add(p+".kind", "unknown kind %q (want sim, openai, anthropic or layer0)", e.Kind)
			}
		}
		notNegative(errs, p+".max_concurrency", e.MaxConcurrency)
		e.validatePrefix(p+".prefix_cache", errs)
	}
	c.validateModels(errs)
	if c.Debug.Requests < 0 || c.Debug.Requests > MaxDebugRequests {
		errs.add("debug.requests", "%d: want 0 (none) to %d", c.Debug.Requests, MaxDebugRequests)
	}
	c.Log.validate(errs)
	c.validatePolicy(k, errs)
	c.validateContext(errs)
	c.Store.validate(errs)
	c.validateCORS(errs)
	c.Telemetry.validate(errs)
	c.validateSpend(errs)
	if len(errs.List) == 0 {
		return nil
	}
	for i, m := range errs.List {
		errs.List[i] = RedactUserinfo(m)
	}
	return errs
}

// validateModels checks each model's engines, context window and response cache.
func (c *Config) validateModels(errs *Errors) {
	if len(c.Models) == 0 {
		errs.add("models", "at least one model is required")
	}
	for _, id := range sortedKeys(c.Models) {
		m := c.Models[id]
		p := "models." + id
		if len(m.Engines) == 0 {
			errs.add(p+".engines", "at least one engine is required")
		}
		for i, en := range m.Engines {
			if _, ok := c.Engines[en]; !ok {
				errs.add(fmt.Sprintf("%s.engines[%d]", p, i), "unknown engine %q", en)
			}
		}
		if m.ContextWindow < 0 {
			errs.add(p+".context_window", "must be positive")
		}
		if m.Cache.TTL < 0 {
			errs.add(p+".cache.ttl", "must be positive, got %s", m.Cache.TTL)
		}
		if m.Cache.MaxBytes < 0 {
			errs.add(p+".cache.max_bytes", "must be positive, got %d", m.Cache.MaxBytes)
		} else if m.Cache.Enabled && m.Cache.MaxBytes < minCacheBytes {
			errs.add(p+".cache.max_bytes", "must be at least %d (one answer), got %d", minCacheBytes, m.Cache.MaxBytes)
		}
	}
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// checkURL says what is wrong with an engine's base URL, or "".
func checkURL(s string) string {
	u, err := url.Parse(s)
	switch {
	case unescapedAt(s):
		return unescapedAtMsg
	case err != nil:
		return "not a URL"
	case u.Scheme != "http" && u.Scheme != "https":
		return "must start with http:// or https://"
	case u.Hostname() == "":
		return "must name a host"
	case u.RawQuery != "" || u.Fragment != "":
		return "must not have a query or fragment"
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "port must be 1-65535"
		}
	}
	return ""
}
