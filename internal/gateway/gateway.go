// Package gateway is the running gateway behind the root package's Gateway: the generation —
// everything one configuration is served with —, its build from the configuration's
// components, the reload that swaps in the next one, the background loop that reads the
// engines' load and health, and the close. Each component of a generation is Shared with the
// generations around it whose configuration of it is unchanged, and cleaned up by the last one
// to let go of it.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/layer0ai/layer0/internal/accesslog"
	"github.com/layer0ai/layer0/internal/cache"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/engine"
	"github.com/layer0ai/layer0/internal/limit"
	"github.com/layer0ai/layer0/internal/metrics"
	"github.com/layer0ai/layer0/internal/route"
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/trace"
)

// EngineKind is an application's own engine kind: Build builds the engine named name from its
// configuration (with the defaults filled in, Options as decoded), and Validate, when not nil,
// checks that configuration beforehand (its error is reported as the engine's options').
type EngineKind struct {
	Build    func(name string, cfg config.Engine) (engine.Engine, error)
	Validate func(name string, cfg config.Engine) error
}

// Options are the settings of a Gateway that are not configuration; the zero value of each
// field takes its default in New.
type Options struct {
	// Logger is the process logger (default: discard).
	Logger *slog.Logger
	// AccessLog receives the access log; nil for none.
	AccessLog io.Writer
	// Registry is the Prometheus registry of the metrics (default: a new one with the Go
	// runtime and process collectors).
	Registry *prometheus.Registry
	// Now is the clock of the limits and the replicas' routing state (default time.Now).
	Now func() time.Time
	// Engines are an application's engine kinds, by kind.
	Engines map[string]EngineKind
	// Pickers are an application's replica pickers, by the name routing.picker gives them:
	// each builds the picker of one model (see pickers.named).
	Pickers map[string]func(model string) route.AppPicker
	// CacheStore, when set, keeps the response cache's answers for every model that caches,
	// instead of a memory store per model (and of store.cache's shared store).
	CacheStore cache.Store
	// LimitStore, when set, keeps the rate limits' counters instead of the memory store (or
	// store.kind redis's).
	LimitStore limit.Store
}

// Known returns the names an application registered (engine kinds, pickers), sorted, as the
// configuration's validation takes them.
func (o *Options) Known() config.Known {
	return config.Known{EngineKinds: sortedNames(o.Engines), Pickers: sortedNames(o.Pickers)}
}

// Gateway is a running gateway: the live generation, the HTTP server over it, and the
// background loop that reads engines' load and health. Close stops the loop.
type Gateway struct {
	mu      sync.Mutex // serializes Reload and Close
	closed  bool       // set by Close; under mu
	gen     atomic.Pointer[generation]
	srv     *server.Server
	logger  *slog.Logger
	opts    Options
	metrics *metrics.Metrics
	// listener counts the refusals of the listeners Listen opens.
	listener *metrics.Listener
	access   *accesslog.Logger // nil without an access log
	traces   *trace.Ring       // nil with debug.requests 0; sized at New only
	ctx      context.Context   // the background loop's; canceled by Close
	cancel   context.CancelFunc
	done     chan struct{} // closed when the loop has ended
}

