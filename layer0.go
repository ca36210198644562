// Package layer0 is the embeddable gateway: build one from a configuration with New, then serve
// it over HTTP (it is an http.Handler) or call it in-process with Do — the zero-hop path for a Go
// application that links layer0 instead of calling it over the network. The server and the CLI
// in cmd/layer0 are thin layers over this package.
package layer0

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/layer0ai/layer0/internal/accesslog"
	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/engine"
	"github.com/layer0ai/layer0/internal/engine/sim"
	"github.com/layer0ai/layer0/internal/ids"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/metrics"
	"github.com/layer0ai/layer0/internal/pipeline"
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/tokenizer"
	"github.com/layer0ai/layer0/internal/trace"
)

// Re-exported canonical types, so an application can build requests and consume events.
type (
	// Request is the canonical request every client format decodes into.
	Request = llm.Request
	// Message is one turn of a conversation.
	Message = llm.Message
	// Block is one piece of message content.
	Block = llm.Block
	// Event is one step of a response stream.
	Event = llm.Event
	// Sink receives a response stream.
	Sink = llm.Sink
	// Collector is a Sink that assembles a complete Response.
	Collector = llm.Collector
	// Response is a complete answer.
	Response = llm.Response
	// Error is the error type every failure is reported as.
	Error = apierr.Error
	// Role is the author of a message: RoleUser, RoleAssistant or RoleSystem.
	Role = llm.Role
	// BlockType says which fields of a Block are meaningful.
	BlockType = llm.BlockType
	// Tool is a function the model may call.
	Tool = llm.Tool
	// ToolChoice constrains tool use.
	ToolChoice = llm.ToolChoice
	// ToolChoiceType says how the model must use the tools.
	ToolChoiceType = llm.ToolChoiceType
	// Format is the wire format a request arrived in or an engine speaks.
	Format = llm.Format
	// EventKind says which fields of an Event are meaningful.
	EventKind = llm.EventKind
	// StopReason says why generation ended.
	StopReason = llm.StopReason
	// Usage counts tokens.
	Usage = llm.Usage
)

// TextMessage is a turn of role holding one text block:
// layer0.TextMessage(layer0.RoleUser, "Hello").
func TextMessage(role Role, text string) Message { return llm.TextMessage(role, text) }

// Roles of a conversation. The system prompt is Request.System; RoleSystem is a system message
// inside the conversation, kept at its place.
const (
	RoleUser      = llm.RoleUser
	RoleAssistant = llm.RoleAssistant
	RoleSystem    = llm.RoleSystem
)

// Content block types.
const (
	BlockText       = llm.BlockText
	BlockImage      = llm.BlockImage
	BlockToolUse    = llm.BlockToolUse
	BlockToolResult = llm.BlockToolResult
)

// Event kinds, in the order a response sends them: EventStart, then for each content block
// EventBlockStart, EventTextDelta or EventToolDelta…, EventBlockStop; then EventStop.
const (
	EventStart      = llm.EventStart
	EventBlockStart = llm.EventBlockStart
	EventTextDelta  = llm.EventTextDelta
	EventToolDelta  = llm.EventToolDelta
	EventBlockStop  = llm.EventBlockStop
	EventStop       = llm.EventStop
)

// Stop reasons.
const (
	StopEndTurn   = llm.StopEndTurn
	StopMaxTokens = llm.StopMaxTokens
	StopSequence  = llm.StopSequence
	StopToolUse   = llm.StopToolUse
	StopRefusal   = llm.StopRefusal
)

// Tool choice types; the zero value is ToolAuto.
const (
	ToolAuto  = llm.ToolAuto
	ToolAny   = llm.ToolAny
	ToolNamed = llm.ToolNamed
	ToolNone  = llm.ToolNone
)

// Wire formats. A request built in-process keeps the zero value, FormatAnthropic, whose rules
// (Request.Validate) it must meet.
const (
	FormatAnthropic = llm.FormatAnthropic
	FormatOpenAI    = llm.FormatOpenAI
	FormatBinary    = llm.FormatBinary
)

// DefaultConfig returns the embedded default: the sim engine serving the model "sim".
func DefaultConfig() *Config { return config.Default() }

