package layer0

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/cache"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/conversation"
	"github.com/layer0ai/layer0/internal/engine"
	"github.com/layer0ai/layer0/internal/engine/sim"
	"github.com/layer0ai/layer0/internal/kvevents"
	"github.com/layer0ai/layer0/internal/limit"
	"github.com/layer0ai/layer0/internal/metrics"
	"github.com/layer0ai/layer0/internal/pipeline"
	"github.com/layer0ai/layer0/internal/prefix"
	"github.com/layer0ai/layer0/internal/route"
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/spend"
	"github.com/layer0ai/layer0/internal/telemetry"
	"github.com/layer0ai/layer0/internal/tokenizer"
	"github.com/layer0ai/layer0/internal/upstream"
	"github.com/prometheus/client_golang/prometheus"
)

// generation is one built configuration: the pipeline, and what the background loops and the
// engine metrics endpoint need of it. A generation is never mutated; reload builds the next one,
// handing over the state that must survive (replicas of unchanged engines, limit counters).
//
// A generation counts its users — requests and background ticks, between Gateway.acquire and
// release — so that once it is retired (replaced by a reload, or the gateway closed) and its
// last user is gone, it lets go of its replicas: a replica that no generation holds any more
// closes its engine.
type generation struct {
	cfg  *Config
	pipe *pipeline.Pipeline
	// snap is the pipeline with the server's limits of the same configuration.
	snap     server.Snapshot
	replicas map[string]*replica // by engine name, every configured engine
	// redis is the shared store of the limit counters; nil with the in-memory store. A reload
	// with the same store settings keeps it.
	redis *limit.Redis
	// ledger keeps the budgets' counters (internal/spend), kept by a reload with the same store.
	ledger spend.Ledger
	// stored keeps the Responses API's stored responses in this process: made by the first
	// generation, kept by every reload (responses is read at start).
	stored *conversation.Memory
	// tel is the OpenTelemetry provider; nil when tracing is off. A reload with the same
	// telemetry settings keeps it; the last generation holding it shuts it down.
	tel *telemetry.Provider

	users   atomic.Int64 // requests and background ticks using the generation now
	retired atomic.Bool  // set once the generation is no longer live
	drained sync.Once    // lets go of the replicas, once retired and unused
	logger  *slog.Logger
}

// release ends one use of the generation (from Gateway.acquire); the last one of a retired
// generation lets go of its replicas.
func (g *generation) release() {
	if g.users.Add(-1) == 0 && g.retired.Load() {
		g.drained.Do(g.drain)
	}
}

// retire marks the generation as no longer live: the gateway stores its successor (or closes)
// first. Its replicas are let go of now if nothing uses it, else by its last user's release.
func (g *generation) retire() {
	g.retired.Store(true)
	if g.users.Load() == 0 {
		g.drained.Do(g.drain)
	}
}

// drain lets go of the generation's replicas: each one no other generation holds is closed.
func (g *generation) drain() {
	for name, r := range g.replicas {
		if r.holders.Add(-1) == 0 {
			if err := r.close(); err != nil {
				g.logger.Warn("closing a retired engine failed", "engine", name, "err", err)
			}
		}
	}
	if t := g.tel; t != nil && t.Holders.Add(-1) == 0 {
		// Off the releasing request's path: the queued spans go out first.
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), t.Config().OTLP.Timeout)
			defer cancel()
			if err := t.Shutdown(ctx); err != nil {
				g.logger.Warn("shutting down the previous telemetry exporter", "err", err)
			}
		}()
	}
}

// replica is one engine with its routing state and how its load and health are read.
type replica struct {
	cfg    config.Engine
	policy policyKey
	route  *route.Replica
	sim    *sim.Engine // the embedded engine, whose load is read directly; nil otherwise
	// metricsURL is the engine's Prometheus endpoint to scrape for utilisation; "" when none.
	metricsURL string
	// probes is the client of the health checks and metrics scrapes; nil when there are none.
	probes *http.Client
	// holders counts the generations holding the replica; the last one to let go closes it.
	holders atomic.Int64
	// prefix is the replica's entry in the prefix index, kept with the replica across reloads
	// as its engine's cache is; nil when not indexed.
	prefix *prefix.Replica
	// events follows the engine's KV-cache events for the index's precise mode; nil otherwise.
	events *kvevents.Subscriber
}

