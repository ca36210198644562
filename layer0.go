// Package layer0 is the embeddable gateway: build one from a configuration with New, then serve
// it over HTTP (it is an http.Handler) or call it in-process with Do — the zero-hop path for a Go
// application that links layer0 instead of calling it over the network. The server and the CLI
// in cmd/layer0 are thin layers over this package.
package layer0

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"github.com/layer0ai/layer0/internal/accesslog"
	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/engine"
	"github.com/layer0ai/layer0/internal/engine/sim"
	"github.com/layer0ai/layer0/internal/ids"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/pipeline"
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/tokenizer"
)

// Re-exported canonical types, so an application can build requests and consume events.
type (
	// Config is the whole configuration; see docs/config.md.
	Config = config.Config
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
)

// DefaultConfig returns the embedded default: the sim engine serving the model "sim".
func DefaultConfig() *Config { return config.Default() }

// LoadConfig reads and validates a configuration file.
func LoadConfig(path string) (*Config, error) { return config.Load(path) }

// Option adjusts a Gateway.
type Option func(*options)

type options struct {
	logger    *slog.Logger
	accessLog *accesslog.Logger
}

// WithLogger sets the process logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithAccessLog sets the access log that receives one record per HTTP request (default: none).
func WithAccessLog(l *accesslog.Logger) Option { return func(o *options) { o.accessLog = l } }

// Gateway is a running layer0: the live pipeline and the HTTP server over it.
type Gateway struct {
	mu     sync.Mutex // serializes Reload
	cfg    *Config
	srv    *server.Server
	logger *slog.Logger
}

// New builds a gateway from cfg (DefaultConfig when nil).
func New(cfg *Config, opts ...Option) (*Gateway, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	if cfg == nil {
		cfg = DefaultConfig()
	}
	p, err := build(cfg)
	if err != nil {
		return nil, err
	}
	g := &Gateway{cfg: cfg, logger: o.logger}
	g.srv = server.New(p, server.Options{MaxBodyBytes: cfg.Server.MaxBodyBytes, AccessLog: o.accessLog, Logger: o.logger})
	return g, nil
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.srv.ServeHTTP(w, r) }

// Config returns the configuration in force.
func (g *Gateway) Config() *Config {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cfg
}

// Reload builds a pipeline from cfg and swaps it in atomically; requests in flight finish on the
// old one. On error the old configuration keeps serving.
func (g *Gateway) Reload(cfg *Config) error {
	p, err := build(cfg)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cfg = cfg
	g.srv.Swap(p, cfg.Server.MaxBodyBytes)
	return nil
}

// Do runs req through the pipeline in-process and pushes the response events into sink — no
// HTTP, no serialization. Use a *Collector as the sink for a complete Response. Errors are
// *Error.
func (g *Gateway) Do(ctx context.Context, req *Request, sink Sink) error {
	c := pipeline.Call{Request: req, Sink: &idSink{Sink: sink}}
	return g.srv.Pipeline().Serve(ctx, &c)
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

// build turns a configuration into a pipeline: one engine per configured engine, one model per
// configured model.
func build(cfg *Config) (*pipeline.Pipeline, error) {
	tok := tokenizer.Default()
	engines := make(map[string]engine.Engine, len(cfg.Engines))
	for name, ec := range cfg.Engines {
		e, err := newEngine(name, ec, tok)
		if err != nil {
			return nil, err
		}
		engines[name] = e
	}
	models := make([]*pipeline.Model, 0, len(cfg.Models))
	for id, mc := range cfg.Models {
		m := &pipeline.Model{ID: id, DisplayName: mc.DisplayName, Created: mc.Created,
			Upstream: mc.UpstreamModel, ContextWindow: mc.ContextWindow}
		for _, en := range mc.Engines {
			m.Replicas = append(m.Replicas, pipeline.Replica{Name: en, Engine: engines[en]})
		}
		models = append(models, m)
	}
	return pipeline.New(models, tok), nil
}

func newEngine(name string, ec config.Engine, tok *tokenizer.Codec) (engine.Engine, error) {
	switch ec.Kind {
	case config.KindSim:
		e, err := sim.New(ec.Sim, tok)
		if err != nil {
			return nil, fmt.Errorf("layer0: engine %s: %w", name, err)
		}
		return e, nil
	}
	return newHTTPEngine(name, ec)
}