// New builds a gateway from cfg (config.Default when nil) and starts its background loop.
func New(cfg *config.Config, o Options) (*Gateway, error) {
	for kind, k := range o.Engines {
		switch {
		case kind == "" || k.Build == nil:
			return nil, fmt.Errorf("layer0: WithEngine(%q): a kind and a factory are required", kind)
		case builtIn(kind):
			return nil, fmt.Errorf("layer0: WithEngine(%q): the kind is built in", kind)
		}
	}
	for name, f := range o.Pickers {
		switch name {
		case "", config.PickerP2C, config.PickerRoundRobin, config.PickerPrefix, config.PickerSticky:
			return nil, fmt.Errorf("layer0: WithPicker(%q): a name of its own is required (the built-in pickers cannot be replaced)", name)
		}
		if f == nil {
			return nil, fmt.Errorf("layer0: WithPicker(%q): a factory is required", name)
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
		o.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if cfg == nil {
		cfg = config.Default()
	}
	gen, err := build(cfg, nil, &o)
	if err != nil {
		return nil, err
	}
	g := &Gateway{logger: o.Logger, opts: o, done: make(chan struct{})}
	g.gen.Store(gen)
	if err := g.observe(cfg); err != nil {
		gen.retire()
		return nil, err
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	go g.run()
	return g, nil
}

// observe sets up the metrics, the access log, the decision traces and the HTTP server.
func (g *Gateway) observe(cfg *config.Config) error {
	var err error
	if g.metrics, err = metrics.New(g.opts.Registry); err != nil {
		return err
	}
	if err := g.metrics.WatchEngines(g.engineStatus); err != nil {
		return fmt.Errorf("layer0: %w", err)
	}
	if g.opts.AccessLog != nil {
		format := accesslog.JSON
		if cfg.Log.AccessLog.Format == config.AccessText {
			format = accesslog.Text
		}
		g.access = accesslog.New(g.opts.AccessLog, 0, format)
		if err := g.metrics.WatchAccessLog(g.access.Dropped, g.access.Written); err != nil {
			g.access.Close()
			return fmt.Errorf("layer0: %w", err)
		}
	}
	g.traces = trace.New(cfg.Debug.Requests)
	g.srv = server.New(g.snapshot, server.Options{AccessLog: g.access,
		Logger: g.logger, Metrics: g.metrics, EngineLoad: g.engineLoad, AdminOnly: cfg.Server.AdminAddr != "",
		Traces: g.traces, Ready: g.unready, Config: g.redactedConfig, LogScrapes: cfg.Log.AccessLog.Scrapes})
	if g.listener, err = g.metrics.WatchListener(g.srv.BodyBytesInFlight); err != nil {
		return fmt.Errorf("layer0: %w", err)
	}
	return nil
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.srv.ServeHTTP(w, r) }

// Config returns the configuration in force.
func (g *Gateway) Config() *config.Config { return g.gen.Load().cfg }

// Reload builds a generation from cfg and swaps it in atomically; requests in flight finish on
// the old one, whose components not carried over are cleaned up once they end. On error the old
// configuration keeps serving.
func (g *Gateway) Reload(cfg *config.Config) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return errors.New("layer0: reload of a closed gateway")
	}
	old := g.gen.Load()
	gen, err := build(cfg, old, &g.opts)
	if err != nil {
		return err
	}
	g.gen.Store(gen)
	old.retire()
	if cfg.Debug.Requests != g.traces.Len() {
		g.logger.Warn("config reloaded, but debug.requests applies only after a restart",
			"kept", g.traces.Len(), "configured", cfg.Debug.Requests)
	}
	return nil
}

// acquire returns the live generation for one use — a request, a background tick — which
// must end with its release. A generation retired between the load and the count is passed
// over for its successor, so that a retired generation gains no new user once it may have
// let go of its components; after Close the last generation keeps serving (its HTTP engines
// refuse).
func (g *Gateway) acquire() *generation {
	for {
		gen := g.gen.Load()
		gen.users.Add(1)
		if !gen.retired.Load() || g.gen.Load() == gen {
			return gen
		}
		gen.release()
	}
}

// snapshot is the live generation as the server serves it, read once per request: the server
// calls the snapshot's Done when the request ends.
func (g *Gateway) snapshot() *server.Snapshot { return &g.acquire().snap }

// Listen opens a TCP listener on addr for the gateway, capped at server.max_connections
// (lowered to fit the process's file descriptor limit).
func (g *Gateway) Listen(addr string) (net.Listener, error) {
	s := g.Config().Server
	return server.Listen(addr, server.ConnLimit{Max: s.MaxConnections, Refused: g.listener.Refused, Logger: g.logger,
		MaxNew: min(s.MaxNewConnections, s.MaxConnections), MaxNewPerSource: max(s.MaxNewConnectionsPerSource, 0), FitFDs: true,
		NewTimeout: s.NewConnectionTimeout, MaxQUICHandshakes: s.MaxQUICHandshakes})
}

// Serve serves the APIs on ln and the operator's endpoints on admin (when not nil) until ctx is
// done, as the configuration in force says (TLS, HTTP/3, the HTTP/1.1 server, the drain).
func (g *Gateway) Serve(ctx context.Context, ln, admin net.Listener, ready func(server.Serving)) error {
	cfg := g.Config()
	return server.Run(ctx, ln, admin, server.RunOptions{Handler: g, Admin: g.AdminHandler(),
		Listen: server.ListenOptions{ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout, IdleTimeout: cfg.Server.IdleTimeout,
			MaxHeaderBytes: cfg.Limits.MaxHeaderBytes, Logger: g.logger, HTTP1: cfg.Server.HTTP1},
		CertFile: cfg.Server.TLS.CertFile, KeyFile: cfg.Server.TLS.KeyFile, HTTP3: cfg.Server.HTTP3,
		Drain: cfg.Server.ShutdownTimeout, Ready: ready})
}

// unready says why the live configuration cannot serve now (for /readyz): empty when every
// required model has a replica that can take a request.
func (g *Gateway) unready() []string {
	gen := g.acquire()
	defer gen.release()
	return gen.unready()
}

// redactedConfig is the configuration in force as YAML with its secrets redacted (GET /config).
func (g *Gateway) redactedConfig() ([]byte, error) { return g.Config().MarshalRedacted() }

// AdminHandler serves the operator's endpoints.
func (g *Gateway) AdminHandler() http.Handler { return g.srv.Admin() }

// BodyBytesInFlight returns the memory request bodies hold now, in bytes.
func (g *Gateway) BodyBytesInFlight() int64 { return g.srv.BodyBytesInFlight() }

// Close stops the background loop, writes the queued access log records, exports the queued
// spans, and retires the live generation: its components are cleaned up once the requests in
// flight have ended. Close is safe to call more than once.
func (g *Gateway) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	g.cancel()
	<-g.done
	gen := g.gen.Load()
	if t := gen.parts.tel; t != nil {
		// The spans queued so far are exported now, within the export timeout.
		ctx, cancel := context.WithTimeout(context.Background(), t.Value().Config().OTLP.Timeout)
		if err := t.Value().Shutdown(ctx); err != nil {
			g.logger.Warn("flushing the telemetry spans on close", "err", err)
		}
		cancel()
	}
	gen.retire()
	if g.access != nil {
		g.access.Close()
	}
	return nil
}

// sortedNames returns m's keys in order.
func sortedNames[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