// close closes the replica's engine and its probe connections.
func (r *replica) close() error {
	if r.events != nil {
		r.events.Close()
	}
	if r.probes != nil {
		r.probes.CloseIdleConnections()
	}
	return r.route.Engine.Close()
}

// policyKey is the part of the configuration a replica's routing state was built with: a
// replica is kept across a reload only when this and its engine's configuration are unchanged.
type policyKey struct {
	ejection config.Ejection
	breaker  config.Breaker
	health   config.Health
}

// load returns the replica's load, read from the sim; ok is false for other engines.
func (r *replica) load() (metrics.Load, bool) {
	if r.sim == nil {
		return metrics.Load{}, false
	}
	st := r.sim.Stats()
	return metrics.Load{Running: float64(st.Running), Waiting: float64(st.Waiting), KVCacheUsage: st.KVCacheUsage}, true
}

// build turns a configuration into a generation. Engines whose configuration and routing policy
// are unchanged from old keep their engine and replica (connections, KV cache, ejection and
// breaker state); the limiter adopts old's counters for every key and limit that is unchanged.
func build(cfg *Config, old *generation, o *options) (gen *generation, err error) {
	// A configuration built in code gets the defaults a loaded one has, and the same checks.
	cfg.SetDefaults()
	if err := cfg.Validate(o.kinds()...); err != nil {
		return nil, fmt.Errorf("layer0: %w", err)
	}
	keys, err := auth.New(keySpecs(cfg.Keys))
	if err != nil {
		return nil, err
	}
	if err := keys.CheckListen(cfg.Server.Addr); err != nil {
		return nil, err
	}

	tok := tokenizer.Default()
	g := &generation{cfg: cfg, replicas: make(map[string]*replica, len(cfg.Engines)), logger: o.logger}
	pol := policyKey{cfg.Routing.Ejection, cfg.Routing.Breaker, cfg.Routing.Health}
	var made []*replica // the replicas built here, closed if the generation is not
	defer func() {
		if err == nil {
			for _, r := range g.replicas {
				r.holders.Add(1)
			}
			if g.tel != nil {
				g.tel.Holders.Add(1)
			}
			return
		}
		for _, r := range made {
			_ = r.close() // never used: nothing to report beyond err
		}
		if g.tel != nil && (old == nil || old.tel != g.tel) {
			_ = g.tel.Shutdown(context.Background()) // never used: nothing queued
		}
	}()
	if tc := cfg.Telemetry; tc.Enabled() {
		if old != nil && old.tel != nil && reflect.DeepEqual(old.tel.Config(), tc) {
			g.tel = old.tel
		} else if g.tel, err = telemetry.New(tc, o.logger); err != nil {
			return nil, fmt.Errorf("layer0: %w", err)
		}
	}
	for _, name := range sortedNames(cfg.Engines) {
		ec := cfg.Engines[name]
		if old != nil {
			if r, ok := old.replicas[name]; ok && r.policy == pol && reflect.DeepEqual(r.cfg, ec) {
				g.replicas[name] = r
				continue
			}
		}
		r, err := newReplica(name, ec, pol, tok, o)
		if err != nil {
			return nil, err
		}
		made = append(made, r)
		g.replicas[name] = r
	}

	rc := route.Config{
		Aliases:              cfg.Aliases,
		UtilizationThreshold: cfg.Routing.FallbackUtilizationThreshold,
		Budget: route.BudgetConfig{Ratio: cfg.Routing.RetryBudget.Ratio, MinRetries: cfg.Routing.RetryBudget.MinRetries,
			Window: cfg.Routing.RetryBudget.Window},
		Now:          o.now,
		RecheckAfter: cfg.Routing.Health.Interval,
	}
	pc := cfg.Routing.Prefix
	prefixPicker := &route.Prefix{LoadTokens: pc.LoadTokens, Guard: route.Guard{Imbalance: pc.Imbalance, Slack: int64(pc.Slack)}}
	switch cfg.Routing.Picker {
	case config.PickerRoundRobin:
		rc.Picker = &route.RoundRobin{}
	case config.PickerPrefix:
		rc.Picker = prefixPicker
	case config.PickerSticky:
		sc := cfg.Routing.Sticky
		rc.Picker = &route.Sticky{Header: http.CanonicalHeaderKey(sc.Header), FallbackKey: sc.Fallback == config.StickyFallbackKey,
			Guard: route.Guard{Imbalance: sc.Imbalance, Slack: int64(sc.Slack)}}
	}
	var models []*pipeline.Model
	byID := map[string]*pipeline.Model{}
	engines := map[*route.Replica]pipeline.Engine{}
	indexed := map[string][]*prefix.Replica{} // by name clients may ask for
	for _, id := range sortedNames(cfg.Models) {
		mc := cfg.Models[id]
		m := route.Model{Name: id, Upstream: mc.UpstreamModel, ContextWindow: mc.ContextWindow, Fallbacks: mc.Fallback}
		pm := &pipeline.Model{ID: id, DisplayName: mc.DisplayName, Created: mc.Created, Context: contextPolicy(mc.Context),
			ShareAcrossKeys: mc.Cache.ShareAcrossKeys}
		for _, en := range mc.Engines {
			r := g.replicas[en]
			m.Replicas = append(m.Replicas, r.route)
			if c, ok := r.route.Engine.(engine.Counter); ok && pm.Tokens == nil {
				pm.Tokens = c
			}
			info := pipeline.Engine{URL: r.cfg.URL, Prefix: r.prefix}
			if r.prefix != nil {
				indexed[id] = append(indexed[id], r.prefix)
			}
			if r.sim != nil {
				// Engines behind a URL enforce their timeouts in the upstream client; the
				// embedded sim relies on the pipeline for the first byte.
				info.FirstByte = r.cfg.Timeouts.FirstByte
			}
			engines[r.route] = info
		}
		if cfg.Routing.Picker == "" && len(indexed[id]) > 1 {
			// Unset picker: a pool of replicas with prefix caches is placed by prefix; any
			// other pool by p2c (the table's default).
			m.Picker = prefixPicker
		}
		rc.Models = append(rc.Models, m)
		models = append(models, pm)
		byID[id] = pm
	}
	for _, name := range sortedNames(cfg.Splits) {
		sc := cfg.Splits[name]
		s := route.Split{Name: name, Sticky: sc.Sticky}
		for _, t := range sc.Targets {
			s.Targets = append(s.Targets, route.Target{Model: t.Model, Weight: t.Weight})
		}
		rc.Splits = append(rc.Splits, s)
		indexed[name] = unionReplicas(indexed, sc.Targets)
		first := byID[sc.Targets[0].Model]
		pm := &pipeline.Model{ID: name, DisplayName: name, Created: first.Created, Tokens: first.Tokens, Context: first.Context,
			ShareAcrossKeys: true}
		for _, t := range sc.Targets {
			// A split's replicas are its targets': it shares what every target shares.
			pm.ShareAcrossKeys = pm.ShareAcrossKeys && byID[t.Model].ShareAcrossKeys
		}
		models = append(models, pm)
		byID[name] = pm
	}
	for _, alias := range sortedNames(cfg.Aliases) {
		if reps := indexed[cfg.Aliases[alias]]; len(reps) > 0 {
			indexed[alias] = reps
		}
		if t := byID[cfg.Aliases[alias]]; t != nil {
			models = append(models, &pipeline.Model{ID: alias, DisplayName: alias, Created: t.Created, Tokens: t.Tokens, Context: t.Context,
				ShareAcrossKeys: t.ShareAcrossKeys})
		}
	}
	table, err := route.New(rc)
	if err != nil {
		return nil, fmt.Errorf("layer0: %w", err)
	}

	var st limit.Store
	if cfg.Store.Kind == config.StoreRedis {
		if old != nil && old.redis != nil && sameConnection(old.cfg.Store, cfg.Store) {
			g.redis = old.redis
		} else if g.redis, err = newRedisStore(cfg.Store, o); err != nil {
			return nil, err
		}
		st = g.redis
	}
	lim, err := limit.New(limit.Config{Global: rates(cfg.Limits.Global), Keys: keys.Limits(), Now: o.now, Store: st})
	if err != nil {
		g.closeStore(old, 0)
		return nil, fmt.Errorf("layer0: %w", err)
	}
	if old != nil && old.redis == g.redis {
		// Same store: unchanged cells carry over. A store that changed (memory to Redis, another
		// Redis) starts from its own counters, never from the old store's cells.
		lim.Adopt(old.pipe.Limits())
	}

	// The response cache of the models that cache; a reload keeps the stored answers of every
	// model whose policy is unchanged.
	cc := cache.Config{Models: map[string]cache.Policy{}, Aliases: cfg.Aliases, Now: o.now}
	if sc := cfg.Store.Cache; sc.Enabled && g.redis != nil {
		cc.Shared = &cache.RedisConfig{Client: g.redis.Client(), Health: g.redis, Timeout: sc.Timeout,
			MaxEntryBytes: sc.MaxEntryBytes, FillWait: sc.FillWait}
	}
	for id, mc := range cfg.Models {
		if mc.Cache.Enabled {
			cc.Models[id] = cache.Policy{TTL: mc.Cache.TTL, MaxBytes: mc.Cache.MaxBytes, Sampled: mc.Cache.CacheSampled,
				ShareAcrossKeys: mc.Cache.ShareAcrossKeys}
		}
	}
	rcache := cache.New(cc)
	if old != nil {
		rcache.Adopt(old.pipe.Cache())
	}

	var sh spend.Shared
	var oldLedger spend.Ledger
	if g.redis != nil {
		sh = spend.Shared{Client: g.redis.Client(), Circuit: g.redis}
	}
	if old != nil {
		oldLedger = old.ledger
	}
	var sp *spend.Spender
	if g.ledger, sp, err = spend.Build(cfg, oldLedger, sh, o.logger); err != nil {
		g.closeStore(old, 0)
		return nil, fmt.Errorf("layer0: %w", err)
	}
	g.pipe, err = pipeline.New(pipeline.Config{
		Keys:   keys,
		Limits: lim,
		Sizes: limit.Sizes{MaxBodyBytes: cfg.Server.MaxBodyBytes, MaxHeaderBytes: cfg.Limits.MaxHeaderBytes, MaxMessages: cfg.Limits.MaxMessages,
			MaxContentBytes: cfg.Limits.MaxContentBytes},
		Routes:  table,
		Models:  models,
		Engines: engines,
		Tokens:  tok,
		Cache:   rcache,
		Offload: offloadTargets(cfg.OffloadTargets),
		Prefix:  prefix.NewIndex(tok, indexed),
		Spend:   sp,
	})
	if err != nil {
		g.closeStore(old, 0)
		return nil, fmt.Errorf("layer0: %w", err)
	}
	sc := cfg.Server
	g.snap = server.NewSnapshot(g.pipe, server.Limits{ReadBodyTimeout: sc.ReadBodyTimeout,
		MinBodyRate: sc.MinBodyRate, WriteTimeout: sc.WriteTimeout, BodyBytesInFlight: sc.MaxBodyBytesInFlight})
	if old != nil {
		old.closeStore(g, cfg.Server.ShutdownTimeout)
	}
	// Stored responses: in the shared store when asked and one is configured, else in this
	// process's memory, which outlives reloads.
	if old != nil {
		g.stored = old.stored
	} else {
		g.stored = conversation.NewMemory(cfg.Responses.TTL, cfg.Responses.MaxBytes, o.now)
	}
	g.snap.Responses = g.stored
	if cfg.Responses.Shared && g.redis != nil {
		g.snap.Responses = conversation.NewRedis(g.redis.Client(), cfg.Responses.TTL, cfg.Store.Cache.Timeout)
	}
	g.snap.CORS = server.NewCORS(cfg.CORS)
	g.snap.Playground = cfg.Playground
	g.snap.Hosts = server.NewHosts(cfg.Server.AllowedHosts)
	g.snap.Done = g.release
	if g.tel != nil {
		kinds := make(map[string]string, len(cfg.Engines))
		for name, ec := range cfg.Engines {
			kinds[name] = ec.Kind
		}
		g.snap.Tracer = g.tel.Tracer(kinds)
	}
	return g, nil
}

