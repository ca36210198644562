package config

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPolicyDefaults(t *testing.T) {
	c := Default()
	if len(c.Keys) != 0 {
		t.Errorf("keys: got %v, want none (no auth, loopback only)", c.Keys)
	}
	want := Limits{MaxHeaderBytes: 65536, MaxMessages: 10000}
	if diff := cmp.Diff(want, c.Limits); diff != "" {
		t.Errorf("limits (-want +got):\n%s", diff)
	}
	r := Routing{
		FallbackUtilizationThreshold: 0.85,
		UtilizationInterval:          time.Second,
		RetryBudget:                  RetryBudget{Ratio: 0.2, MinRetries: 10, Window: 10 * time.Second},
		Ejection:                     Ejection{ConsecutiveFailures: 5, BaseTime: 30 * time.Second, MaxTime: 5 * time.Minute},
		Breaker: Breaker{Window: 10 * time.Second, MinRequests: 20, FailureRatio: 0.5, OpenTime: 30 * time.Second,
			HalfOpenProbes: 1},
		Health: Health{Interval: 10 * time.Second, Timeout: 5 * time.Second, UnhealthyThreshold: 2, HealthyThreshold: 1},
		Prefix: PrefixRouting{Imbalance: 2, Slack: 4, Spread: PrefixSpread{MaxReplicas: 3, HotShare: 0.5, Window: 32,
			PrefixTokens: 256, MaxPrefixes: 1024, Idle: time.Minute}},
		Sticky: StickyRouting{Header: "x-session-id", Fallback: "key", Imbalance: 2, Slack: 4},
	}
	if diff := cmp.Diff(r, c.Routing); diff != "" {
		t.Errorf("routing (-want +got):\n%s", diff)
	}
}

const hashA = "dd05d47eaf4d10a2931d65c0f5f62a22476aa1b08bd4e390fa3951e803259c3d"

func TestParsePolicy(t *testing.T) {
	c, err := Parse([]byte(`
keys:
  - name: alpha
    hash: ` + strings.ToUpper(hashA) + `
    models: [chat, "claude-*"]
    limits: {requests_per_minute: 5, input_tokens_per_minute: 1000, output_tokens_per_minute: 500, concurrent: 2}
limits:
  global: {requests_per_minute: 600, concurrent: 64}
  max_header_bytes: 8192
  max_messages: 50
  max_content_bytes: 100000
engines:
  a: {kind: sim}
  v: {kind: openai, url: "http://10.0.0.1:8000", health_path: /health, metrics_path: /metrics}
models:
  chat: {engines: [a], fallback: [chat-b]}
  chat-b: {engines: [v]}
splits:
  ab: {targets: [{model: chat, weight: 9}, {model: chat-b, weight: 1}], sticky: true}
aliases:
  latest: ab
routing:
  picker: round_robin
  fallback_utilization_threshold: 0.9
  utilization_interval: 250ms
  retry_budget: {ratio: 0.1, min_retries: 3, window: 5s}
  ejection: {consecutive_failures: -1}
  breaker: {min_requests: 5, failure_ratio: 0.25}
  health: {interval: 2s, unhealthy_threshold: 3}
  sticky: {header: x-conversation-id, fallback: load, slack: 2}
`))
	if err != nil {
		t.Fatal(err)
	}
	wantKey := Key{Name: "alpha", Hash: strings.ToUpper(hashA), Models: []string{"chat", "claude-*"},
		Limits: Rates{RequestsPerMinute: 5, InputTokensPerMinute: 1000, OutputTokensPerMinute: 500, Concurrent: 2}}
	if diff := cmp.Diff([]Key{wantKey}, c.Keys); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(Limits{Global: Rates{RequestsPerMinute: 600, Concurrent: 64}, MaxHeaderBytes: 8192,
		MaxMessages: 50, MaxContentBytes: 100000}, c.Limits); diff != "" {
		t.Errorf("limits (-want +got):\n%s", diff)
	}
	if got := c.Models["chat"].Fallback; !cmp.Equal(got, []string{"chat-b"}) {
		t.Errorf("fallback: got %v", got)
	}
	if diff := cmp.Diff(Split{Targets: []SplitTarget{{"chat", 9}, {"chat-b", 1}}, Sticky: true}, c.Splits["ab"]); diff != "" {
		t.Errorf("split (-want +got):\n%s", diff)
	}
	if got := c.Aliases["latest"]; got != "ab" {
		t.Errorf("alias: got %q", got)
	}
	if e := c.Engines["v"]; e.HealthPath != "/health" || e.MetricsPath != "/metrics" {
		t.Errorf("engine paths: got %q %q", e.HealthPath, e.MetricsPath)
	}
	r := c.Routing
	if r.Picker != PickerRoundRobin || r.FallbackUtilizationThreshold != 0.9 || r.UtilizationInterval != 250*time.Millisecond {
		t.Errorf("routing: got %+v", r)
	}
	if r.Sticky != (StickyRouting{Header: "x-conversation-id", Fallback: StickyFallbackLoad, Imbalance: 2, Slack: 2}) {
		t.Errorf("sticky: got %+v", r.Sticky)
	}
	if r.Ejection.ConsecutiveFailures != -1 || r.Ejection.BaseTime != 30*time.Second {
		t.Errorf("ejection: got %+v, want disabled with default times", r.Ejection)
	}
	if r.Breaker != (Breaker{Window: 10 * time.Second, MinRequests: 5, FailureRatio: 0.25, OpenTime: 30 * time.Second, HalfOpenProbes: 1}) {
		t.Errorf("breaker: got %+v", r.Breaker)
	}
	if r.Health.Interval != 2*time.Second || r.Health.UnhealthyThreshold != 3 || r.Health.HealthyThreshold != 1 {
		t.Errorf("health: got %+v", r.Health)
	}
}