// LoadConfig reads and validates a configuration file. The engine kinds registered by opts
// (WithEngine) are accepted beside the built-in ones; other options are ignored here.
func LoadConfig(path string, opts ...Option) (*Config, error) {
	return config.Load(path, apply(opts).kinds()...)
}

// Option adjusts a Gateway.
type Option func(*options)

type options struct {
	logger    *slog.Logger
	accessLog io.Writer
	registry  *prometheus.Registry
	now       func() time.Time
	engines   map[string]EngineFactory // an application's engine kinds, by kind
}

func apply(opts []Option) *options {
	o := &options{}
	for _, f := range opts {
		f(o)
	}
	return o
}

// kinds returns the engine kinds registered with WithEngine.
func (o *options) kinds() []string {
	return sortedNames(o.engines)
}

// WithLogger sets the process logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithAccessLog writes the access log to w: one JSON line per HTTP request, written in batches
// by a goroutine of its own, so that a slow w delays no request (records that do not fit its
// queue are dropped and counted in layer0_access_log_dropped_total). Gateway.Close writes what
// is queued. Default: no access log.
func WithAccessLog(w io.Writer) Option { return func(o *options) { o.accessLog = w } }

// Backend is what an engine is to the gateway: Generate turns a canonical request into a
// stream of events pushed into a sink, and Close releases what the engine holds once the
// gateway no longer routes to it. See WithEngine.
type Backend = engine.Engine

// TokenCounter is implemented by a Backend that counts input tokens in its own tokenizer (for
// count_tokens and the context-window check); without it the gateway's tokenizer counts.
type TokenCounter = engine.Counter

// EngineFactory builds the engine named name from its configuration (with the defaults filled
// in). It is called by New, and by Reload for each engine whose configuration changed; an
// error refuses the configuration.
type EngineFactory func(name string, cfg Engine) (Backend, error)

// WithEngine registers an application's own engine kind: an engine whose configuration has
// Kind kind is built by factory. The configuration then accepts the kind (pass the same option
// to LoadConfig for a file naming it). Built-in kinds cannot be replaced.
func WithEngine(kind string, factory EngineFactory) Option {
	return func(o *options) {
		if o.engines == nil {
			o.engines = map[string]EngineFactory{}
		}
		o.engines[kind] = factory
	}
}

// WithMetrics sets the Prometheus registry the gateway's metrics are registered with and GET
// /metrics serves (default: a new registry with the Go runtime and process collectors).
func WithMetrics(reg *prometheus.Registry) Option { return func(o *options) { o.registry = reg } }

// WithClock sets the clock of the rate limits and of the replicas' ejection, breaker and retry
// budget (default time.Now), so tests can move time instead of waiting for it.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// Gateway is a running layer0: the live pipeline, the HTTP server over it, and the background
// loop that reads engines' load and health. Close stops the loop.
type Gateway struct {
	mu      sync.Mutex // serializes Reload and Close
	closed  bool       // set by Close; under mu
	gen     atomic.Pointer[generation]
	srv     *server.Server
	logger  *slog.Logger
	opts    options
	metrics *metrics.Metrics
	// listener counts the refusals of the listeners Listen opens.
	listener *metrics.Listener
	access   *accesslog.Logger // nil without WithAccessLog
	traces   *trace.Ring       // nil with debug.requests 0; sized at New only
	ctx      context.Context   // the background loop's; canceled by Close
	cancel   context.CancelFunc
	done     chan struct{} // closed when the loop has ended
}