// sameConnection reports whether two store sections connect the same way, whatever their cache
// settings: the limits then keep their store (and this replica its concurrency leases).
func sameConnection(a, b config.Store) bool {
	a.Cache, b.Cache = config.StoreCache{}, config.StoreCache{}
	return reflect.DeepEqual(a, b)
}

// newRedisStore connects the limit counters to Redis. The connection is lazy: a Redis that is
// down at start is handled like one that goes down later (store.on_error).
func newRedisStore(sc config.Store, o *options) (*limit.Redis, error) {
	password := ""
	if sc.PasswordEnv != "" {
		if password = os.Getenv(sc.PasswordEnv); password == "" {
			return nil, fmt.Errorf("layer0: store.password_env: the environment variable %s is not set", sc.PasswordEnv)
		}
	}
	client, err := limit.DialRedis(sc.StoreURLs(), password, sc.Timeout)
	if err != nil {
		return nil, fmt.Errorf("layer0: store: %w", err)
	}
	errs := prometheus.NewCounter(prometheus.CounterOpts{Name: "layer0_store_errors_total",
		Help: "Rate-limit and shared-cache operations that could not use the shared store (Redis failed or was unreachable)."})
	if err := o.registry.Register(errs); err != nil {
		are, ok := err.(prometheus.AlreadyRegisteredError)
		if !ok {
			client.Close()
			return nil, fmt.Errorf("layer0: store metrics: %w", err)
		}
		errs = are.ExistingCollector.(prometheus.Counter) // the store of an earlier configuration registered it
	}
	st, err := limit.NewRedis(limit.RedisConfig{Client: client, Timeout: sc.Timeout, Deny: sc.OnError == config.OnErrorDeny,
		Replicas: sc.Replicas, LeaseTTL: sc.LeaseTTL, Logger: o.logger, OnError: errs.Inc})
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("layer0: %w", err)
	}
	return st, nil
}

