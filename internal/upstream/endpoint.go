package upstream

import (
	"context"
	"io"
	"net/http"
	"strings"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/llm"
)

// Endpoint is what an HTTP engine sends every request with: the client for the engine (its
// credential read once), the request path under the engine's URL, the fixed request headers and
// the model name. The engines of the JSON APIs embed it; copies share the client, and closing
// one closes them all.
type Endpoint struct {
	// C is the engine's client.
	C *Client
	// Path is the API's path: apiPath ("/v1/…"), or its tail when the URL already ends in /v1.
	Path string
	// Header holds the fixed request headers.
	Header *Header
	// Model, when set, is the model name sent instead of the request's (the pipeline already
	// sets the request's model to the configured upstream_model).
	Model string
}

// Simulated reports whether the engine said its last answer came from a simulator (another
// layer0 serving its sim engine).
func (e *Endpoint) Simulated() bool { return e.C.Simulated() }

// NewEndpoint returns the endpoint of the API at apiPath of the engine named name, sending hdr
// with every request.
func NewEndpoint(name string, cfg config.Engine, o Options, apiPath string, hdr http.Header) (Endpoint, error) {
	c, err := New(name, cfg, o)
	if err != nil {
		return Endpoint{}, err
	}
	h, err := NewHeader(hdr)
	if err != nil {
		return Endpoint{}, err
	}
	if strings.HasSuffix(strings.TrimRight(cfg.URL, "/"), "/v1") {
		apiPath = strings.TrimPrefix(apiPath, "/v1")
	}
	return Endpoint{C: c, Path: apiPath, Header: h}, nil
}

// Client is the engine's HTTP client (for its in-flight count and tests).
func (e *Endpoint) Client() *Client { return e.C }

// Close implements engine.Engine for the engines that embed the endpoint: it closes the
// connections to the engine (Client.Close).
func (e *Endpoint) Close() error {
	e.C.Close()
	return nil
}

// Codec is an API's wire format, as Generate speaks it.
type Codec struct {
	// AppendRequest appends the body for req: the engine's own copy, with Stream set and the
	// model replaced, which it may change further (a default max_tokens).
	AppendRequest func(dst []byte, req *llm.Request) []byte
	// DecodeError turns an error answer into the error reported.
	DecodeError func(status int, body []byte) *apierr.Error
	// ReadResponse reads a whole JSON answer into sink.
	ReadResponse func(body []byte, sink llm.Sink) error
	// ReadStream reads an SSE answer into sink.
	ReadStream func(r io.Reader, sink llm.Sink) error
}

// Generate sends req in codec's format, always streamed (so that the first-byte and idle
// timeouts mean the same for every call and tokens reach the client as they come), and reads
// the answer back into sink: SSE, or JSON from a server that answers JSON even to a streaming
// request (an old llama.cpp with a tool call).
func (e *Endpoint) Generate(ctx context.Context, req *llm.Request, sink llm.Sink, codec *Codec) error {
	up := *req
	up.Stream = true
	if e.Model != "" {
		up.Model = e.Model
	}
	buf := e.C.Buffer()
	defer e.C.PutBuffer(buf)
	*buf = codec.AppendRequest(*buf, &up)
	resp, err := e.C.Do(ctx, &Request{Path: e.Path, Header: e.Header, Body: *buf, Stream: true, DecodeError: codec.DecodeError})
	if err != nil {
		return err
	}
	defer resp.Close()
	if strings.HasPrefix(resp.ContentType, "application/json") {
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return resp.Err(err)
		}
		return resp.Err(codec.ReadResponse(body, sink))
	}
	return resp.Err(codec.ReadStream(resp.Reader(), sink))
}
