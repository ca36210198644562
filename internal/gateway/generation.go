package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/layer0ai/layer0/internal/admission"
	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/cache"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/conversation"
	"github.com/layer0ai/layer0/internal/limit"
	"github.com/layer0ai/layer0/internal/pipeline"
	"github.com/layer0ai/layer0/internal/route"
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/spend"
	"github.com/layer0ai/layer0/internal/telemetry"
	"github.com/layer0ai/layer0/internal/tokenizer"
)

// generation is one built configuration: the pipeline, and what the background loop and the
// engine metrics endpoint need of it. A generation is never mutated; a reload builds the next
// one, provisioning from this one every component whose configuration is unchanged (parts),
// and the limits and the response cache adopt this one's counters and answers.
//
// A generation counts its users — requests and background ticks, between Gateway.acquire and
// release — so that once it is retired (replaced by a reload, or the gateway closed) and its
// last user is gone, it lets go of its components: one no other generation holds is cleaned up.
type generation struct {
	cfg  *config.Config
	pipe *pipeline.Pipeline
	// snap is the pipeline with the server's limits of the same configuration.
	snap     server.Snapshot
	replicas map[string]*replica // by engine name, every configured engine
	parts    parts
	held     holdings // every component of parts, let go of once retired and unused

	users   atomic.Int64 // requests and background ticks using the generation now
	retired atomic.Bool  // set once the generation is no longer live
	drained sync.Once    // lets go of the components, once retired and unused
	logger  *slog.Logger
}

// parts are the components a generation is built of, each Shared with the generations before
// and after it whose configuration of it is the same.
type parts struct {
	replicas map[string]*Shared[*replica] // by engine name
	pickers  *Shared[pickers]
	// redis is the connection to the shared store, of the limits, the response cache and the
	// stored responses, with the limits' counters on it; nil with the in-memory store.
	redis *Shared[redisStore]
	// tel is the OpenTelemetry provider; nil when tracing is off.
	tel *Shared[*telemetry.Provider]
	// stored keeps the Responses API's stored responses in this process.
	stored *Shared[*conversation.Memory]
	// ledger keeps the budgets' counters (internal/spend): in memory, or on the shared store.
	ledger *Shared[spend.Ledger]
}

// release ends one use of the generation (from Gateway.acquire); the last one of a retired
// generation lets go of its components.
func (g *generation) release() {
	if g.users.Add(-1) == 0 && g.retired.Load() {
		g.drained.Do(g.held.letGo)
	}
}

// retire marks the generation as no longer live: the gateway stores its successor (or closes)
// first. Its components are let go of now if nothing uses it, else by its last user's release.
func (g *generation) retire() {
	g.retired.Store(true)
	if g.users.Load() == 0 {
		g.drained.Do(g.held.letGo)
	}
}

// build turns a configuration into a generation, provisioning from old (nil at start) every
// component whose configuration is unchanged. On error nothing built for it is left open.
func build(cfg *config.Config, old *generation, o *Options) (*generation, error) {
	// A configuration built in code gets the defaults a loaded one has, and the same checks.
	cfg.SetDefaults()
	if err := o.Check(cfg); err != nil {
		return nil, fmt.Errorf("layer0: %w", err)
	}
	keys, err := auth.New(keySpecs(cfg.Keys))
	if err != nil {
		return nil, err
	}
	if err := keys.CheckListen(cfg.Server.Addr); err != nil {
		return nil, err
	}
	g := &generation{cfg: cfg, logger: o.Logger}
	var prev parts
	if old != nil {
		prev = old.parts
	}
	if err := g.provision(prev, o); err != nil {
		g.held.abandon()
		return nil, err
	}
	if err := g.assemble(keys, old, o); err != nil {
		g.held.abandon()
		return nil, err
	}
	g.held.commit()
	return g, nil
}

