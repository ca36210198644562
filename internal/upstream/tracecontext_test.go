package upstream

import (
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TestTraceContext checks both clients' headers against the W3C propagator's own encoding.
func TestTraceContext(t *testing.T) {
	if b := appendTraceContext(nil, context.Background()); len(b) != 0 {
		t.Errorf("untraced: %q, want nothing", b)
	}
	ts, err := trace.ParseTraceState("vendor=a,other=b")
	if err != nil {
		t.Fatal(err)
	}
	for _, flags := range []trace.TraceFlags{0, trace.FlagsSampled} {
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xab, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0xff},
			SpanID: trace.SpanID{1, 2, 3, 4, 5, 6, 7, 0xfe}, TraceFlags: flags, TraceState: ts})
		ctx := trace.ContextWithSpanContext(context.Background(), sc)
		want := http.Header{}
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(want))

		got := http.Header{"Tracestate": {"stale"}}
		setTraceContext(got, ctx)
		if got.Get("Traceparent") != want.Get("Traceparent") || got.Get("Tracestate") != want.Get("Tracestate") {
			t.Errorf("net/http headers %v, want %v", got, want)
		}
		wire := string(appendTraceContext(nil, ctx))
		if w := "Traceparent: " + want.Get("Traceparent") + "\r\nTracestate: " + want.Get("Tracestate") + "\r\n"; wire != w {
			t.Errorf("h1 lines %q, want %q", wire, w)
		}
	}
}