// closeStore closes g's shared store unless next keeps it, after grace (the requests still running
// on g release their slots meanwhile). A nil g or next is allowed.
func (g *generation) closeStore(next *generation, grace time.Duration) {
	if g == nil || g.redis == nil || (next != nil && next.redis == g.redis) {
		return
	}
	st, ledger := g.redis, g.ledger
	if grace <= 0 {
		spend.Close(ledger)
		_ = st.Close()
		return
	}
	time.AfterFunc(grace, func() { spend.Close(ledger); _ = st.Close() })
}

// newReplica builds an engine and its routing state.
func newReplica(name string, ec config.Engine, pol policyKey, tok *tokenizer.Codec, o *options) (*replica, error) {
	e, err := newEngine(name, ec, tok, o)
	if err != nil {
		return nil, err
	}
	p := route.Policy{
		Ejection: route.Ejection{ConsecutiveFailures: pol.ejection.ConsecutiveFailures, BaseTime: pol.ejection.BaseTime,
			MaxTime: pol.ejection.MaxTime},
		Breaker: route.Breaker{Window: pol.breaker.Window, MinRequests: pol.breaker.MinRequests,
			FailureRatio: pol.breaker.FailureRatio, OpenTime: pol.breaker.OpenTime, HalfOpenProbes: pol.breaker.HalfOpenProbes},
		Health: route.Health{UnhealthyThreshold: pol.health.UnhealthyThreshold, HealthyThreshold: pol.health.HealthyThreshold,
			Timeout: pol.health.Timeout},
		Now:    o.now,
		Logger: o.logger,
	}
	r := &replica{cfg: ec, policy: pol, route: route.NewReplica(name, e, p)}
	r.sim, _ = e.(*sim.Engine)
	if pc := ec.PrefixCache; pc.Indexed() {
		r.prefix = prefix.NewReplica(name, tok, pc.BlockTokens, pc.CapacityTokens)
		r.route.Prefix = r.prefix
		if pc.Mode == config.PrefixPrecise {
			ep := pc.Events
			if r.sim != nil && ep == ec.Sim.KVEvents {
				ep = r.sim.KVEventsEndpoint() // its port resolved
			}
			r.prefix.EnablePrecise(prefix.PreciseOptions{Logger: o.logger})
			r.events = kvevents.Subscribe(ep, pc.EventsTopic, pc.EventsMaxBytes, r.prefix, o.logger.With("engine", name))
		}
	}
	base := strings.TrimRight(ec.URL, "/")
	if ec.HealthPath != "" || ec.MetricsPath != "" {
		r.probes = newProbeClient()
	}
	if ec.HealthPath != "" {
		r.route.Probe = probe(r.probes, base+ec.HealthPath)
	}
	if ec.MetricsPath != "" {
		r.metricsURL = base + ec.MetricsPath
	}
	return r, nil
}

