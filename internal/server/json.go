package server

import (
	"net/http"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/ids"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/pipeline"
	"github.com/layer0ai/layer0/internal/wire/anthropic"
	"github.com/layer0ai/layer0/internal/wire/openai"
)

// serveJSON runs a decoded request of one of the JSON fronts (x.format: Anthropic Messages or
// OpenAI Chat Completions) and answers in that format: a whole JSON answer, or SSE when the
// request streams. Both fronts offer the pass-through path: an engine that speaks the client's
// format gets the client's own bytes, and its answer comes back unchanged but for the model
// name (the pipeline decides whether to take it). includeUsage is OpenAI's
// stream_options.include_usage.
func (x *exchange) serveJSON(body []byte, req *llm.Request, includeUsage bool) {
	x.call.Request = req
	rec := &x.call.Record
	rec.Format, rec.Stream = x.format, req.Stream

	ct := "application/json"
	if req.Stream {
		ct = "text/event-stream; charset=utf-8"
	}
	out := &x.stw
	*out = streamWriter{x: x, contentType: ct}
	x.fwd = pipeline.Forward{Body: body, Out: flushWriter{out}}
	x.call.Forward = &x.fwd

	if !req.Stream {
		x.call.Forward.Out = bodyBuffer{x}
		c := &x.col
		x.call.Sink = c
		if err := x.p.Serve(x.r.Context(), &x.call); err != nil {
			x.fail(err)
			return
		}
		if rec.Passed {
			x.writePassed(ct)
			return
		}
		c.Response.Model = req.Model // the client sees the model it asked for
		x.writeFull(http.StatusOK, "application/json", x.output(func(b []byte) []byte {
			if x.format == llm.FormatOpenAI {
				return openai.AppendResponse(b, &c.Response, ids.Completion(), time.Now().Unix())
			}
			return anthropic.AppendResponse(b, &c.Response, ids.Message())
		}))
		return
	}

	x.enc = lazyEncoder{x: x, format: x.format, model: req.Model, includeUsage: includeUsage}
	x.call.Sink = x.endAt(&x.enc)
	x.streamErr = &x.enc
	if err := x.p.Serve(x.r.Context(), &x.call); err != nil {
		x.fail(err)
		return
	}
	if !x.wrote {
		_ = x.enc.Flush() // whatever the engine left buffered
	}
	if !x.wrote { // the engine ended without a single event: never answer with an empty 200
		x.fail(apierr.New(apierr.BadGateway, "the engine ended the response without sending anything"))
	}
}

// flushWriter gives the stream writer a Flush that pushes to the network.
type flushWriter struct{ sw *streamWriter }

func (f flushWriter) Write(b []byte) (int, error) { return f.sw.Write(b) }
func (f flushWriter) Flush() error                { return f.sw.flush() }

// lazyEncoder is the client's stream encoder, made at the first event it must encode: an
// answer the pass-through path takes never sends one, and does not pay for it (the Anthropic
// encoder is 4 KB and two allocations, and each format's id one more). It also shows the client
// the model id it asked for in the Anthropic start event, where the engine names its upstream
// model (the event is copied: the engine owns it).
type lazyEncoder struct {
	x            *exchange
	format       llm.Format // FormatAnthropic or FormatOpenAI
	model        string     // the model the client asked for
	includeUsage bool       // OpenAI: stream_options.include_usage
	enc          interface {
		llm.Sink
		errorWriter
	}
}

func (l *lazyEncoder) get() interface {
	llm.Sink
	errorWriter
} {
	if l.enc == nil {
		out := &l.x.stw
		if l.format == llm.FormatOpenAI {
			sw := openai.NewStreamWriter(flushWriter{out})
			sw.ID, sw.Model, sw.Created, sw.IncludeUsage = ids.Completion(), l.model, time.Now().Unix(), l.includeUsage
			l.enc = sw
		} else {
			l.enc = anthropic.NewStreamWriter(ids.Message(), out, out.flush)
		}
	}
	return l.enc
}

// Send implements llm.Sink.
func (l *lazyEncoder) Send(ev *llm.Event) error {
	if l.format == llm.FormatAnthropic && ev.Kind == llm.EventStart && ev.Model != l.model {
		start := *ev
		start.Model = l.model
		return l.get().Send(&start)
	}
	return l.get().Send(ev)
}

// Flush implements llm.Sink; before the first event there is nothing to flush.
func (l *lazyEncoder) Flush() error {
	if l.enc == nil {
		return nil
	}
	return l.enc.Flush()
}

// WriteError implements errorWriter.
func (l *lazyEncoder) WriteError(e *apierr.Error) error { return l.get().WriteError(e) }
