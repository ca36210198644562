package telemetry

import (
	"context"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/pipeline"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The attributes' names: the GenAI semantic conventions', then layer0's own.
const (
	attrOperation     = "gen_ai.operation.name"
	attrProvider      = "gen_ai.provider.name"
	attrRequestModel  = "gen_ai.request.model"
	attrMaxTokens     = "gen_ai.request.max_tokens"
	attrTemperature   = "gen_ai.request.temperature"
	attrTopP          = "gen_ai.request.top_p"
	attrResponseModel = "gen_ai.response.model"
	attrResponseID    = "gen_ai.response.id"
	attrFinishReasons = "gen_ai.response.finish_reasons"
	attrInputTokens   = "gen_ai.usage.input_tokens"
	attrOutputTokens  = "gen_ai.usage.output_tokens"
	attrErrorType     = "error.type"
	attrStatus        = "http.response.status_code"

	attrRequestID  = "layer0.request_id"
	attrKey        = "layer0.key"
	attrCache      = "layer0.cache"
	attrModel      = "layer0.model"
	attrServed     = "layer0.served_model"
	attrReplica    = "layer0.replica"
	attrAttempts   = "layer0.attempts"
	attrFallbacks  = "layer0.fallbacks"
	attrPassed     = "layer0.passthrough"
	attrSimulated  = "layer0.simulated"
	attrRateLimit  = "layer0.rate_limited"
	attrTeam       = "layer0.team"
	attrCost       = "layer0.cost"
	attrTTFT       = "layer0.time_to_first_token_ms"
	attrPicker     = "layer0.route.picker"
	attrPick       = "layer0.route.reason"
	attrPickSpread = "layer0.route.spread"
	attrOffload    = "layer0.offload"
	attrTruncated  = "layer0.context.truncated"
	attrAttempt    = "layer0.attempt"
	attrRetry      = "layer0.retry"
	attrFallback   = "layer0.fallback"
	attrFirstByte  = "layer0.time_to_first_byte_ms"
	attrEjected    = "layer0.replica.ejected_ms"
	attrBreaker    = "layer0.replica.breaker_opened"
	operationChat  = "chat"
	millisPerNanos = 1e-6
)

// End ends span, begun by Start for the request rec records, at end: it names the span
// "chat {model}", sets its attributes from rec and req (nil when the request was never
// decoded), and adds a child span per attempt rec kept, under the id the attempt's engine was
// sent as its parent.
func (t *Tracer) End(span trace.Span, rec *pipeline.Record, req *llm.Request, end time.Time) {
	if !span.IsRecording() {
		span.End(trace.WithTimestamp(end))
		return
	}
	model := rec.Model
	if model == "" && req != nil {
		model = req.Model
	}
	if model != "" {
		span.SetName(operationChat + " " + model)
	}
	a := make([]attribute.KeyValue, 0, 32)
	a = append(a, attribute.String(attrOperation, operationChat), attribute.String(attrRequestID, rec.RequestID),
		attribute.Int(attrStatus, rec.Status))
	a = requestAttributes(a, req)
	if rec.Model != "" {
		a = append(a, attribute.String(attrModel, rec.Model))
	}
	if rec.Served != "" {
		a = append(a, attribute.String(attrServed, rec.Served))
	}
	if m := responseModel(rec); m != "" {
		a = append(a, attribute.String(attrResponseModel, m))
	}
	if rec.Engine != "" {
		a = append(a, attribute.String(attrReplica, rec.Engine))
		if k := t.kinds[rec.Engine]; k != "" {
			a = append(a, attribute.String(attrProvider, k))
		}
	}
	if rec.ResponseID != "" {
		a = append(a, attribute.String(attrResponseID, rec.ResponseID))
	}
	if rec.Stopped {
		a = append(a, attribute.StringSlice(attrFinishReasons, []string{rec.Stop.String()}))
	}
	if rec.Status < 400 || rec.Usage.InputTokens+rec.Usage.OutputTokens > 0 {
		a = append(a, attribute.Int(attrInputTokens, rec.Usage.InputTokens), attribute.Int(attrOutputTokens, rec.Usage.OutputTokens))
	}
	if rec.Key != "" {
		a = append(a, attribute.String(attrKey, rec.Key)) // the key's name, never the key
	}
	if rec.Team != "" {
		a = append(a, attribute.String(attrTeam, rec.Team))
	}
	if rec.Priced {
		a = append(a, attribute.String(attrCost, rec.Cost.String())) // a decimal, exact (docs/spend.md)
	}
	if rec.Cache != "" {
		a = append(a, attribute.String(attrCache, rec.Cache))
	}
	a = append(a, attribute.Int(attrAttempts, rec.Attempts))
	if len(rec.Fallbacks) > 0 {
		a = append(a, attribute.StringSlice(attrFallbacks, rec.Fallbacks))
	}
	if rec.Passed {
		a = append(a, attribute.Bool(attrPassed, true))
	}
	if rec.Simulated {
		a = append(a, attribute.Bool(attrSimulated, true))
	}
	if rec.RateLimited {
		a = append(a, attribute.Bool(attrRateLimit, true))
	}
	if rec.TTFT > 0 {
		a = append(a, attribute.Float64(attrTTFT, float64(rec.TTFT)*millisPerNanos))
	}
	if rec.Pick.Picker != "" {
		a = append(a, attribute.String(attrPicker, rec.Pick.Picker), attribute.String(attrPick, rec.Pick.Reason))
		if rec.Pick.Spread > 0 {
			a = append(a, attribute.Int(attrPickSpread, rec.Pick.Spread))
		}
	}
	if rec.Offload != "" {
		a = append(a, attribute.String(attrOffload, rec.Offload))
	}
	if rec.Context.Truncated {
		a = append(a, attribute.Bool(attrTruncated, true))
	}
	if rec.ErrorType != "" {
		a = append(a, attribute.String(attrErrorType, rec.ErrorType))
		span.SetStatus(codes.Error, rec.ErrorType)
	} else if rec.Status >= 500 {
		span.SetStatus(codes.Error, "")
	}
	span.SetAttributes(a...)
	t.attempts(span, rec)
	span.End(trace.WithTimestamp(end))
}

// requestAttributes appends what the client asked for (req nil: the request was never decoded).
func requestAttributes(a []attribute.KeyValue, req *llm.Request) []attribute.KeyValue {
	if req == nil {
		return a
	}
	a = append(a, attribute.String(attrRequestModel, req.Model))
	if req.MaxTokens > 0 {
		a = append(a, attribute.Int(attrMaxTokens, req.MaxTokens))
	}
	if req.Temperature != nil {
		a = append(a, attribute.Float64(attrTemperature, *req.Temperature))
	}
	if req.TopP != nil {
		a = append(a, attribute.Float64(attrTopP, *req.TopP))
	}
	return a
}

// responseModel is the model the engine said it served, else the model layer0 routed to.
func responseModel(rec *pipeline.Record) string {
	if rec.ResponseModel != "" {
		return rec.ResponseModel
	}
	return rec.Served
}

// attempts adds the child span of each attempt rec kept.
func (t *Tracer) attempts(parent trace.Span, rec *pipeline.Record) {
	ctx := trace.ContextWithSpan(context.Background(), parent)
	n := min(rec.Attempts, pipeline.MaxTries)
	for i := range rec.Tries[:n] {
		try := &rec.Tries[i]
		start := rec.Start.Add(try.At)
		a := make([]attribute.KeyValue, 0, 12)
		a = append(a, attribute.String(attrOperation, operationChat), attribute.String(attrRequestModel, try.Model),
			attribute.String(attrReplica, try.Replica), attribute.Int(attrAttempt, i+1))
		if k := t.kinds[try.Replica]; k != "" {
			a = append(a, attribute.String(attrProvider, k))
		}
		if try.Retry {
			a = append(a, attribute.Bool(attrRetry, true))
		}
		if try.Fallback != "" {
			a = append(a, attribute.String(attrFallback, try.Fallback))
		}
		if try.FirstByte > 0 {
			a = append(a, attribute.Float64(attrFirstByte, float64(try.FirstByte)*millisPerNanos))
		}
		status := 200
		if try.Err != nil {
			e := apierr.From(try.Err)
			status = e.Status()
			a = append(a, attribute.String(attrErrorType, e.Kind.AnthropicType()))
		}
		a = append(a, attribute.Int(attrStatus, status))
		if try.Verdict.Ejected > 0 {
			a = append(a, attribute.Float64(attrEjected, float64(try.Verdict.Ejected)*millisPerNanos))
		}
		if try.Verdict.BreakerOpened {
			a = append(a, attribute.Bool(attrBreaker, true))
		}
		sctx := ctx
		if try.Span.IsValid() {
			sctx = withSpanID(ctx, try.Span)
		}
		_, s := t.p.tracer.Start(sctx, operationChat+" "+try.Model, trace.WithTimestamp(start),
			trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(a...))
		if try.Err != nil {
			s.SetStatus(codes.Error, apierr.From(try.Err).Message)
		}
		s.End(trace.WithTimestamp(start.Add(try.Took)))
	}
}
