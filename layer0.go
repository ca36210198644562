// Package layer0 is the embeddable gateway: build one from a configuration with New, then serve
// it over HTTP (it is an http.Handler) or call it in-process with Do — the zero-hop path for a Go
// application that links layer0 instead of calling it over the network. The server and the CLI
// in cmd/layer0 are thin layers over this package.
package layer0

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/engine"
	"github.com/layer0ai/layer0/internal/gateway"
	"github.com/layer0ai/layer0/internal/llm"
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

// LoadConfig reads and validates a configuration file. The engine kinds and pickers registered
// by opts (WithEngine, WithEngineKind, WithPicker) are accepted beside the built-in ones, and
// their engines' options checked by their Validate; other options are ignored here.
func LoadConfig(path string, opts ...Option) (*Config, error) {
	o := apply(opts)
	c, err := o.Known().Load(path)
	if err != nil {
		return nil, err
	}
	if err := o.Check(c); err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	return c, nil
}

// Option adjusts a Gateway.
type Option func(*options)

// options are a Gateway's settings beyond its configuration.
type options = gateway.Options

func apply(opts []Option) *options {
	o := &options{}
	for _, f := range opts {
		f(o)
	}
	return o
}

// WithLogger sets the process logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.Logger = l } }

// WithAccessLog writes the access log to w: one JSON line per HTTP request, written in batches
// by a goroutine of its own, so that a slow w delays no request (records that do not fit its
// queue are dropped and counted in layer0_access_log_dropped_total). Gateway.Close writes what
// is queued. Default: no access log.
func WithAccessLog(w io.Writer) Option { return func(o *options) { o.AccessLog = w } }

// Engine is what an engine is to the gateway: Generate turns a canonical request into a
// stream of events pushed into a sink, and Close releases what the engine holds once the
// gateway no longer routes to it. See WithEngine; its configuration is an EngineConfig.
type Engine = engine.Engine

// Backend is the former name of Engine.
//
// Deprecated: use Engine.
type Backend = Engine

// TokenCounter is implemented by an Engine that counts input tokens in its own tokenizer (for
// count_tokens and the context-window check); without it the gateway's tokenizer counts.
type TokenCounter = engine.Counter

// EngineFactory builds the engine named name from its configuration, with the defaults filled
// in and cfg.Options as the file gave them (YAML mappings as map[string]any, sequences as
// []any). It is called by New, and by Reload for each engine whose configuration changed; an
// error refuses the configuration. To decorate a built-in engine, build it with
// NewBuiltinEngine.
type EngineFactory func(name string, cfg EngineConfig) (Engine, error)

// EngineKind is an application's own engine kind: Build builds its engines, and Validate, when
// not nil, checks an engine's configuration (above all cfg.Options) before anything is built —
// by LoadConfig, New and Reload —, its error reported as a configuration error at
// engines.NAME.options.
type EngineKind struct {
	Build    EngineFactory
	Validate func(name string, cfg EngineConfig) error
}

// WithEngine registers an application's own engine kind: an engine whose configuration has
// Kind kind is built by factory, which checks its options itself (see WithEngineKind to have
// them checked when the configuration is loaded). The configuration then accepts the kind (pass
// the same option to LoadConfig for a file naming it). Built-in kinds cannot be replaced.
func WithEngine(kind string, factory EngineFactory) Option {
	return WithEngineKind(kind, EngineKind{Build: factory})
}

// WithEngineKind registers an application's own engine kind, as WithEngine does, with a
// validation of its configuration that LoadConfig runs too.
func WithEngineKind(kind string, k EngineKind) Option {
	return func(o *options) {
		if o.Engines == nil {
			o.Engines = map[string]gateway.EngineKind{}
		}
		gk := gateway.EngineKind{}
		if k.Build != nil {
			gk.Build = func(name string, cfg config.Engine) (engine.Engine, error) { return k.Build(name, cfg) }
		}
		if k.Validate != nil {
			gk.Validate = func(name string, cfg config.Engine) error { return k.Validate(name, cfg) }
		}
		o.Engines[kind] = gk
	}
}

// NewBuiltinEngine builds the engine name of a built-in kind (cfg.Kind is KindSim, KindOpenAI,
// KindAnthropic or KindLayer0, cfg.Options empty) as the gateway would, so that an
// application's factory can wrap it. Its error answers are logged to slog.Default in full.
func NewBuiltinEngine(name string, cfg EngineConfig) (Engine, error) {
	return gateway.NewBuiltin(name, cfg, slog.Default())
}