// probe returns an active health check: GET url, healthy on a 2xx answer.
func probe(hc *http.Client, url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
		}
		return nil
	}
}

// newProbeClient is the HTTP client of a replica's health checks and metrics scrapes: its own
// small pool (closed with the replica), no redirects, and no engine credential (neither
// endpoint needs one, so none is sent).
func newProbeClient() *http.Client {
	return &http.Client{
		Transport:     upstream.NewTransport(5*time.Second, nil),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// unionReplicas returns the indexed replicas of a split's targets, each once.
func unionReplicas(indexed map[string][]*prefix.Replica, targets []config.SplitTarget) []*prefix.Replica {
	var out []*prefix.Replica
	for _, t := range targets {
		for _, r := range indexed[t.Model] {
			if !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	return out
}

func keySpecs(ks []config.Key) []auth.Spec {
	specs := make([]auth.Spec, len(ks))
	for i, k := range ks {
		specs[i] = auth.Spec{Name: k.Name, Hash: k.Hash, Models: k.Models, Limits: rates(k.Limits), Debug: k.Debug, Admin: k.Admin}
	}
	return specs
}

func rates(r config.Rates) limit.Limits {
	return limit.Limits{RequestsPerMinute: r.RequestsPerMinute, InputTokensPerMinute: r.InputTokensPerMinute,
		OutputTokensPerMinute: r.OutputTokensPerMinute, Concurrent: r.Concurrent}
}

func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// contextPolicy is a model's context settings as the pipeline applies them.
func contextPolicy(c config.Context) pipeline.ContextPolicy {
	return pipeline.ContextPolicy{Truncate: c.Overflow == config.OverflowTruncate, Fixed: c.Split == config.SplitFixed,
		MaxTokensPerShard: c.MaxTokensPerShard}
}

// offloadTargets maps each offload target's name to the name it serves as.
func offloadTargets(ts map[string]config.OffloadTarget) map[string]string {
	m := make(map[string]string, len(ts))
	for name, t := range ts {
		m[name] = t.Model
	}
	return m
}

// unready says why the generation cannot serve now: one reason for each model marked required
// (models.ID.required, the default) none of whose replicas can take a request, naming each
// replica and why (down, ejected, breaker). Empty when ready.
func (g *generation) unready() []string {
	var reasons []string
	for _, id := range sortedNames(g.cfg.Models) {
		mc := g.cfg.Models[id]
		if mc.Required != nil && !*mc.Required {
			continue
		}
		why := make([]string, 0, len(mc.Engines))
		for _, en := range mc.Engines {
			r := g.replicas[en]
			reason := r.route.Unavailable()
			if reason == "" {
				why = nil
				break
			}
			why = append(why, en+": "+reason)
		}
		if why != nil {
			reasons = append(reasons, fmt.Sprintf("model %q: no healthy replica (%s)", id, strings.Join(why, ", ")))
		}
	}
	return reasons
}
