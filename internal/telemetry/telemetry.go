// Package telemetry exports OpenTelemetry traces of the requests: one span per request, named
// and described by the GenAI semantic conventions, with a child span per engine attempt. The
// spans are built once the request ends, from its pipeline.Record (the record metrics, the
// access log and the decision traces read), with the times the record kept; only the request's
// span is live while it is served, so that its context can go to the engines in their
// traceparent. The SDK's batch processor exports them over OTLP (HTTP or gRPC) off the request
// path.
//
// A Provider owns the SDK's TracerProvider and exporter and lives as long as the telemetry
// configuration is unchanged (across reloads); a Tracer is one generation's view of it, with
// the engines of that generation's configuration.
package telemetry

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"time"

	"github.com/layer0ai/layer0/internal/config"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Scope is the instrumentation scope of layer0's spans.
const Scope = "github.com/layer0ai/layer0"

// Provider is the SDK's tracer provider built from one telemetry configuration.
type Provider struct {
	cfg    config.Telemetry
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
}

// New builds the provider of c (c.Enabled must hold): an OTLP exporter behind a batch span
// processor, sampling c's ratio of the requests whose client did not decide. The exporter
// connects lazily: a collector that is down costs dropped spans, never a failed start. Export
// failures are logged to logger (nil discards), at WARN: the SDK reports them to the process's
// one OpenTelemetry error handler, which New sets.
func New(c config.Telemetry, logger *slog.Logger) (*Provider, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("telemetry: exporting spans failed", "err", err)
	}))
	exp, err := exporter(c.OTLP)
	if err != nil {
		return nil, fmt.Errorf("telemetry: the OTLP exporter: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", c.ServiceName))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.Ratio()))),
		sdktrace.WithIDGenerator(ids{}),
	)
	return &Provider{cfg: c, tp: tp, tracer: tp.Tracer(Scope)}, nil
}

// exporter returns the OTLP exporter of o, started: a gRPC connection is made lazily, on the
// first export.
func exporter(o config.OTLP) (*otlptrace.Exporter, error) {
	u, err := url.Parse(o.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("telemetry: otlp.endpoint: %w", err)
	}
	headers := make(map[string]string, len(o.Headers))
	for k, v := range o.Headers {
		headers[k] = v.Reveal()
	}
	switch o.Protocol {
	case config.OTLPGRPC:
		u.Path = ""
		opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpointURL(u.String()), otlptracegrpc.WithHeaders(headers),
			otlptracegrpc.WithTimeout(o.Timeout)}
		return otlptracegrpc.New(context.Background(), opts...)
	case config.OTLPHTTP, "":
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpointURL(u.String()), otlptracehttp.WithHeaders(headers),
			otlptracehttp.WithTimeout(o.Timeout)}
		return otlptracehttp.New(context.Background(), opts...)
	}
	return nil, fmt.Errorf("telemetry: otlp.protocol %q: want http or grpc", o.Protocol)
}

// Config is the configuration the provider was built from: a reload with an equal one keeps it.
func (p *Provider) Config() config.Telemetry { return p.cfg }

// Shutdown exports the spans still queued and stops the exporter; spans ended after it are
// dropped. It waits at most until ctx is done.
func (p *Provider) Shutdown(ctx context.Context) error {
	if err := p.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("telemetry: flushing the spans: %w", err)
	}
	return nil
}

// Tracer is one generation's tracer: the provider, and the kind of each configured engine (the
// spans' gen_ai.provider.name).
type Tracer struct {
	p     *Provider
	kinds map[string]string
}

// Tracer returns the tracer of a generation whose engines have the given kinds, by name.
func (p *Provider) Tracer(kinds map[string]string) *Tracer { return &Tracer{p: p, kinds: kinds} }

var propagator = propagation.TraceContext{}

// Start begins the span of a request that began at start, as a child of the span the client
// named in its traceparent (and tracestate) headers, if any. The returned context carries it,
// for the engines' traceparent; End ends it.
func (t *Tracer) Start(ctx context.Context, h http.Header, start time.Time) (context.Context, trace.Span) {
	if h.Get("Traceparent") != "" {
		ctx = propagator.Extract(ctx, propagation.HeaderCarrier(h))
	}
	return t.p.tracer.Start(ctx, "chat", trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindServer))
}

// ids is the provider's ID generator: random ids, except for a span whose id was chosen
// before it was built (an attempt's, sent to the engine as its parent while it ran).
type ids struct{}

type presetKey struct{}

// withSpanID has the next span started with ctx take id.
func withSpanID(ctx context.Context, id trace.SpanID) context.Context {
	return context.WithValue(ctx, presetKey{}, id)
}

func (ids) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.LittleEndian.PutUint64(tid[:8], rand.Uint64())
		binary.LittleEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, newSpanID(ctx)
}

func (ids) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID { return newSpanID(ctx) }

func newSpanID(ctx context.Context) trace.SpanID {
	if id, ok := ctx.Value(presetKey{}).(trace.SpanID); ok && id.IsValid() {
		return id
	}
	var id trace.SpanID
	for !id.IsValid() {
		binary.LittleEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}