// provision builds, or takes over from prev, every component of the generation.
func (g *generation) provision(prev parts, o *Options) error {
	cfg := g.cfg
	var err error
	if tc := cfg.Telemetry; tc.Enabled() {
		g.parts.tel, err = provision(prev.tel, tc, func() (*telemetry.Provider, error) {
			return telemetry.New(tc, o.Logger)
		}, func(t *telemetry.Provider) { go shutdownTelemetry(t, o.Logger) })
		if err != nil {
			return fmt.Errorf("layer0: %w", err)
		}
		add(&g.held, g.parts.tel)
	}
	if err := g.provisionReplicas(prev.replicas, o); err != nil {
		return err
	}
	rc := cfg.Routing
	pk := pickerKey{rc.Picker, rc.Prefix, rc.Sticky}
	g.parts.pickers, _ = provision(prev.pickers, pk, func() (pickers, error) { return newPickers(rc), nil }, nil)
	add(&g.held, g.parts.pickers)
	if cfg.Store.Kind == config.StoreRedis {
		// Keyed by how it connects: a change of the cache's settings keeps the connection (and
		// this replica's concurrency leases).
		sc := cfg.Store
		sc.Cache = config.StoreCache{}
		g.parts.redis, err = provision(prev.redis, sc, func() (redisStore, error) { return newRedisStore(sc, o) },
			func(st redisStore) { _ = st.close() })
		if err != nil {
			return err
		}
		add(&g.held, g.parts.redis)
	}
	if err := g.provisionLedger(prev.ledger, o); err != nil {
		return err
	}
	// The stored responses outlive every reload: responses.ttl and max_bytes are read at start.
	rs := cfg.Responses
	g.parts.stored, _ = provision(prev.stored, struct{}{}, func() (*conversation.Memory, error) {
		return conversation.NewMemory(rs.TTL, rs.MaxBytes, o.Now), nil
	}, nil)
	add(&g.held, g.parts.stored)
	return nil
}

// provisionLedger provisions the budgets' ledger, kept while the store connects the same way.
func (g *generation) provisionLedger(prev *Shared[spend.Ledger], o *Options) error {
	var sh spend.Shared
	key := any(config.StoreMemory)
	sc := g.cfg.Store
	if g.parts.redis != nil {
		r := g.parts.redis.Value()
		sc.Cache = config.StoreCache{}
		sh, key = spend.Shared{Circuit: r.conn}, sc
	}
	var err error
	g.parts.ledger, err = provision(prev, key, func() (spend.Ledger, error) { return spend.NewLedger(sh, sc, o.Logger) }, spend.Close)
	if err != nil {
		return fmt.Errorf("layer0: %w", err)
	}
	add(&g.held, g.parts.ledger)
	return nil
}

// shutdownTelemetry exports the spans still queued and stops the exporter.
func shutdownTelemetry(t *telemetry.Provider, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), t.Config().OTLP.Timeout)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		logger.Warn("shutting down the previous telemetry exporter", "err", err)
	}
}

// provisionReplicas provisions every configured engine's replica.
func (g *generation) provisionReplicas(prev map[string]*Shared[*replica], o *Options) error {
	cfg := g.cfg
	tok := tokenizer.Default()
	pol := policyKey{cfg.Routing.Ejection, cfg.Routing.Breaker, cfg.Routing.Health}
	g.replicas = make(map[string]*replica, len(cfg.Engines))
	g.parts.replicas = make(map[string]*Shared[*replica], len(cfg.Engines))
	for _, name := range sortedNames(cfg.Engines) {
		ec := cfg.Engines[name]
		s, err := provision(prev[name], replicaKey{ec, pol}, func() (*replica, error) {
			return newReplica(name, ec, pol, tok, o)
		}, func(r *replica) {
			if err := r.close(); err != nil {
				o.Logger.Warn("closing a retired engine failed", "engine", name, "err", err)
			}
		})
		if err != nil {
			return err
		}
		g.parts.replicas[name] = add(&g.held, s)
		g.replicas[name] = s.Value()
	}
	return nil
}