// WithMetrics sets the Prometheus registry the gateway's metrics are registered with and GET
// /metrics serves (default: a new registry with the Go runtime and process collectors).
func WithMetrics(reg *prometheus.Registry) Option { return func(o *options) { o.Registry = reg } }

// WithClock sets the clock of the rate limits and of the replicas' ejection, breaker and retry
// budget (default time.Now), so tests can move time instead of waiting for it.
func WithClock(now func() time.Time) Option { return func(o *options) { o.Now = now } }

// Gateway is a running layer0: the live pipeline, the HTTP server over it, and the background
// loop that reads engines' load and health. Close stops the loop.
type Gateway struct {
	g *gateway.Gateway
}

// New builds a gateway from cfg (DefaultConfig when nil). With no API keys configured it serves
// without auth, and refuses to unless cfg.Server.Addr is a loopback address.
func New(cfg *Config, opts ...Option) (*Gateway, error) {
	g, err := gateway.New(cfg, *apply(opts))
	if err != nil {
		return nil, err
	}
	return &Gateway{g: g}, nil
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.g.ServeHTTP(w, r) }

// Config returns the configuration in force.
func (g *Gateway) Config() *Config { return g.g.Config() }

// Authless reports whether the configuration in force has no API keys, so that every caller is
// served without auth (which New allows only on a loopback address).
func (g *Gateway) Authless() bool { return len(g.Config().Keys) == 0 }

// Reload builds a pipeline from cfg and swaps it in atomically; requests in flight finish on the
// old one. Engines whose configuration is unchanged keep their state (connections, KV cache,
// ejection, breaker), and rate-limit counters carry over for every key and limit that is
// unchanged. On error the old configuration keeps serving.
func (g *Gateway) Reload(cfg *Config) error { return g.g.Reload(cfg) }

// Listen opens a TCP listener on addr for the gateway, capped at the configuration's
// server.max_connections (lowered to fit the process's file descriptor limit): a connection
// over the cap is answered 503 and closed, counted in layer0_connections_refused_total and
// logged at most once a second. Connections that have not sent a request yet have their own
// share of the cap, per-source cap and timeout (server.max_new_connections,
// server.max_new_connections_per_source, server.new_connection_timeout).
func (g *Gateway) Listen(addr string) (net.Listener, error) { return g.g.Listen(addr) }

// AdminHandler serves the operator's endpoints (/metrics, /metrics/engines/NAME, /healthz,
// /readyz, /config with secrets redacted, net/http/pprof's profiles under /debug/pprof/, and the
// decision traces at /debug/requests when debug.requests is set), for server.admin_addr. With
// an admin address configured, the gateway's own handler no longer serves the metrics.
func (g *Gateway) AdminHandler() http.Handler { return g.g.AdminHandler() }

// Close stops the background loop (utilisation and health checks), writes the queued access
// log records, exports the queued OpenTelemetry spans (within telemetry.otlp.timeout) and stops
// the exporter, and — once the requests in flight have ended, without waiting for them (their
// access log records are lost) — disconnects from a shared store (store.kind redis) and closes
// the engines, their idle connections and probes. Stop serving first (http.Server.Shutdown):
// requests that arrive after Close are served by the last configuration, but its HTTP engines
// refuse them (503), and the limits fall back as store.on_error says. A closed gateway cannot be
// reloaded; Close is safe to call more than once.
func (g *Gateway) Close() error { return g.g.Close() }

// Do runs req through the pipeline in-process and pushes the response events into sink — no
// HTTP, no serialization. Use a *Collector as the sink for a complete Response. Errors are
// *Error. req is checked first by the rules every HTTP front applies (Request.Validate): an
// invalid or nil request, or a nil sink, is a 400 invalid_request_error naming the field, and
// nothing reaches the sink. The application is the caller: in-process calls are not
// authenticated, and the global limits and those of the key name "" apply. They are not written
// to the metrics, the access log or the decision traces, which describe the HTTP side: an
// application measures its own calls.
func (g *Gateway) Do(ctx context.Context, req *Request, sink Sink) error {
	return g.g.Do(ctx, req, sink)
}

// BodyBytesInFlight returns the memory request bodies hold now, in bytes (the
// layer0_body_bytes_in_flight gauge), against server.max_body_bytes_in_flight.
func (g *Gateway) BodyBytesInFlight() int64 { return g.g.BodyBytesInFlight() }
