// Package openai is the engine for any OpenAI-compatible server (vLLM, SGLang, llama.cpp server,
// Ollama, TGI, the hosted API): Generate encodes the canonical request as a Chat Completions
// body, always streams from the engine (so the first-byte and idle timeouts mean the same for
// every call and tokens reach the client as they come) and reads the SSE answer back into
// events; Forward is the pass-through path for OpenAI clients, which sends the client's own
// bytes with the model name rewritten and streams the engine's bytes back while reading usage.
package openai

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/engine"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/upstream"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
	wire "github.com/layer0ai/layer0/internal/wire/openai"
	"github.com/layer0ai/layer0/internal/wire/sse"
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

// Format implements engine.Forwarder.
func (e *Engine) Format() llm.Format { return llm.FormatOpenAI }

// Generate implements engine.Engine.
func (e *Engine) Generate(ctx context.Context, req *llm.Request, sink llm.Sink) error {
	return e.Endpoint.Generate(ctx, req, sink, &codec)
}

// maxJSONBody bounds a non-streamed pass-through response.
const maxJSONBody = 64 << 20

var (
	done       = []byte("[DONE]")
	finishKey  = []byte(`finish_reason"`) // searched without its opening quote: see hasFinish
	usageKey   = []byte(`"usage"`)
	choicesKey = []byte(`choices"`)
	usageOpt   = []byte(`"stream_options":{"include_usage":true},`)
)

// Forward implements engine.Forwarder. The body is not decoded: one scan of its top level
// finds "model", "stream" and "stream_options", the model value is rewritten in place, and a
// streaming request that did not ask for usage gets stream_options.include_usage added so that
// usage can be read — the usage-only chunk this adds is then held back from the client.
// Chunks pass through byte for byte except for the value of their top-level "model", which
// becomes the client's model name whatever the engine reported (upstream.Renamer); an error
// chunk is not passed on but returned, so that the caller reports it in the client's format (or
// falls back).
func (e *Engine) Forward(ctx context.Context, p *engine.Pass, w engine.Writer) (engine.PassResult, error) {
	if p.Format == llm.FormatResponses {
		return e.forward(ctx, p, w, e.responses, false, (*prepared).copyResponses)
	}
	return e.forward(ctx, p, w, e.Path, true, (*prepared).copy)
}

// forward is the pass-through shared by both formats: it builds the engine's body from the
// client's (prepareBody, with usage), posts it to path and copies the answer to w with cp,
// the pooled buffers lent to it for the call.
func (e *Engine) forward(ctx context.Context, p *engine.Pass, w engine.Writer, path string, usage bool,
	cp func(*prepared, io.Reader, *upstream.Out) (engine.PassResult, error)) (engine.PassResult, error) {
	var res engine.PassResult
	buf := e.C.Buffer()
	defer e.C.PutBuffer(buf)
	pr, err := prepareBody(*buf, p, usage)
	if err != nil {
		return res, err
	}
	*buf = pr.body
	resp, err := e.C.Do(ctx, &upstream.Request{Path: path, Header: e.Header, Body: pr.body, Stream: pr.stream, DecodeError: wire.DecodeError})
	if err != nil {
		return res, err
	}
	defer resp.Close()
	held, rb := e.C.Buffer(), e.C.Buffer()
	defer e.C.PutBuffer(held)
	defer e.C.PutBuffer(rb)
	out := &upstream.Out{W: w, ContentType: resp.ContentType, Held: *held}
	pr.read = *rb
	res, err = cp(&pr, resp.Reader(), out)
	*rb = pr.read
	return res, resp.Err(err)
}

// prepared is a pass-through request ready to send.
type prepared struct {
	body   []byte
	stream bool
	inject bool             // stream_options was added: hold back the usage-only chunk
	rn     upstream.Renamer // gives the answer the client's model name
	read   []byte           // a pooled buffer for a non-streamed answer
}

