package upstream

import (
	"context"
	"encoding/hex"
	"net/http"

	"go.opentelemetry.io/otel/trace"
)

// W3C Trace Context: the request's span (an attempt's, under a traced request) goes to the
// engine as its parent, on both clients.

// appendTraceContext appends the traceparent line, and tracestate's when there is one, of the
// span context ctx carries; nothing (and no allocation) when it carries none.
func appendTraceContext(dst []byte, ctx context.Context) []byte {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return dst
	}
	dst = append(dst, "Traceparent: "...)
	dst = appendTraceparent(dst, sc)
	dst = append(dst, "\r\n"...)
	if ts := sc.TraceState(); ts.Len() > 0 {
		dst = append(dst, "Tracestate: "...)
		dst = append(dst, ts.String()...)
		dst = append(dst, "\r\n"...)
	}
	return dst
}

// setTraceContext sets the same headers on a net/http request.
func setTraceContext(h http.Header, ctx context.Context) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return
	}
	var b [55]byte
	h.Set("Traceparent", string(appendTraceparent(b[:0], sc)))
	if ts := sc.TraceState(); ts.Len() > 0 {
		h.Set("Tracestate", ts.String())
	} else {
		h.Del("Tracestate")
	}
}

// appendTraceparent appends version 00 of the traceparent value: trace id, span id, flags.
func appendTraceparent(dst []byte, sc trace.SpanContext) []byte {
	tid, sid := sc.TraceID(), sc.SpanID()
	dst = append(dst, "00-"...)
	dst = hex.AppendEncode(dst, tid[:])
	dst = append(dst, '-')
	dst = hex.AppendEncode(dst, sid[:])
	dst = append(dst, '-')
	return hex.AppendEncode(dst, []byte{byte(sc.TraceFlags())})
}
