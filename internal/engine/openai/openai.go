// Package openai is the engine for any OpenAI-compatible server (vLLM, SGLang, llama.cpp server,
// Ollama, TGI, the hosted API): Generate encodes the canonical request as a Chat Completions
// body, always streams from the engine (so the first-byte and idle timeouts mean the same for
// every call and tokens reach the client as they come) and reads the SSE answer back into
// events; Forward is the pass-through path for OpenAI clients, which sends the client's own
// bytes with the model name rewritten and streams the engine's bytes back while reading usage.
package openai

import (
	"context"
	"net/http"

	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/upstream"
	wire "github.com/layer0ai/layer0/internal/wire/openai"
)

// Path is the Chat Completions endpoint under the engine's URL. The URL is the server's root
// (http://host:8000), or its /v1 base when the URL already ends in /v1.
const Path = "/v1/chat/completions"

// Options are the parts of an Engine that do not come from the config file.
type Options struct {
	// Model, when set, is the model name sent to the engine instead of the request's (the
	// pipeline already sets the request's model to the configured upstream_model).
	Model string
	// Upstream configures the HTTP client (TLS roots, environment lookup).
	Upstream upstream.Options
}

// Engine is an OpenAI-compatible server. It is safe for concurrent use.
type Engine struct {
	upstream.Endpoint
	// responses is the Responses API's path when the engine serves it (config responses), else
	// "".
	responses string
}

// codec is the Chat Completions format, for Generate.
var codec = upstream.Codec{AppendRequest: wire.AppendRequest, DecodeError: wire.DecodeError,
	ReadResponse: wire.ReadResponse, ReadStream: wire.ReadStream}

// New returns the engine named name. The credential named by cfg.APIKeyEnv is read now, once,
// and sent as a bearer token.
func New(name string, cfg config.Engine, opts Options) (*Engine, error) {
	ep, err := upstream.NewEndpoint(name, cfg, opts.Upstream, Path, http.Header{
		"Content-Type": {"application/json"},
		"Accept":       {"text/event-stream, application/json"},
	})
	if err != nil {
		return nil, err
	}
	ep.Model = opts.Model
	e := &Engine{Endpoint: ep}
	if cfg.Responses {
		e.responses = responsesPath(ep.Path)
	}
	return e, nil
}

// Format implements passthrough.Forwarder.
func (e *Engine) Format() llm.Format { return llm.FormatOpenAI }

// Generate implements engine.Engine.
func (e *Engine) Generate(ctx context.Context, req *llm.Request, sink llm.Sink) error {
	return e.Endpoint.Generate(ctx, req, sink, &codec)
}