// prepare builds the engine's Chat Completions body from the client's in dst.
func prepare(dst []byte, p *engine.Pass) (prepared, error) { return prepareBody(dst, p, true) }

// prepareBody builds the engine's body from the client's in dst: the model rewritten and, when
// usage is asked for (Chat Completions, which reports it in a stream only when asked), a
// streaming request's stream_options.include_usage added.
func prepareBody(dst []byte, p *engine.Pass, usage bool) (prepared, error) {
	var pr prepared
	var ms, me int
	hasModel, hasOpts := false, false
	err := jsontext.Scan(p.Body, func(k []byte, esc bool, vs, ve int) {
		switch {
		case jsontext.KeyIs(k, esc, "model"):
			hasModel, ms, me = true, vs, ve
		case jsontext.KeyIs(k, esc, "stream"):
			pr.stream = string(p.Body[vs:ve]) == "true"
		case jsontext.KeyIs(k, esc, "stream_options"):
			hasOpts = true
		}
	})
	if err != nil || !hasModel {
		return pr, apierr.Invalid("model", "the request body must be a JSON object with a model")
	}
	pr.inject = usage && pr.stream && !hasOpts
	open := bytes.IndexByte(p.Body, '{') + 1
	b := append(dst, p.Body[:open]...)
	if pr.inject {
		b = append(b, usageOpt...)
	}
	if p.Model != "" {
		b = append(b, p.Body[open:ms]...)
		b = jsontext.AppendString(b, p.Model)
		b = append(b, p.Body[me:]...)
	} else {
		b = append(b, p.Body[open:]...)
	}
	pr.body = b
	pr.rn = upstream.NewRenamer(p.ClientModel)
	return pr, nil
}

// copy streams the engine's answer r to out, reading usage on the way. The chunks before the
// first content (the role chunk) are held in out, so that an error chunk right after them
// leaves the client untouched and the caller can still fall back.
func (pr *prepared) copy(r io.Reader, out *upstream.Out) (res engine.PassResult, err error) {
	defer func() { res.Bytes = out.N }()
	if err := upstream.CheckContentType(out.ContentType, pr.stream); err != nil {
		return res, err
	}
	if !upstream.IsSSE(out.ContentType) {
		body, err := pr.readJSON(r)
		if err != nil {
			return res, err
		}
		// One scan of the top level finds the model, the usage, the choices and an error.
		f := scanAnswer(body)
		if f.isErr {
			if ae := wire.StreamError(body); ae != nil {
				// An error object with a 200: nothing was written, the caller may fall back.
				return res, ae
			}
		}
		if pr.stream {
			return res, upstream.StreamAnsweredJSON()
		}
		// A 200 that is no completion ({}, an object without choices) or one that never says
		// why it ended (cut short) is the engine's failure, not an answer.
		if f.cs < 0 || body[f.cs] != '[' || empty(body[f.cs:f.ce]) {
			return res, upstream.Malformed("an answer without choices", "")
		}
		if !hasFinish(body[f.cs:f.ce]) {
			return res, upstream.Malformed("an answer without a finish_reason", "")
		}
		if f.us >= 0 {
			res.Usage, _ = wire.ParseUsage(body[f.us:f.ue])
		}
		if err := pr.rn.WriteJSON(out, body, f.ms, f.me); err != nil {
			return res, err
		}
		return res, out.Flush()
	}
	res.Stream = true
	er := sse.NewReader(r)
	finished := false
	for {
		raw, name, data, rerr := er.Next()
		if err := streamErr(rerr); err == io.EOF {
			if len(bytes.TrimSpace(raw)) > 0 || !finished {
				return res, errTruncated()
			}
			return res, out.Release() // the caller ends the response (engine.Forwarder)
		} else if err != nil {
			return res, err
		}
		if len(data) == 0 && len(name) == 0 {
			// A comment (a keep-alive): passed on, without committing the attempt.
			if out.Started() || !out.Hold(raw) {
				if _, err := out.Write(raw); err != nil {
					return res, err
				}
				if err := flushIdle(er, out); err != nil {
					return res, err
				}
			}
			continue
		}
		if bytes.Equal(data, done) {
			if !finished {
				return res, errTruncated() // [DONE] without a finish_reason: the answer was cut
			}
			_, err := out.Write(raw)
			return res, err // the caller ends the response (engine.Forwarder)
		}
		// The stream's shape: every chunk is a JSON object, checked whole and UTF-8, with choices
		// (unless it is an error, or the usage-only chunk of an engine that leaves them out),
		// before and after the attempt commits: a broken chunk after the first byte ends the
		// stream with an error instead of reaching the client.
		if !jsontext.ValidObject(data) {
			return res, upstream.Malformed("a stream chunk that is not a JSON object", "")
		}
		if ae := wire.StreamError(data); ae != nil {
			return res, ae
		}
		if !bytes.Contains(data, choicesKey) && !bytes.Contains(data, usageKey) {
			return res, upstream.Malformed("a stream chunk without choices", "")
		}
		skip := false
		if !bytes.Contains(data, usageKey) {
			// most chunks: no usage to read
		} else if s, e, ok, _ := jsontext.Field(data, "usage"); ok && data[s] == '{' {
			res.Usage, _ = wire.ParseUsage(data[s:e])
			if pr.inject {
				cs, ce, ok, _ := jsontext.Field(data, "choices")
				skip = ok && string(data[cs:ce]) == "[]"
			}
		}
		finished = finished || hasFinish(data)
		if !skip {
			ev := pr.rn.Event(raw, data)
			if out.Started() || !prelude(data) || !out.Hold(ev) {
				if _, err := out.Write(ev); err != nil {
					return res, err
				}
			}
		}
		if err := flushIdle(er, out); err != nil {
			return res, err
		}
	}
}

