package server

import (
	"net/http"
	"strings"
	"time"
	"unsafe"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/ids"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/pipeline"
	"github.com/layer0ai/layer0/internal/vocab"
	"github.com/layer0ai/layer0/internal/wire/anthropic"
	"github.com/layer0ai/layer0/internal/wire/binary"
	"github.com/layer0ai/layer0/internal/wire/openai"
)

// A front is one client format's side of the server, chosen once per request from its path and
// headers: how its request body decodes, and how an answer, a stream and an error are written in
// it. The message endpoints run one flow (serveMessage) whatever the format; a new client format
// is a new front. A response replayed from anywhere but an engine (a cache) is written through
// the same three writers.
type front struct {
	format llm.Format
	// decode reads a request body; it may note per-request options on x (OpenAI's
	// include_usage, the binary protocol's mode).
	decode func(x *exchange, body []byte) (*llm.Request, error)
	// alwaysStreams is set for a format whose every answer is a stream.
	alwaysStreams bool
	// passes is set when an engine of the same format may take the client's bytes as they are.
	passes bool
	// mayPass, when set, says whether this request may take the pass-through path (passes).
	mayPass func(x *exchange) bool
	// contentType is the media type of an answer (streamed or not).
	contentType func(x *exchange, stream bool) string
	// answer appends a complete answer, under the model name the client asked for.
	answer func(x *exchange, b []byte, r *llm.Response, model string) []byte
	// stream makes the stream's encoder, at its first event, writing to out.
	stream func(x *exchange, out *streamWriter, model string) (encoder, error)
	// error appends a complete error answer and returns its status.
	error func(b []byte, e *apierr.Error, requestID string) ([]byte, int)
	// served, when set, is called once a complete answer or a complete stream reached the
	// client (the Responses API stores it).
	served func(x *exchange)
}

// encoder is a stream's encoder in a client format: events in, bytes out, and the format's error
// event for a stream that fails after it began.
type encoder interface {
	llm.Sink
	errorWriter
}

// The fronts.
var (
	anthropicFront = &front{
		format: llm.FormatAnthropic,
		passes: true,
		decode: func(x *exchange, body []byte) (*llm.Request, error) {
			if binary.LooksBinary(body) {
				// A body in the binary format under another Content-Type (an HTTP library that
				// overwrote the header): the error names the Content-Type, not a JSON offset.
				_, err := binary.NegotiateVersion(x.r.Header)
				return nil, err
			}
			req, err := anthropic.DecodeRequestText(x.bodyText(body))
			if err == nil {
				req.Format = llm.FormatAnthropic
			}
			return req, err
		},
		contentType: jsonOrSSE,
		answer: func(x *exchange, b []byte, r *llm.Response, model string) []byte {
			r.Model = model
			return anthropic.AppendResponse(b, r, x.hv.keep(ids.AppendMessage(x.hv.room())))
		},
		stream: func(x *exchange, out *streamWriter, model string) (encoder, error) {
			x.ast = anthropicStart{StreamWriter: anthropic.NewStreamWriter(x.hv.keep(ids.AppendMessage(x.hv.room())), out, out.Flush), model: model}
			return &x.ast, nil
		},
		error: anthropicError,
	}
	openAIFront = &front{
		format: llm.FormatOpenAI,
		passes: true,
		decode: func(x *exchange, body []byte) (*llm.Request, error) {
			req, extra, err := openai.DecodeRequestText(x.bodyText(body))
			x.includeUsage = extra.IncludeUsage
			return req, err
		},
		contentType: jsonOrSSE,
		answer: func(x *exchange, b []byte, r *llm.Response, model string) []byte {
			r.Model = model
			return openai.AppendResponse(b, r, x.hv.keep(ids.AppendCompletion(x.hv.room())), time.Now().Unix())
		},
		stream: func(x *exchange, out *streamWriter, model string) (encoder, error) {
			sw := openai.NewStreamWriter(out)
			sw.ID, sw.Model, sw.Created, sw.IncludeUsage = x.hv.keep(ids.AppendCompletion(x.hv.room())), model, time.Now().Unix(), x.includeUsage
			return sw, nil
		},
		error: func(b []byte, e *apierr.Error, _ string) ([]byte, int) {
			return openai.AppendError(b, e), openai.Status(e)
		},
	}
	// binaryFront is the binary streaming protocol: always a stream of frames; an error before
	// the first byte is an HTTP error with the Anthropic JSON body.
	binaryFront = &front{
		format:        llm.FormatBinary,
		alwaysStreams: true,
		decode: func(x *exchange, body []byte) (*llm.Request, error) {
			req, mode, err := binary.DecodeRequest(body, x.r.Header)
			x.mode = mode
			return req, err
		},
		contentType: func(x *exchange, _ bool) string { return x.mode.ContentType() },
		stream: func(x *exchange, out *streamWriter, _ string) (encoder, error) {
			sw, err := binary.NewStreamWriter(out, out.Flush, x.mode, vocab.Default())
			if err != nil {
				return nil, err
			}
			sw.ID = x.hv.keep(ids.AppendMessage(x.hv.room()))
			return sw, nil
		},
		error: anthropicError,
	}
)

