package config

import (
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Key declares one API key. The key itself never appears in the file: `layer0 keys new` prints a
// fresh key and the hash to declare here.
type Key struct {
	// Name identifies the key in logs, metrics and limits (never the key itself). Required,
	// unique.
	Name string `yaml:"name"`
	// Hash is the hex SHA-256 of the key, 64 hex digits. Required, unique.
	Hash string `yaml:"hash"`
	// Models lists the model names (as clients send them: models, aliases, splits) the key may
	// use; "*" in a name matches any run of characters ("claude-*"). Default: every model.
	Models []string `yaml:"models"`
	// Limits are the key's own rate limits. Default none.
	Limits Rates `yaml:"limits"`
	// Debug lets the key ask for its request's decision trace with the X-Layer0-Debug: 1
	// header (answered with X-Layer0-Trace-Id), and read traces on the main listener when no
	// admin address is set: its own requests' traces only. Default false.
	Debug bool `yaml:"debug"`
	// Admin lets the key read the decision traces of every key's requests on the main listener
	// (when no admin address is set), as the admin listener serves them; it implies Debug.
	// Default false.
	Admin bool `yaml:"admin"`
	// Priority names the admission band of the key's requests (admission.bands). Default:
	// admission.default_band.
	Priority string `yaml:"priority"`
	// AllowPriority lists the admission bands the key may ask for with the X-Layer0-Priority
	// header ("*" for any). Default none: the header may only name the key's own band.
	AllowPriority []string `yaml:"allow_priority"`
	// Weight is the key's share of its band's capacity when the pool is saturated, relative to
	// the other keys waiting in the band. Default 1.
	Weight float64 `yaml:"weight"`
	// Team is the team the key belongs to (a name under teams), whose budgets its requests
	// count against too. Default none.
	Team string `yaml:"team"`
	// Budgets limit what the key spends (docs/spend.md). Default none.
	Budgets []Budget `yaml:"budgets"`
}

// Rates are one scope's rate limits: a key's, or the global ones. A zero field means no limit on
// that dimension; the zero value limits nothing.
type Rates struct {
	// RequestsPerMinute caps requests started per minute. Default 0 (no limit).
	RequestsPerMinute int64 `yaml:"requests_per_minute"`
	// InputTokensPerMinute caps input tokens per minute: estimated with the tokenizer before
	// the call, settled with the engine's count after. Default 0 (no limit).
	InputTokensPerMinute int64 `yaml:"input_tokens_per_minute"`
	// OutputTokensPerMinute caps output tokens per minute, charged while they stream. A stream
	// that crosses the limit finishes; the next requests wait until the debt is repaid.
	// Default 0 (no limit).
	OutputTokensPerMinute int64 `yaml:"output_tokens_per_minute"`
	// Concurrent caps requests in flight at once. Default 0 (no limit).
	Concurrent int64 `yaml:"concurrent"`
}

// Limits are the global rate limits and the size limits every request is checked against (the
// body limit is server.max_body_bytes).
type Limits struct {
	// Global limits apply to all requests of this process together, on top of each key's own.
	// Default none.
	Global Rates `yaml:"global"`
	// MaxHeaderBytes is the largest total size of a request's headers, in bytes; larger gets
	// 413. Default 65536 (64 KiB, the HTTP/2 SETTINGS_MAX_HEADER_LIST_SIZE layer0 announces).
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxMessages is the most messages one request may carry; more gets 400. Default 10000.
	MaxMessages int `yaml:"max_messages"`
	// MaxContentBytes is the largest content of one message or of the system prompt, in bytes
	// (text, tool input, tool results and image data together); larger gets 400 naming the
	// message. Default 0 (bounded only by server.max_body_bytes).
	MaxContentBytes int `yaml:"max_content_bytes"`
}

// Split routes one name to several models by weight.
type Split struct {
	// Targets are the arms: a model and its relative weight. At least one.
	Targets []SplitTarget `yaml:"targets"`
	// Sticky sends every request of one API key to the same arm, so that one caller sees one
	// version. Default false: each request is drawn at random.
	Sticky bool `yaml:"sticky"`
}

// SplitTarget is one arm of a split.
type SplitTarget struct {
	// Model is a model id. Required.
	Model string `yaml:"model"`
	// Weight is the arm's share relative to the other arms'. Required, positive.
	Weight int `yaml:"weight"`
}

// Pickers.
const (
	PickerP2C        = "p2c"
	PickerRoundRobin = "round_robin"
	PickerPrefix     = "prefix"
	PickerSticky     = "sticky"
)

// Routing configures how a replica is chosen and when a request moves on.
type Routing struct {
	// Picker chooses among a model's replicas: "p2c" (least outstanding requests of two drawn
	// at random), "round_robin", "prefix" (where the prompt is cached, against load; see
	// Prefix), or "sticky" (one replica per session, by a hash; see Sticky). Default "":
	// "prefix" for a model with more than one replica of an engine with a prefix cache
	// (Engine.PrefixCache), "p2c" for the others.
	Picker string `yaml:"picker"`
	// FallbackUtilizationThreshold is the utilisation, 0 to 1, above which a replica is skipped
	// while another replica or fallback model can serve. 1 or more never skips. Default 0.85.
	FallbackUtilizationThreshold float64 `yaml:"fallback_utilization_threshold"`
	// UtilizationInterval is how often each replica's utilisation is read (sim engines) or
	// scraped (engines with metrics_path). Default 1s.
	UtilizationInterval time.Duration `yaml:"utilization_interval"`
	// RetryBudget bounds retries on another replica of the same model.
	RetryBudget RetryBudget `yaml:"retry_budget"`
	// Ejection configures passive outlier ejection.
	Ejection Ejection `yaml:"ejection"`
	// Breaker configures each replica's circuit breaker.
	Breaker Breaker `yaml:"breaker"`
	// Health configures active health checks (engines with health_path).
	Health Health `yaml:"health"`
	// Prefix tunes the prefix picker.
	Prefix PrefixRouting `yaml:"prefix"`
	// Sticky tunes the sticky picker.
	Sticky StickyRouting `yaml:"sticky"`
}

// RetryBudget allows, over the last Window, at most MinRetries plus Ratio of the requests as
// retries, so a failing pool never multiplies the load.
type RetryBudget struct {
	// Ratio is the share of requests that may be retried. Default 0.2.
	Ratio float64 `yaml:"ratio"`
	// MinRetries is how many retries the window allows whatever the traffic. Default 10.
	MinRetries int `yaml:"min_retries"`
	// Window is the span counted. Default 10s.
	Window time.Duration `yaml:"window"`
}

// Ejection takes a replica out after ConsecutiveFailures faults in a row, for BaseTime doubled on
// each further ejection up to MaxTime.
type Ejection struct {
	// ConsecutiveFailures is the number of faults in a row that ejects a replica. Default 5;
	// -1 disables ejection.
	ConsecutiveFailures int `yaml:"consecutive_failures"`
	// BaseTime is the first ejection's length. Default 30s.
	BaseTime time.Duration `yaml:"base_time"`
	// MaxTime caps an ejection's length. Default 5m.
	MaxTime time.Duration `yaml:"max_time"`
}

// Breaker opens when at least FailureRatio of a replica's requests in the last Window failed
// (with at least MinRequests of them), stays open OpenTime, then lets HalfOpenProbes through.
type Breaker struct {
	// Window is the span over which the failure ratio is measured. Default 10s.
	Window time.Duration `yaml:"window"`
	// MinRequests is how many requests the window must hold before the breaker may open.
	// Default 20.
	MinRequests int `yaml:"min_requests"`
	// FailureRatio is the share of failed requests, 0 to 1, that opens the breaker; above 1
	// never opens it. Default 0.5.
	FailureRatio float64 `yaml:"failure_ratio"`
	// OpenTime is how long an open breaker refuses requests. Default 30s.
	OpenTime time.Duration `yaml:"open_time"`
	// HalfOpenProbes is how many requests a half-open breaker lets through, and how many
	// successes close it. Default 1.
	HalfOpenProbes int `yaml:"half_open_probes"`
}

// Health configures active health checks.
type Health struct {
	// Interval is the time between two checks of each engine with a health_path. Default 10s.
	Interval time.Duration `yaml:"interval"`
	// Timeout bounds one check. Default 5s.
	Timeout time.Duration `yaml:"timeout"`
	// UnhealthyThreshold is how many failed checks in a row mark a replica down. Default 2.
	UnhealthyThreshold int `yaml:"unhealthy_threshold"`
	// HealthyThreshold is how many passed checks in a row mark it up again. Default 1.
	HealthyThreshold int `yaml:"healthy_threshold"`
}

// Policy defaults, also documented on the fields and in docs/config.md. The routing package
// takes the same values for the zero fields of what it is given.
const (
	DefaultMaxHeaderBytes               = 64 << 10
	DefaultMaxMessages                  = 10000
	DefaultFallbackUtilizationThreshold = 0.85

	DefaultRetryRatio      = 0.2
	DefaultRetryMinRetries = 10
	DefaultRetryWindow     = 10 * time.Second

	DefaultEjectionFailures = 5
	DefaultEjectionBaseTime = 30 * time.Second
	DefaultEjectionMaxTime  = 5 * time.Minute

	DefaultBreakerWindow         = 10 * time.Second
	DefaultBreakerMinRequests    = 20
	DefaultBreakerFailureRatio   = 0.5
	DefaultBreakerOpenTime       = 30 * time.Second
	DefaultBreakerHalfOpenProbes = 1

	DefaultHealthInterval           = 10 * time.Second
	DefaultHealthTimeout            = 5 * time.Second
	DefaultHealthUnhealthyThreshold = 2
	DefaultHealthHealthyThreshold   = 1
)

func (c *Config) setPolicyDefaults() {
	l := &c.Limits
	setDefault(&l.MaxHeaderBytes, DefaultMaxHeaderBytes)
	setDefault(&l.MaxMessages, DefaultMaxMessages)
	r := &c.Routing
	setDefault(&r.FallbackUtilizationThreshold, DefaultFallbackUtilizationThreshold)
	setDefault(&r.UtilizationInterval, time.Second)
	r.Prefix.setDefaults()
	r.Sticky.setDefaults()
	b := &r.RetryBudget
	setDefault(&b.Ratio, DefaultRetryRatio)
	setDefault(&b.MinRetries, DefaultRetryMinRetries)
	setDefault(&b.Window, DefaultRetryWindow)
	e := &r.Ejection
	setDefault(&e.ConsecutiveFailures, DefaultEjectionFailures)
	setDefault(&e.BaseTime, DefaultEjectionBaseTime)
	setDefault(&e.MaxTime, DefaultEjectionMaxTime)
	br := &r.Breaker
	setDefault(&br.Window, DefaultBreakerWindow)
	setDefault(&br.MinRequests, DefaultBreakerMinRequests)
	setDefault(&br.FailureRatio, DefaultBreakerFailureRatio)
	setDefault(&br.OpenTime, DefaultBreakerOpenTime)
	setDefault(&br.HalfOpenProbes, DefaultBreakerHalfOpenProbes)
	h := &r.Health
	setDefault(&h.Interval, DefaultHealthInterval)
	setDefault(&h.Timeout, DefaultHealthTimeout)
	setDefault(&h.UnhealthyThreshold, DefaultHealthUnhealthyThreshold)
	setDefault(&h.HealthyThreshold, DefaultHealthHealthyThreshold)
}

// validatePolicy checks keys, limits, routing names and knobs, adding every problem to errs.
func (c *Config) validatePolicy(k Known, errs *Errors) {
	c.validateKeys(errs)

	l := &c.Limits
	l.Global.validate("limits.global", errs)
	notNegative(errs, "limits.max_header_bytes", l.MaxHeaderBytes)
	notNegative(errs, "limits.max_messages", l.MaxMessages)
	notNegative(errs, "limits.max_content_bytes", l.MaxContentBytes)

	for _, name := range sortedKeys(c.Engines) {
		e := c.Engines[name]
		for _, f := range []struct{ key, v string }{{"health_path", e.HealthPath}, {"metrics_path", e.MetricsPath}} {
			switch {
			case f.v == "":
			case e.Kind == KindSim:
				errs.add("engines."+name+"."+f.key, "not used by kind sim (its load and health are read directly)")
			case !strings.HasPrefix(f.v, "/"):
				errs.add("engines."+name+"."+f.key, "must be a path starting with /, got %q", f.v)
			}
		}
	}

	c.validateNames(errs)
	c.validateRouting(k.Pickers, errs)
}

// validateKeys checks the API keys: each named, the names and the hashes unique, the hashes
// SHA-256 in hex, the models they may use named, and their limits.
func (c *Config) validateKeys(errs *Errors) {
	names := map[string]int{}
	hashes := map[string]int{}
	for i, k := range c.Keys {
		p := fmt.Sprintf("keys[%d]", i)
		switch j, dup := names[k.Name]; {
		case k.Name == "":
			errs.add(p+".name", "required")
		case dup:
			errs.add(p+".name", "%q is also the name of keys[%d]", k.Name, j)
		default:
			names[k.Name] = i
		}
		h := strings.ToLower(k.Hash)
		switch j, dup := hashes[h]; {
		case len(h) != 64:
			errs.add(p+".hash", "want the key's SHA-256 as 64 hex digits (layer0 keys new prints one), got %d characters", len(h))
		case !isHex(h):
			errs.add(p+".hash", "not hexadecimal")
		case dup:
			errs.add(p+".hash", "same key as keys[%d]", j)
		default:
			hashes[h] = i
		}
		for j, m := range k.Models {
			if m == "" {
				errs.add(fmt.Sprintf("%s.models[%d]", p, j), "empty model name")
			}
		}
		k.Limits.validate(p+".limits", errs)
	}
}

// validateNames checks the names clients may ask for — models, splits and aliases share one
// namespace — and what they lead to: each fallback and split target a model, fallback chains
// bounded, each alias a model or a split.
func (c *Config) validateNames(errs *Errors) {
	for _, id := range sortedKeys(c.Models) {
		m := c.Models[id]
		for i, f := range m.Fallback {
			p := fmt.Sprintf("models.%s.fallback[%d]", id, i)
			if _, ok := c.Models[f]; !ok {
				errs.add(p, "unknown model %q", f)
			} else if f == id {
				errs.add(p, "a model cannot fall back to itself")
			}
		}
		if n := c.chainLen(id); n > MaxFallbackChain {
			errs.add("models."+id+".fallback", "a fallback chain of %d models, more than %d", n, MaxFallbackChain)
		}
	}
	for _, name := range sortedKeys(c.Splits) {
		s := c.Splits[name]
		p := "splits." + name
		if _, dup := c.Models[name]; dup {
			errs.add(p, "the name is already a model")
		}
		if len(s.Targets) == 0 {
			errs.add(p+".targets", "at least one target is required")
		}
		for i, t := range s.Targets {
			tp := fmt.Sprintf("%s.targets[%d]", p, i)
			if _, ok := c.Models[t.Model]; !ok {
				errs.add(tp+".model", "unknown model %q", t.Model)
			}
			if t.Weight <= 0 {
				errs.add(tp+".weight", "must be positive, got %d", t.Weight)
			}
		}
	}
	for _, name := range sortedKeys(c.Aliases) {
		target := c.Aliases[name]
		p := "aliases." + name
		_, isModel := c.Models[name]
		_, isSplit := c.Splits[name]
		if isModel || isSplit {
			errs.add(p, "the name is already a model or a split")
		}
		_, toModel := c.Models[target]
		_, toSplit := c.Splits[target]
		if !toModel && !toSplit {
			errs.add(p, "unknown model or split %q (an alias cannot point at another alias)", target)
		}
	}
}

// validateRouting checks the pickers, global and each model's (a built-in one or one of
// pickers, an application's own), and the routing's bounds, ratios and times.
func (c *Config) validateRouting(pickers []string, errs *Errors) {
	r := &c.Routing
	validatePicker("routing.picker", r.Picker, pickers, errs)
	for _, id := range sortedKeys(c.Models) {
		validatePicker("models."+id+".routing.picker", c.Models[id].Routing.Picker, pickers, errs)
	}
	r.Prefix.validate(errs)
	r.Sticky.validate(errs)
	if r.FallbackUtilizationThreshold < 0 {
		errs.add("routing.fallback_utilization_threshold", "must be between 0 and 1, got %g", r.FallbackUtilizationThreshold)
	}
	notNegative(errs, "routing.retry_budget.ratio", r.RetryBudget.Ratio)
	notNegative(errs, "routing.retry_budget.min_retries", r.RetryBudget.MinRetries)
	if r.Ejection.ConsecutiveFailures < -1 {
		errs.add("routing.ejection.consecutive_failures", "must be positive, or -1 to disable ejection")
	}
	notNegative(errs, "routing.breaker.min_requests", r.Breaker.MinRequests)
	notNegative(errs, "routing.breaker.failure_ratio", r.Breaker.FailureRatio)
	notNegative(errs, "routing.breaker.half_open_probes", r.Breaker.HalfOpenProbes)
	notNegative(errs, "routing.health.unhealthy_threshold", r.Health.UnhealthyThreshold)
	notNegative(errs, "routing.health.healthy_threshold", r.Health.HealthyThreshold)
	notNegative(errs, "routing.utilization_interval", r.UtilizationInterval)
	notNegative(errs, "routing.retry_budget.window", r.RetryBudget.Window)
	notNegative(errs, "routing.ejection.base_time", r.Ejection.BaseTime)
	notNegative(errs, "routing.ejection.max_time", r.Ejection.MaxTime)
	notNegative(errs, "routing.breaker.window", r.Breaker.Window)
	notNegative(errs, "routing.breaker.open_time", r.Breaker.OpenTime)
	notNegative(errs, "routing.health.interval", r.Health.Interval)
	notNegative(errs, "routing.health.timeout", r.Health.Timeout)
}

func (r Rates) validate(p string, errs *Errors) {
	for _, f := range []struct {
		key string
		v   int64
	}{
		{"requests_per_minute", r.RequestsPerMinute},
		{"input_tokens_per_minute", r.InputTokensPerMinute},
		{"output_tokens_per_minute", r.OutputTokensPerMinute},
		{"concurrent", r.Concurrent},
	} {
		notNegative(errs, p+"."+f.key, f.v)
	}
}

func isHex(s string) bool {
	_, err := hex.DecodeString(s)
	return err == nil
}

// MaxFallbackChain bounds the models of a fallback chain: the model and its fallbacks, theirs
// after them, each once.
const MaxFallbackChain = 64

// chainLen counts the models of id's fallback chain, depth-first, each once, as the router walks
// it (unknown names are reported apart and not counted).
func (c *Config) chainLen(id string) int {
	in := map[string]bool{}
	var walk func(string)
	walk = func(id string) {
		if _, ok := c.Models[id]; !ok || in[id] {
			return
		}
		in[id] = true
		for _, f := range c.Models[id].Fallback {
			walk(f)
		}
	}
	walk(id)
	return len(in)
}

// validatePicker checks the picker at path p: a built-in one, or one of known (an
// application's own).
func validatePicker(p, picker string, known []string, errs *Errors) {
	switch picker {
	case "", PickerP2C, PickerRoundRobin, PickerPrefix, PickerSticky:
		return
	}
	if slices.Contains(known, picker) {
		return
	}
	want := "p2c, round_robin, prefix or sticky"
	if len(known) > 0 {
		want = "p2c, round_robin, prefix, sticky or one of the application's: " + strings.Join(known, ", ")
	}
	errs.add(p, "unknown picker %q (want %s)", picker, want)
}
