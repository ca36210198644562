// Package layer0 is the engine that is another layer0: an edge proxy, a small
// node near users forwarding to a central one. It speaks the binary protocol, version 2 with text
// frames (every canonical field travels: tools, sampling, stop sequences, cache usage; no
// vocabulary is needed), and falls back to the Anthropic JSON/SSE API when the peer does not
// take binary: a peer that refuses the first binary request with a 4xx gets the same request in
// JSON, and if that works every later request goes as JSON. Once a binary response has come
// back, binary is known good and a 4xx is the request's own fault. Anthropic clients on a layer0
// peer take the JSON pass-through path (Forward), which needs no translation at all.
package layer0

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/engine/anthropic"
	"github.com/layer0ai/layer0/internal/engine/jsonmode"
	"github.com/layer0ai/layer0/internal/engine/passthrough"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/upstream"
	"github.com/layer0ai/layer0/internal/wire/binary"
)

// Protocols a peer may be spoken to in.
const (
	// ProtocolBinary is the binary protocol (version 2, text frames), with the JSON fallback.
	ProtocolBinary = "binary"
	// ProtocolJSON is the Anthropic JSON/SSE API only.
	ProtocolJSON = "json"
)

// Options are the parts of an Engine that do not come from the config file.
type Options struct {
	// Model, when set, is the model name sent to the peer instead of the request's.
	Model string
	// Protocol is ProtocolBinary (the default) or ProtocolJSON.
	Protocol string
	// Upstream configures the HTTP client (TLS roots, environment lookup).
	Upstream upstream.Options
}

// peer state: whether binary is still worth trying and whether it is known to work.
const (
	binaryUntried int32 = iota
	binaryWorks
	binaryRefused
)

// Engine is a layer0 peer. It is safe for concurrent use.
type Engine struct {
	json   *anthropic.Engine
	c      *upstream.Client
	model  string
	hdr    *upstream.Header
	mode   binary.Mode
	binary *atomic.Int32
}

// New returns the peer engine named name. The credential named by cfg.APIKeyEnv is read once and
// sent as a bearer token, which layer0 accepts for both protocols.
func New(name string, cfg config.Engine, opts Options) (*Engine, error) {
	// A peer over https:// speaks HTTP/3 when LAYER0_HTTP3 says so (auto: with HTTP/2 fallback).
	opts.Upstream.HTTP3FromEnv = true
	j, err := anthropic.New(name, cfg, anthropic.Options{Model: opts.Model, Bearer: true, Upstream: opts.Upstream})
	if err != nil {
		return nil, err
	}
	e := &Engine{json: j, c: j.Client(), model: opts.Model, binary: new(atomic.Int32),
		mode: binary.Mode{Version: binary.V2, Text: true}}
	switch opts.Protocol {
	case "", ProtocolBinary:
	case ProtocolJSON:
		e.binary.Store(binaryRefused)
	default:
		return nil, errors.New("layer0: engine " + name + ": unknown protocol " + opts.Protocol + " (want binary or json)")
	}
	if e.hdr, err = upstream.NewHeader(http.Header{
		"Content-Type": {e.mode.ContentType()},
		"Accept":       {binary.MediaType},
	}); err != nil {
		return nil, err
	}
	return e, nil
}

// Client is the peer's HTTP client.
func (e *Engine) Client() *upstream.Client { return e.c }

// Close implements engine.Engine: it closes the connections to the peer, which both protocols
// share. Engines made by WithModel share them, and are closed with it.
func (e *Engine) Close() error {
	e.c.Close()
	return nil
}

// Simulated reports whether the peer said its last answer came from a simulator.
func (e *Engine) Simulated() bool { return e.c.Simulated() }

// Binary reports whether requests currently go over the binary protocol.
func (e *Engine) Binary() bool { return e.binary.Load() != binaryRefused }

// Format implements passthrough.Forwarder: the pass-through path is the Anthropic JSON API.
func (e *Engine) Format() llm.Format { return llm.FormatAnthropic }

// Forward implements passthrough.Forwarder.
func (e *Engine) Forward(ctx context.Context, p *passthrough.Pass, w passthrough.Writer) (passthrough.Result, error) {
	return e.json.Forward(ctx, p, w)
}

// Generate implements engine.Engine.
func (e *Engine) Generate(ctx context.Context, req *llm.Request, sink llm.Sink) error {
	state := e.binary.Load()
	if state == binaryRefused || req.HasSystemMessages() {
		// The binary protocol has no system message inside the conversation: such a request
		// goes as JSON, which keeps it in place.
		return e.json.Generate(ctx, req, sink)
	}
	err := e.generateBinary(ctx, req, sink)
	var ae *apierr.Error
	if state == binaryUntried && errors.As(err, &ae) && ae.Cause != nil && errors.Is(ae.Cause, errRefused) {
		jerr := e.json.Generate(ctx, req, sink)
		if jerr == nil {
			e.binary.Store(binaryRefused)
		}
		return jerr
	}
	if err == nil {
		e.binary.CompareAndSwap(binaryUntried, binaryWorks)
	}
	return err
}

// errRefused marks a 4xx answer to a binary request, before any event.
var errRefused = errors.New("layer0: peer refused a binary request")

func (e *Engine) generateBinary(ctx context.Context, req *llm.Request, sink llm.Sink) error {
	up, prefilled := jsonmode.Prepare(req) // the binary protocol has no response_format
	if prefilled {
		sink = jsonmode.NewSink(sink)
	}
	up.Stream = true
	if e.model != "" {
		up.Model = e.model
	}
	if up.MaxTokens <= 0 {
		up.MaxTokens = anthropic.DefaultMaxTokens
	}
	buf := e.c.Buffer()
	defer e.c.PutBuffer(buf)
	body, err := binary.AppendRequest(*buf, &up, e.mode)
	if err != nil {
		return apierr.Wrap(apierr.InvalidRequest, err, "request cannot be sent to the peer")
	}
	*buf = body
	resp, err := e.c.Do(ctx, &upstream.Request{Path: anthropic.Path, Header: e.hdr, Body: body, Stream: true, DecodeError: decodeError})
	if err != nil {
		return err
	}
	defer resp.Close()
	if ct := resp.ContentType; !binary.IsMediaType(ct) {
		// A peer that ignored the content type and answered in another format.
		return apierr.Wrap(apierr.BadGateway, errRefused, "peer answered %q to a binary request", ct)
	}
	return resp.Err(binary.ReadStream(resp.Body, e.mode, nil, sink))
}

// decodeError reads a peer's error answer (Anthropic JSON, which layer0 writes for every
// format's HTTP errors except the binary INVALID_BINARY 400) and marks 4xx answers other than
// 429 as possibly a refusal of the protocol itself.
func decodeError(status int, body []byte) *apierr.Error {
	e := anthropic.DecodeError(status, body)
	if status >= 400 && status < 500 && status != http.StatusTooManyRequests && !strings.Contains(e.Message, "credentials") {
		e.Cause = errors.Join(errRefused, e.Cause)
	}
	return e
}