func TestPolicyProblems(t *testing.T) {
	doc := `
keys:
  - {name: a, hash: ` + hashA + `, models: [""], limits: {requests_per_minute: -1}}
  - {name: a, hash: ` + hashA + `}
  - {hash: xyz}
  - {name: c, hash: "` + strings.Repeat("g", 64) + `"}
limits:
  global: {concurrent: -2}
  max_messages: -1
  max_content_bytes: -5
  max_header_bytes: -3
engines:
  s: {kind: sim, health_path: /health}
  v: {kind: openai, url: "http://x", metrics_path: metrics}
models:
  m: {engines: [s], fallback: [m, ghost]}
  n: {engines: [v]}
splits:
  m: {targets: [{model: n, weight: 1}]}
  sp: {targets: [{model: ghost, weight: 0}]}
  empty: {}
aliases:
  n: m
  al: nothing
  al2: al
routing:
  picker: random
  fallback_utilization_threshold: -0.5
  retry_budget: {ratio: -1, min_retries: -1, window: -1s}
  ejection: {consecutive_failures: -2, base_time: -1s}
  breaker: {failure_ratio: -1, min_requests: -1, half_open_probes: -1, open_time: -1s}
  health: {interval: -1s, unhealthy_threshold: -1, healthy_threshold: -1}
  sticky: {header: "x session", fallback: random, imbalance: 0.5, slack: -1}
`
	_, err := Parse([]byte(doc))
	if err == nil {
		t.Fatal("got nil error, want problems")
	}
	for _, want := range []string{
		"keys[0].models[0]: empty model name",
		"keys[0].limits.requests_per_minute: must not be negative",
		`keys[1].name: "a" is also the name of keys[0]`,
		"keys[1].hash: same key as keys[0]",
		"keys[2].name: required",
		"keys[2].hash: want the key's SHA-256 as 64 hex digits",
		"keys[3].hash: not hexadecimal",
		"limits.global.concurrent: must not be negative",
		"limits.max_messages: must not be negative",
		"limits.max_content_bytes: must not be negative",
		"limits.max_header_bytes: must not be negative",
		"engines.s.health_path: not used by kind sim",
		"engines.v.metrics_path: must be a path starting with /",
		"models.m.fallback[0]: a model cannot fall back to itself",
		`models.m.fallback[1]: unknown model "ghost"`,
		"splits.m: the name is already a model",
		`splits.sp.targets[0].model: unknown model "ghost"`,
		"splits.sp.targets[0].weight: must be positive, got 0",
		"splits.empty.targets: at least one target is required",
		"aliases.n: the name is already a model or a split",
		`aliases.al: unknown model or split "nothing"`,
		`aliases.al2: unknown model or split "al"`,
		`routing.picker: unknown picker "random"`,
		"routing.fallback_utilization_threshold: must be between 0 and 1",
		"routing.retry_budget.ratio: must not be negative",
		"routing.retry_budget.min_retries: must not be negative",
		"routing.retry_budget.window: must not be negative",
		"routing.ejection.consecutive_failures: must be positive, or -1",
		"routing.ejection.base_time: must not be negative",
		"routing.breaker.failure_ratio: must not be negative",
		"routing.breaker.min_requests: must not be negative",
		"routing.breaker.half_open_probes: must not be negative",
		"routing.breaker.open_time: must not be negative",
		"routing.health.interval: must not be negative",
		"routing.health.unhealthy_threshold: must not be negative",
		"routing.health.healthy_threshold: must not be negative",
		`routing.sticky.header: "x session" is not a valid header name`,
		`routing.sticky.fallback: unknown fallback "random" (want key or load)`,
		"routing.sticky.imbalance: must be at least 1, got 0.5",
		"routing.sticky.slack: must not be negative",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q", want)
		}
	}
	if t.Failed() {
		t.Logf("all problems:\n%v", err)
	}

	// Unknown keys in the new sections are errors like any other.
	_, err = Parse([]byte("routing: {pickr: p2c}\nkeys: [{name: a, hash: " + hashA + ", limit: {}}]\n"))
	if err == nil || !strings.Contains(err.Error(), "field pickr not found") || !strings.Contains(err.Error(), "field limit not found") {
		t.Errorf("unknown keys: got %v", err)
	}
}