// bodyText is a request body as the fronts' JSON decoders read it: the decoded request's
// strings are substrings of it. With Options.DecodeInPlace it is the body's own pooled buffer,
// which the next request reuses once this one is finished, and no copy is made; otherwise it is
// a copy, which the request keeps for as long as any of its strings is used.
//
// In place, whatever keeps a string of a request past its end copies it: the decoders copy the
// model name (the spans export it after the request), the user and the name of an ignored field,
// and make their errors' messages anew; the cache copies its entries' events (an engine may
// answer with the request's own strings); the directives copy an offload target (the record's,
// in the access log and the traces); the Responses API's store encodes a stored response, its
// conversation and its object, as it is put. The rest of the record holds configuration names
// (the model as resolved, the engine) and no string of the request.
func (x *exchange) bodyText(body []byte) string {
	if x.s.inPlace {
		return unsafe.String(unsafe.SliceData(body), len(body))
	}
	return string(body)
}

func jsonOrSSE(_ *exchange, stream bool) string {
	if stream {
		return "text/event-stream; charset=utf-8"
	}
	return "application/json"
}

func anthropicError(b []byte, e *apierr.Error, requestID string) ([]byte, int) {
	return anthropic.AppendError(b, e, requestID), e.Status()
}

// frontFor is the client's front as far as the path and headers tell, so that an error written
// before any handler ran (a refused key) is in the client's own format.
func frontFor(r *http.Request) *front {
	switch p := r.URL.Path; {
	case p == "/v1/chat/completions", p == "/v1/embeddings":
		return openAIFront
	case p == "/v1/responses" || strings.HasPrefix(p, "/v1/responses/"):
		return responsesFront
	case (p == "/v1/models" || strings.HasPrefix(p, "/v1/models/")) && wantsOpenAI(r):
		return openAIFront
	case isBinary(r):
		return binaryFront
	}
	return anthropicFront
}

