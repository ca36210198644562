package pipeline

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

	"go.opentelemetry.io/otel/trace"
)

// attemptContext gives an attempt of a traced request (Call.Traced: its context carries the
// request's span) the span context of its own span, so that the engine is sent the attempt as
// its parent. The attempt's span itself is built from the Record once the request ends, under
// the id returned here (zero, with ctx unchanged, when ctx carries no span).
func attemptContext(ctx context.Context) (context.Context, trace.SpanID) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ctx, trace.SpanID{}
	}
	var id trace.SpanID
	for !id.IsValid() {
		binary.LittleEndian.PutUint64(id[:], rand.Uint64())
	}
	return trace.ContextWithSpanContext(ctx, sc.WithSpanID(id)), id
}