// New builds a gateway from cfg (DefaultConfig when nil). With no API keys configured it serves
// without auth, and refuses to unless cfg.Server.Addr is a loopback address.
func New(cfg *Config, opts ...Option) (*Gateway, error) {
	o := apply(opts)
	for kind, f := range o.engines {
		switch {
		case kind == "" || f == nil:
			return nil, fmt.Errorf("layer0: WithEngine(%q): a kind and a factory are required", kind)
		case builtIn(kind):
			return nil, fmt.Errorf("layer0: WithEngine(%q): the kind is built in", kind)
		}
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	if o.now == nil {
		o.now = time.Now
	}
	if o.registry == nil {
		o.registry = prometheus.NewRegistry()
		o.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if cfg == nil {
		cfg = DefaultConfig()
	}
	gen, err := build(cfg, nil, o)
	if err != nil {
		return nil, err
	}
	g := &Gateway{logger: o.logger, opts: *o, done: make(chan struct{})}
	g.gen.Store(gen)
	if g.metrics, err = metrics.New(o.registry); err != nil {
		return nil, err
	}
	if err := g.metrics.WatchEngines(g.engineStatus); err != nil {
		return nil, fmt.Errorf("layer0: %w", err)
	}
	if o.accessLog != nil {
		format := accesslog.JSON
		if cfg.Log.AccessLog.Format == config.AccessText {
			format = accesslog.Text
		}
		g.access = accesslog.New(o.accessLog, 0, format)
		if err := g.metrics.WatchAccessLog(g.access.Dropped, g.access.Written); err != nil {
			g.access.Close()
			return nil, fmt.Errorf("layer0: %w", err)
		}
	}
	g.traces = trace.New(cfg.Debug.Requests)
	g.srv = server.New(g.snapshot, server.Options{AccessLog: g.access,
		Logger: o.logger, Metrics: g.metrics, EngineLoad: g.engineLoad, AdminOnly: cfg.Server.AdminAddr != "",
		Traces: g.traces, Ready: g.unready, Config: g.redactedConfig, LogScrapes: cfg.Log.AccessLog.Scrapes})
	if g.listener, err = g.metrics.WatchListener(g.srv.BodyBytesInFlight); err != nil {
		return nil, fmt.Errorf("layer0: %w", err)
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	go g.run()
	return g, nil
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.srv.ServeHTTP(w, r) }

// Config returns the configuration in force.
func (g *Gateway) Config() *Config { return g.gen.Load().cfg }

// Authless reports whether the configuration in force has no API keys, so that every caller is
// served without auth (which New allows only on a loopback address).
func (g *Gateway) Authless() bool { return len(g.gen.Load().cfg.Keys) == 0 }

// Reload builds a pipeline from cfg and swaps it in atomically; requests in flight finish on the
// old one. Engines whose configuration is unchanged keep their state (connections, KV cache,
// ejection, breaker), and rate-limit counters carry over for every key and limit that is
// unchanged. On error the old configuration keeps serving.
func (g *Gateway) Reload(cfg *Config) error {
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
	old.retire() // its engines not carried over close once its requests end
	if cfg.Debug.Requests != g.traces.Len() {
		g.logger.Warn("config reloaded, but debug.requests applies only after a restart",
			"kept", g.traces.Len(), "configured", cfg.Debug.Requests)
	}
	return nil
}

// acquire returns the live generation for one use — a request, a background tick — which
// must end with its release. A generation retired between the load and the count is passed
// over for its successor, so that a retired generation gains no new user once it may have
// closed its engines; after Close the last generation keeps serving (its HTTP engines refuse).
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

// Listen opens a TCP listener on addr for the gateway, capped at the configuration's
// server.max_connections (lowered to fit the process's file descriptor limit): a connection
// over the cap is answered 503 and closed, counted in layer0_connections_refused_total and
// logged at most once a second. Connections that have not sent a request yet have their own
// share of the cap, per-source cap and timeout (server.max_new_connections,
// server.max_new_connections_per_source, server.new_connection_timeout).
func (g *Gateway) Listen(addr string) (net.Listener, error) {
	s := g.Config().Server
	return server.Listen(addr, server.ConnLimit{Max: s.MaxConnections, Refused: g.listener.Refused, Logger: g.logger,
		MaxNew: min(s.MaxNewConnections, s.MaxConnections), MaxNewPerSource: max(s.MaxNewConnectionsPerSource, 0), FitFDs: true,
		NewTimeout: s.NewConnectionTimeout, MaxQUICHandshakes: s.MaxQUICHandshakes})
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

// AdminHandler serves the operator's endpoints (/metrics, /metrics/engines/NAME, /healthz,
// /readyz, /config with secrets redacted, net/http/pprof's profiles under /debug/pprof/, and the
// decision traces at /debug/requests when debug.requests is set), for server.admin_addr. With an admin address configured, the gateway's own handler
// no longer serves the metrics.
func (g *Gateway) AdminHandler() http.Handler { return g.srv.Admin() }

// Close stops the background loop (utilisation and health checks), writes the queued access
// log records, exports the queued OpenTelemetry spans (within telemetry.otlp.timeout) and stops
// the exporter, disconnects from a shared rate-limit store (store.kind redis, whose concurrency
// slots still held then expire after store.lease_ttl), and closes the engines — their idle
// connections and probes — once the requests in flight have ended; it does not wait for them
// (their access log records are lost). Stop serving first (http.Server.Shutdown): requests that
// arrive after Close are served by the last configuration, but its HTTP engines refuse them
// (503), and the limits fall back as store.on_error says. A closed gateway cannot be reloaded;
// Close is safe to call more than once.
func (g *Gateway) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	g.cancel()
	<-g.done
	g.gen.Load().closeStore(nil, 0)
	if t := g.gen.Load().tel; t != nil {
		// The spans queued so far are exported now, within the export timeout.
		ctx, cancel := context.WithTimeout(context.Background(), t.Config().OTLP.Timeout)
		if err := t.Shutdown(ctx); err != nil {
			g.logger.Warn("flushing the telemetry spans on close", "err", err)
		}
		cancel()
	}
	g.gen.Load().retire()
	if g.access != nil {
		g.access.Close()
	}
	return nil
}

// Do runs req through the pipeline in-process and pushes the response events into sink — no
// HTTP, no serialization. Use a *Collector as the sink for a complete Response. Errors are
// *Error. req is checked first by the rules every HTTP front applies (Request.Validate): an
// invalid or nil request, or a nil sink, is a 400 invalid_request_error naming the field, and
// nothing reaches the sink. The application is the caller: in-process calls are not
// authenticated, and the global limits and those of the key name "" apply. They are not written
// to the metrics, the access log or the decision traces, which describe the HTTP side: an
// application measures its own calls.
func (g *Gateway) Do(ctx context.Context, req *Request, sink Sink) error {
	if err := req.Validate(); err != nil {
		return err
	}
	col, isCol := sink.(*Collector)
	if sink == nil || isCol && col == nil {
		return apierr.New(apierr.InvalidRequest, "sink is missing (nil)")
	}
	c := pipeline.Call{Request: req, Sink: &idSink{Sink: sink}, Key: pipeline.Anonymous()}
	if isCol {
		// Passed as itself, the pipeline recognises a collector: nothing of it reaches anyone
		// before Do returns, so any failure can still move to another replica or model.
		c.Sink = col
	}
	gen := g.acquire()
	err := gen.pipe.Serve(ctx, &c)
	gen.release()
	if col != nil && err == nil && col.Response.ID == "" {
		col.Response.ID = ids.Message()
	}
	return err
}

// idSink gives in-process responses a message id, as the HTTP encoders do.
type idSink struct {
	Sink
}

func (s *idSink) Send(ev *Event) error {
	if ev.Kind == llm.EventStart && ev.ID == "" {
		ev.ID = ids.Message()
	}
	return s.Sink.Send(ev)
}

// builtIn reports whether kind is one of the engine kinds layer0 builds itself.
func builtIn(kind string) bool {
	switch kind {
	case config.KindSim, config.KindOpenAI, config.KindAnthropic, config.KindLayer0:
		return true
	}
	return false
}

func newEngine(name string, ec config.Engine, tok *tokenizer.Codec, o *options) (engine.Engine, error) {
	if f := o.engines[ec.Kind]; f != nil {
		e, err := f(name, ec)
		if err != nil {
			return nil, fmt.Errorf("layer0: engine %s: %w", name, err)
		}
		if e == nil {
			return nil, fmt.Errorf("layer0: engine %s: the factory of kind %q returned no engine", name, ec.Kind)
		}
		return e, nil
	}
	switch ec.Kind {
	case config.KindSim:
		e, err := sim.New(ec.Sim, tok)
		if err != nil {
			return nil, fmt.Errorf("layer0: engine %s: %w", name, err)
		}
		return e, nil
	}
	return newHTTPEngine(name, ec, o.logger)
}

// BodyBytesInFlight returns the memory request bodies hold now, in bytes (the
// layer0_body_bytes_in_flight gauge), against server.max_body_bytes_in_flight.
func (g *Gateway) BodyBytesInFlight() int64 { return g.srv.BodyBytesInFlight() }