// answerFields are the places of a non-streamed answer's top-level fields, -1 where absent,
// and whether it is an error object.
type answerFields struct {
	ms, me int // model
	us, ue int // usage
	cs, ce int // choices
	isErr  bool
}

// scanAnswer finds, in one scan of a non-streamed answer's top level, its model, usage and
// choices, and whether it holds an error.
func scanAnswer(body []byte) answerFields {
	f := answerFields{-1, -1, -1, -1, -1, -1, false}
	_ = jsontext.Scan(body, func(k []byte, esc bool, vs, ve int) {
		switch {
		case jsontext.KeyIs(k, esc, "model"):
			f.ms, f.me = vs, ve
		case jsontext.KeyIs(k, esc, "usage"):
			f.us, f.ue = vs, ve
		case jsontext.KeyIs(k, esc, "choices"):
			f.cs, f.ce = vs, ve
		case jsontext.KeyIs(k, esc, "error"):
			f.isErr = f.isErr || !empty(body[vs:ve])
		case jsontext.KeyIs(k, esc, "object"):
			f.isErr = f.isErr || string(body[vs:ve]) == `"error"`
		}
	})
	return f
}

// readJSON reads a non-streamed answer into pr.read and checks that it is one whole JSON
// object. Nothing was written yet: an answer cut short, or not JSON, fails the attempt here,
// and the caller may fall back.
func (pr *prepared) readJSON(r io.Reader) ([]byte, error) {
	body, err := upstream.ReadAll(pr.read[:0], r, maxJSONBody)
	pr.read = body
	if err != nil {
		return nil, err
	}
	if !jsontext.ValidObject(body) {
		return nil, upstream.Malformed("incomplete or invalid JSON", "")
	}
	return body, nil
}

// streamErr is the attempt's error for err, a read of the engine's event stream: nil for
// none, io.EOF for the stream's end, a malformed-answer error for a stream that is not SSE or
// an event beyond the size limit, else err itself.
func streamErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sse.ErrNotSSE):
		return upstream.Malformed("a stream that is not SSE", err.Error())
	case errors.Is(err, sse.ErrEventTooLarge):
		return upstream.Malformed("a stream event beyond the size limit", err.Error())
	case errors.Is(err, io.EOF):
		return io.EOF
	}
	return err
}