// serveMessage serves a message endpoint in the request's front: decode, run the pipeline, and
// answer whole or as a stream. Fronts that allow it offer the pass-through path: an engine that
// speaks the client's format gets the client's own bytes, and its answer comes back unchanged but
// for the model name (the pipeline decides whether to take it).
func (x *exchange) serveMessage() {
	f := x.front
	body, ok := x.readBody()
	if !ok {
		return
	}
	req, err := f.decode(x, body)
	if err != nil {
		x.fail(err)
		return
	}
	x.call.Request = req
	stream := req.Stream || f.alwaysStreams
	rec := &x.call.Record
	rec.Format, rec.Stream = f.format, stream

	out := &x.stw
	*out = streamWriter{x: x, contentType: f.contentType(x, stream), whole: !stream}
	if f.passes && (f.mayPass == nil || f.mayPass(x)) {
		x.fwd = pipeline.Forward{Body: body, Out: out, Query: x.r.URL.RawQuery}
		x.call.Forward = &x.fwd
	}
	if f.format == llm.FormatBinary && !x.mode.Text {
		x.w.Header().Set(vocab.HashHeader, vocab.Default().Hash())
	}

	if !stream {
		c := &x.col
		c.Response.Content = x.blocks[:0]
		x.call.Sink = c
		if err := x.p.Serve(x.ctx, &x.call); err != nil {
			x.fail(err)
			return
		}
		if rec.Passed {
			x.writePassed()
			return
		}
		x.writeFull(http.StatusOK, out.contentType, x.output(func(b []byte) []byte {
			return f.answer(x, b, &c.Response, req.Model)
		}))
		if f.served != nil {
			f.served(x)
		}
		return
	}

	x.enc = lazyEncoder{x: x, model: req.Model}
	if f.format == llm.FormatBinary {
		// The binary writer is made now: a mode it cannot serve is an HTTP error before the
		// pipeline runs.
		if _, err := x.enc.get(); err != nil {
			x.fail(err)
			return
		}
	}
	x.call.Sink = x.endAt(&x.enc)
	x.streamErr = &x.enc
	if err := x.p.Serve(x.ctx, &x.call); err != nil {
		x.fail(err)
		return
	}
	if c, ok := x.enc.enc.(interface{ Close() error }); ok {
		_ = c.Close() // a stream the engine ended without a stop event still gets its end
	}
	if !x.wrote {
		_ = x.enc.Flush() // whatever the engine left buffered
	}
	if !x.wrote { // the engine ended without a single event: never answer with an empty 200
		x.fail(apierr.New(apierr.BadGateway, "the engine ended the response without sending anything"))
		return
	}
	if f.served != nil {
		f.served(x)
	}
}

// lazyEncoder is the client's stream encoder, made at the first event it must encode: an answer
// the pass-through path takes never sends one, and does not pay for it (the Anthropic encoder is
// 4 KB and two allocations, and each format's id one more).
type lazyEncoder struct {
	x     *exchange
	model string // the model the client asked for
	enc   encoder
	err   error // the encoder could not be made
}

func (l *lazyEncoder) get() (encoder, error) {
	if l.enc == nil && l.err == nil {
		l.enc, l.err = l.x.front.stream(l.x, &l.x.stw, l.model)
	}
	return l.enc, l.err
}

// Send implements llm.Sink.
func (l *lazyEncoder) Send(ev *llm.Event) error {
	enc, err := l.get()
	if err != nil {
		return err
	}
	return enc.Send(ev)
}

// Flush implements llm.Sink; before the first event there is nothing to flush.
func (l *lazyEncoder) Flush() error {
	if l.enc == nil {
		return nil
	}
	return l.enc.Flush()
}

// WriteError implements errorWriter.
func (l *lazyEncoder) WriteError(e *apierr.Error) error {
	enc, err := l.get()
	if err != nil {
		return err
	}
	return enc.WriteError(e)
}

// anthropicStart shows the client the model id it asked for in the Anthropic start event, where
// the engine names its upstream model (the event is copied: the engine owns it).
type anthropicStart struct {
	*anthropic.StreamWriter
	model string
}

func (a *anthropicStart) Send(ev *llm.Event) error {
	if ev.Kind == llm.EventStart && ev.Model != a.model {
		start := *ev
		start.Model = a.model
		return a.StreamWriter.Send(&start)
	}
	return a.StreamWriter.Send(ev)
}

// writeErrorBody writes e as a complete error response in the client's format.
func (x *exchange) writeErrorBody(e *apierr.Error) {
	var status int
	body := x.output(func(b []byte) []byte {
		b, status = x.front.error(b, e, x.call.Record.RequestID)
		return b
	})
	x.writeFull(status, "application/json", body)
}
