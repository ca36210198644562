package pipeline

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestAttemptContext(t *testing.T) {
	ctx := context.Background()
	if got, id := attemptContext(ctx); got != ctx || id.IsValid() {
		t.Errorf("untraced: got a new context or id %v", id)
	}
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2},
		TraceFlags: trace.FlagsSampled})
	actx, id := attemptContext(trace.ContextWithSpanContext(ctx, parent))
	sc := trace.SpanContextFromContext(actx)
	if !id.IsValid() || sc.SpanID() != id || sc.TraceID() != parent.TraceID() || !sc.IsSampled() {
		t.Errorf("traced: span %v id %v: want the parent's trace and flags under a new span id", sc, id)
	}
	if _, id2 := attemptContext(trace.ContextWithSpanContext(ctx, parent)); id2 == id {
		t.Error("two attempts got the same span id")
	}
}