// TestFallbackChainCap: a fallback chain longer than the router tracks is a configuration error
// at the model's fallback, found by Parse (so by LoadConfig and `layer0 config check`).
func TestFallbackChainCap(t *testing.T) {
	build := func(n int) string {
		var b strings.Builder
		b.WriteString("engines: {e: {kind: sim}}\nmodels:\n")
		for i := range n {
			fmt.Fprintf(&b, "  m%d: {engines: [e]", i)
			if i+1 < n {
				fmt.Fprintf(&b, ", fallback: [m%d]", i+1)
			}
			b.WriteString("}\n")
		}
		return b.String()
	}
	if _, err := Parse([]byte(build(MaxFallbackChain))); err != nil {
		t.Fatalf("a chain of %d: %v", MaxFallbackChain, err)
	}
	_, err := Parse([]byte(build(MaxFallbackChain + 1)))
	if err == nil || !strings.Contains(err.Error(), "models.m0.fallback: a fallback chain of 65 models, more than 64") {
		t.Fatalf("a chain of %d: got %v", MaxFallbackChain+1, err)
	}
	if strings.Contains(err.Error(), "models.m1.fallback") {
		t.Errorf("m1's chain of 64 reported: %v", err)
	}
}

// A picker name beyond the built-in ones is accepted only when Known lists it (an application's
// own), globally and per model; the error lists what is known.
func TestKnownPickers(t *testing.T) {
	const doc = "routing: {picker: tenant}\nengines: {s: {kind: sim}}\nmodels: {m: {engines: [s], routing: {picker: tenant}}}\n"
	_, err := Parse([]byte(doc))
	for _, want := range []string{
		`routing.picker: unknown picker "tenant" (want p2c, round_robin, prefix or sticky)`,
		`models.m.routing.picker: unknown picker "tenant"`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("no picker known: got %v, want %q", err, want)
		}
	}
	_, err = Known{Pickers: []string{"a", "b"}}.Parse([]byte(doc))
	if want := `routing.picker: unknown picker "tenant" (want p2c, round_robin, prefix, sticky or one of the application's: a, b)`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("other pickers known: got %v, want %q", err, want)
	}
	c, err := Known{Pickers: []string{"tenant"}}.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("the picker known: %v", err)
	}
	if c.Routing.Picker != "tenant" || c.Models["m"].Routing.Picker != "tenant" {
		t.Errorf("pickers decoded as %q and %q", c.Routing.Picker, c.Models["m"].Routing.Picker)
	}
	if err := c.Validate(Known{EngineKinds: []string{"tenant"}}); err == nil {
		t.Error("a picker known as an engine kind only: accepted")
	}
}