// assemble builds the generation's pipeline and snapshot over its components; the limits and
// the response cache adopt old's counters and answers where their configuration is unchanged.
func (g *generation) assemble(keys *auth.Keys, old *generation, o *Options) error {
	cfg := g.cfg
	rt, err := g.routes(o.Now, o.Pickers)
	if err != nil {
		return err
	}
	st := o.LimitStore // an application's, else Redis's (nil: memory)
	if st == nil && g.parts.redis != nil {
		st = g.parts.redis.Value().limits
	}
	lim := limit.New(limit.Config{Global: rates(cfg.Limits.Global), Keys: keys.Limits(), Now: o.Now, Store: st})
	if old != nil && (o.LimitStore != nil || old.parts.redis == g.parts.redis) {
		// Same store: unchanged cells carry over. A store that changed (memory to Redis, another
		// Redis) starts from its own counters, never from the old store's cells.
		lim.Adopt(old.pipe.Limits())
	}
	sp, err := spend.FromConfig(cfg, g.parts.ledger.Value())
	if err != nil {
		return fmt.Errorf("layer0: %w", err)
	}
	rcache := g.responseCache(o)
	if old != nil {
		// A reload keeps the stored answers of every model whose policy is unchanged.
		rcache.Adopt(old.pipe.Cache())
	}
	// Admission: the queues outlive the generation; the policy is this configuration's.
	var prevGate *admission.Gate
	if old != nil {
		prevGate = old.pipe.Admission()
	}
	gate, err := admission.FromConfig(cfg, func(name string) *route.Replica { return g.replicas[name].route }, prevGate,
		o.Registry, o.Now)
	if err != nil {
		return fmt.Errorf("layer0: %w", err)
	}
	g.pipe, err = pipeline.New(pipeline.Config{
		Keys:   keys,
		Limits: lim,
		Sizes: limit.Sizes{MaxBodyBytes: cfg.Server.MaxBodyBytes, MaxHeaderBytes: cfg.Limits.MaxHeaderBytes, MaxMessages: cfg.Limits.MaxMessages,
			MaxContentBytes: cfg.Limits.MaxContentBytes},
		Routes:    rt.table,
		Models:    rt.models,
		Engines:   rt.engines,
		Tokens:    tokenizer.Default(),
		Cache:     rcache,
		Offload:   offloadTargets(cfg.OffloadTargets),
		Prefix:    rt.prefix,
		Spend:     sp,
		Admission: gate,
	})
	if err != nil {
		return fmt.Errorf("layer0: %w", err)
	}
	g.snapshot()
	return nil
}

// responseCache is the response cache of the models that cache: in the application's store when
// it gave one, else in the shared store when store.cache is enabled, else in memory.
func (g *generation) responseCache(o *Options) *cache.Cache {
	cfg := g.cfg
	cc := cache.Config{Models: map[string]cache.Policy{}, Aliases: cfg.Aliases, Now: o.Now, Store: o.CacheStore}
	if sc := cfg.Store.Cache; sc.Enabled && g.parts.redis != nil && o.CacheStore == nil {
		cc.Shared = &cache.RedisConfig{Store: g.parts.redis.Value().conn, Timeout: sc.Timeout,
			MaxEntryBytes: sc.MaxEntryBytes, FillWait: sc.FillWait}
	}
	for id, mc := range cfg.Models {
		if mc.Cache.Enabled {
			cc.Models[id] = cache.Policy{TTL: mc.Cache.TTL, MaxBytes: mc.Cache.MaxBytes, Sampled: mc.Cache.CacheSampled,
				ShareAcrossKeys: mc.Cache.ShareAcrossKeys}
		}
	}
	return cache.New(cc)
}

// snapshot sets what the server serves the pipeline with.
func (g *generation) snapshot() {
	cfg := g.cfg
	sc := cfg.Server
	g.snap = server.NewSnapshot(g.pipe, server.Limits{ReadBodyTimeout: sc.ReadBodyTimeout,
		MinBodyRate: sc.MinBodyRate, WriteTimeout: sc.WriteTimeout, BodyBytesInFlight: sc.MaxBodyBytesInFlight})
	// Stored responses: in the shared store when asked and one is configured, else in this
	// process's memory, which outlives reloads.
	g.snap.Responses = g.parts.stored.Value()
	if cfg.Responses.Shared && g.parts.redis != nil {
		g.snap.Responses = conversation.NewRedis(g.parts.redis.Value().conn, cfg.Responses.TTL, cfg.Store.Cache.Timeout)
	}
	g.snap.CORS = server.NewCORS(cfg.CORS)
	g.snap.Playground = cfg.Playground
	g.snap.Hosts = server.NewHosts(cfg.Server.AllowedHosts)
	g.snap.Done = g.release
	if g.parts.tel != nil {
		kinds := make(map[string]string, len(cfg.Engines))
		for name, ec := range cfg.Engines {
			kinds[name] = ec.Kind
		}
		g.snap.Tracer = g.parts.tel.Value().Tracer(kinds)
	}
}