// flushIdle flushes out unless more of the engine's events are already buffered in er, so
// that a burst reaches the client in one write and a lone event at once.
func flushIdle(er *sse.Reader, out *upstream.Out) error {
	if er.Buffered() {
		return nil
	}
	return out.Flush()
}

// hasFinish reports whether a chunk holds a finish_reason that is a string (not null), whatever
// the engine's spacing; a search, not a scan, as for most chunks there is none. The keys it and
// the choices check search for lack their opening quote: bytes.Index looks for a needle's first
// byte first, and '"' is the most frequent byte of a chunk (with it hasFinish took 20% of
// BenchmarkPassThrough/forward, 6% without; a quote cannot end a key's name inside a JSON
// string, where it is escaped).
func hasFinish(data []byte) bool {
	for {
		i := bytes.Index(data, finishKey)
		if i < 0 {
			return false
		}
		data = data[i+len(finishKey):]
		j := 0
		for j < len(data) && (data[j] == ' ' || data[j] == '\t' || data[j] == '\n' || data[j] == '\r') {
			j++
		}
		if j < len(data) && data[j] == ':' {
			for j++; j < len(data) && (data[j] == ' ' || data[j] == '\t' || data[j] == '\n' || data[j] == '\r'); j++ {
			}
			if j < len(data) && data[j] == '"' {
				return true
			}
		}
	}
}

// errTruncated is the error for a stream that ended (or said [DONE]) before a finish_reason;
// a new one each time, as callers may set its fields.
func errTruncated() error {
	return apierr.Wrap(apierr.BadGateway, wire.ErrTruncated, "engine stream ended before the response was complete")
}

// prelude reports whether a chunk carries nothing for the client yet: it has choices, each
// with a delta that holds at most a role and empty values (content "" or null, tool_calls [] or
// null), and none with a finish_reason; and it has no usage. Anything else — or anything it
// cannot read — is content, which is never held.
func prelude(data []byte) bool {
	var cs, ce int
	choices, usage := false, false
	if jsontext.Scan(data, func(k []byte, esc bool, vs, ve int) {
		switch {
		case jsontext.KeyIs(k, esc, "choices"):
			choices, cs, ce = true, vs, ve
		case jsontext.KeyIs(k, esc, "usage"):
			usage = !empty(data[vs:ve])
		}
	}) != nil || !choices || usage || data[cs] != '[' {
		return false
	}
	n := 0
	ok := true
	err := jsontext.ScanArray(data[cs:ce], func(s, e int) {
		n++
		if !emptyChoice(data[cs+s : cs+e]) {
			ok = false
		}
	})
	return err == nil && n > 0 && ok
}

// emptyChoice reports whether one choice of a chunk is a delta without content or finish.
func emptyChoice(c []byte) bool {
	delta, ok := false, true
	err := jsontext.Scan(c, func(k []byte, esc bool, vs, ve int) {
		switch {
		case jsontext.KeyIs(k, esc, "delta"):
			delta = true
			d := c[vs:ve]
			if d[0] != '{' || jsontext.Scan(d, func(k []byte, esc bool, s, e int) {
				if !jsontext.KeyIs(k, esc, "role") && !empty(d[s:e]) {
					ok = false
				}
			}) != nil {
				ok = false
			}
		case jsontext.KeyIs(k, esc, "finish_reason"):
			if !empty(c[vs:ve]) {
				ok = false
			}
		}
	})
	return err == nil && delta && ok
}

// empty reports whether a JSON value is null, "", [] or {}.
func empty(v []byte) bool {
	switch string(v) {
	case "null", `""`, "[]", "{}":
		return true
	}
	if len(v) >= 2 && (v[0] == '[' || v[0] == '{') {
		return len(bytes.TrimSpace(v[1:len(v)-1])) == 0
	}
	return false
}
