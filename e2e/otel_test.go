package e2e

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	oai "github.com/openai/openai-go/v3"
	oaiopt "github.com/openai/openai-go/v3/option"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/syncbuf"
)

// otlpSpan is one span a receiver got, with its resource's service.name.
type otlpSpan struct {
	service string
	*tracepb.Span
}

// otlpReceiver is an OTLP trace endpoint on a loopback listener: OTLP/HTTP (POST /v1/traces,
// protobuf) or gRPC, decoding what the exporter sends with the collector's own types.
type otlpReceiver struct {
	URL string
	mu  sync.Mutex
	got []otlpSpan
	// auth is the Authorization header of the exports.
	auth []string
	// discard drops what arrives (for benchmarks).
	discard bool
}

func (o *otlpReceiver) add(req *coltracepb.ExportTraceServiceRequest, auth string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.discard {
		return
	}
	o.auth = append(o.auth, auth)
	for _, rs := range req.GetResourceSpans() {
		svc := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				svc = kv.Value.GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				o.got = append(o.got, otlpSpan{svc, s})
			}
		}
	}
}

// drop has the receiver answer exports without keeping them (for benchmarks).
func (o *otlpReceiver) drop() {
	o.mu.Lock()
	o.discard = true
	o.mu.Unlock()
}

func (o *otlpReceiver) spans() []otlpSpan {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]otlpSpan(nil), o.got...)
}

func newOTLPHTTPReceiver(t testing.TB) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &otlpReceiver{URL: "http://" + ln.Addr().String()}
	srv := &http.Server{ReadHeaderTimeout: 30 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want POST /v1/traces with a protobuf body", http.StatusBadRequest)
			return
		}
		b, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
		var req coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(b, &req)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		o.add(&req, r.Header.Get("Authorization"))
		resp, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
	})}
	go srv.Serve(ln) //nolint:errcheck // ends at Close
	t.Cleanup(func() { srv.Close() })
	return o
}

// grpcTraces is the gRPC face of an otlpReceiver.
type grpcTraces struct {
	coltracepb.UnimplementedTraceServiceServer
	o *otlpReceiver
}

func (g grpcTraces) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	g.o.add(req, "")
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func newOTLPGRPCReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &otlpReceiver{URL: "http://" + ln.Addr().String()}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, grpcTraces{o: o})
	go srv.Serve(ln) //nolint:errcheck // ends at Stop
	t.Cleanup(srv.Stop)
	return o
}

// headerLog serves h on a loopback listener and keeps the traceparent of every request.
type headerLog struct {
	URL string
	mu  sync.Mutex
	tps []string
}

func (l *headerLog) traceparents() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.tps...)
}

func serveLogged(t *testing.T, h http.Handler) *headerLog {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &headerLog{URL: "http://" + ln.Addr().String()}
	srv := server.HTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			l.mu.Lock()
			l.tps = append(l.tps, r.Header.Get("Traceparent"))
			l.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	}), server.ListenOptions{ReadHeaderTimeout: 30 * time.Second})
	go srv.Serve(ln) //nolint:errcheck // ends at Close
	t.Cleanup(func() { srv.Close() })
	return l
}

func spanAttr(s *tracepb.Span, key string) *commonpb.AnyValue {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value
		}
	}
	return nil
}

func attrString(s *tracepb.Span, key string) string { return spanAttr(s, key).GetStringValue() }
func attrInt(s *tracepb.Span, key string) int64     { return spanAttr(s, key).GetIntValue() }

func hexID(b []byte) string { return hex.EncodeToString(b) }

// TestOTelSpans drives layer0 with both official SDKs, streamed and not, for a model whose
// primary engine is overloaded so that every request falls back, two of the four with a
// client's traceparent. The in-process OTLP receiver must get one span per request, a child of
// the client's span where there was one, with the GenAI attributes and one child per attempt;
// each engine must have been sent its attempt's span as parent, and the second layer0 behind
// the fallback, tracing at ratio 0, must follow that sampled parent into the same trace.
func TestOTelSpans(t *testing.T) {
	recv := newOTLPHTTPReceiver(t)

	// The primary: every request answered 529, Anthropic's overloaded error.
	bad := serveLogged(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(529)
		_, _ = io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
	}))
	// The fallback: a second layer0 serving its simulator, exporting to the same receiver.
	engine, err := layer0.New(parseConfig(t, `
telemetry: {service_name: engine, sample_ratio: 0, otlp: {endpoint: "`+recv.URL+`"}}
engines:
  sim: {kind: sim}
models:
  chat-backup: {engines: [sim]}
`))
	if err != nil {
		t.Fatal(err)
	}
	good := serveLogged(t, engine)

	gw, base := serveGateway(t, parseConfig(t, `
telemetry:
  sample_ratio: 1
  otlp: {endpoint: "`+recv.URL+`", headers: {Authorization: "Bearer otel-secret"}}
routing:
  ejection: {consecutive_failures: 100}
engines:
  bad: {kind: anthropic, url: "`+bad.URL+`"}
  good: {kind: anthropic, url: "`+good.URL+`"}
models:
  chat: {engines: [bad], fallback: [chat-backup]}
  chat-backup: {engines: [good]}
`))

	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	clientTP := "00-" + clientTrace + "-" + clientSpan + "-01"
	ctx := context.Background()
	type sent struct {
		name      string
		requestID string
		client    bool // sent with the client's traceparent
		generated bool // served as events (not the pass-through path): response id and finish reason known
		maxTokens int64
	}
	var reqs []sent

	// Anthropic's SDK: the pass-through path (the engine speaks the client's format).
	for _, stream := range []bool{false, true} {
		var resp *http.Response
		opts := []option.RequestOption{option.WithResponseInto(&resp)}
		if !stream {
			opts = append(opts, option.WithHeader("Traceparent", clientTP), option.WithHeader("Tracestate", "client=1"))
		}
		c := anthropicClient(base, opts...)
		_, tr := anthropicCall(ctx, t, &c, anthropic.MessageNewParams{Model: "chat", MaxTokens: 40, Temperature: anthropic.Float(0.5),
			Messages: userText("Tell me about tracing.")}, stream)
		if tr.output == 0 {
			t.Fatalf("anthropic stream=%v: no output", stream)
		}
		reqs = append(reqs, sent{fmt.Sprintf("anthropic stream=%v", stream), resp.Header.Get("Request-Id"), !stream, false, 40})
	}
	// OpenAI's SDK: an Anthropic engine, so the answer goes through layer0's events.
	for _, stream := range []bool{false, true} {
		var resp *http.Response
		opts := []oaiopt.RequestOption{oaiopt.WithResponseInto(&resp)}
		if stream {
			opts = append(opts, oaiopt.WithHeader("Traceparent", clientTP))
		}
		c := openAIClient(base)
		p := oai.ChatCompletionNewParams{Model: "chat", MaxTokens: oai.Int(30),
			Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Tell me about spans.")}}
		if stream {
			s := c.Chat.Completions.NewStreaming(ctx, p, opts...)
			n := 0
			for s.Next() {
				n++
			}
			if err := s.Err(); err != nil || n == 0 {
				t.Fatalf("openai stream: %v after %d chunks", err, n)
			}
		} else if _, err := c.Chat.Completions.New(ctx, p, opts...); err != nil {
			t.Fatalf("openai: %v", err)
		}
		reqs = append(reqs, sent{fmt.Sprintf("openai stream=%v", stream), resp.Header.Get("X-Request-Id"), stream, true, 30})
	}

	// Close flushes: everything ended is exported before it returns.
	if err := gw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := engine.Close(); err != nil {
		t.Fatal(err)
	}
	spans := recv.spans()
	byParent := map[string][]otlpSpan{}
	for _, s := range spans {
		byParent[hexID(s.ParentSpanId)] = append(byParent[hexID(s.ParentSpanId)], s)
	}
	badTPs, goodTPs := bad.traceparents(), good.traceparents()
	for _, r := range reqs {
		t.Run(r.name, func(t *testing.T) {
			var req *tracepb.Span
			for _, s := range spans {
				if s.service == "layer0" && attrString(s.Span, "layer0.request_id") == r.requestID {
					req = s.Span
				}
			}
			if r.requestID == "" || req == nil {
				t.Fatalf("no span with layer0.request_id %q among %d", r.requestID, len(spans))
			}
			if req.Name != "chat chat" || req.Kind != tracepb.Span_SPAN_KIND_SERVER {
				t.Errorf("span %q kind %v: want \"chat chat\", server", req.Name, req.Kind)
			}
			trace := hexID(req.TraceId)
			if r.client {
				if trace != clientTrace || hexID(req.ParentSpanId) != clientSpan {
					t.Errorf("trace %s parent %s: want the client's %s %s", trace, hexID(req.ParentSpanId), clientTrace, clientSpan)
				}
			} else if len(req.ParentSpanId) != 0 || trace == clientTrace {
				t.Errorf("a request without traceparent: parent %x in trace %s, want a new root", req.ParentSpanId, trace)
			}
			for key, want := range map[string]string{"gen_ai.operation.name": "chat", "gen_ai.request.model": "chat",
				"gen_ai.provider.name": "anthropic", "gen_ai.response.model": "chat-backup", "layer0.replica": "good",
				"layer0.served_model": "chat-backup"} {
				if got := attrString(req, key); got != want {
					t.Errorf("%s = %q, want %q", key, got, want)
				}
			}
			for key, want := range map[string]int64{"http.response.status_code": 200, "layer0.attempts": 2,
				"gen_ai.request.max_tokens": r.maxTokens} {
				if got := attrInt(req, key); got != want {
					t.Errorf("%s = %d, want %d", key, got, want)
				}
			}
			if attrInt(req, "gen_ai.usage.input_tokens") <= 0 || attrInt(req, "gen_ai.usage.output_tokens") <= 0 {
				t.Errorf("usage: %v / %v, want tokens", spanAttr(req, "gen_ai.usage.input_tokens"), spanAttr(req, "gen_ai.usage.output_tokens"))
			}
			if fb := spanAttr(req, "layer0.fallbacks").GetArrayValue().GetValues(); len(fb) != 1 {
				t.Errorf("layer0.fallbacks = %v, want the one fallback", fb)
			}
			if r.generated {
				if attrString(req, "gen_ai.response.id") == "" || len(spanAttr(req, "gen_ai.response.finish_reasons").GetArrayValue().GetValues()) != 1 {
					t.Errorf("response id %v, finish reasons %v: want both", spanAttr(req, "gen_ai.response.id"),
						spanAttr(req, "gen_ai.response.finish_reasons"))
				}
			} else if spanAttr(req, "gen_ai.request.temperature").GetDoubleValue() != 0.5 {
				t.Errorf("gen_ai.request.temperature = %v, want 0.5", spanAttr(req, "gen_ai.request.temperature"))
			}
			if req.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
				t.Errorf("status %v on a served request", req.Status)
			}

			// One child per attempt, the primary's failed, the fallback's served.
			kids := byParent[hexID(req.SpanId)]
			if len(kids) != 2 {
				t.Fatalf("%d children, want 2 attempts", len(kids))
			}
			var first, second *tracepb.Span
			for _, k := range kids {
				switch attrInt(k.Span, "layer0.attempt") {
				case 1:
					first = k.Span
				case 2:
					second = k.Span
				}
			}
			if first == nil || second == nil {
				t.Fatalf("children %v: want attempts 1 and 2", kids)
			}
			if attrString(first, "layer0.replica") != "bad" || attrInt(first, "http.response.status_code") < 500 ||
				attrString(first, "error.type") != "overloaded_error" || first.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR {
				t.Errorf("first attempt: replica %q status %d error %q %v: want bad, 5xx, overloaded_error",
					attrString(first, "layer0.replica"), attrInt(first, "http.response.status_code"), attrString(first, "error.type"), first.Status)
			}
			if attrString(second, "layer0.replica") != "good" || attrInt(second, "http.response.status_code") != 200 ||
				attrString(second, "layer0.fallback") == "" || spanAttr(second, "layer0.time_to_first_byte_ms").GetDoubleValue() <= 0 ||
				attrString(second, "gen_ai.request.model") != "chat-backup" || second.Kind != tracepb.Span_SPAN_KIND_CLIENT {
				t.Errorf("second attempt: %v: want good, 200, a fallback reason, a first byte time, model chat-backup, client kind", second.Attributes)
			}
			if first.StartTimeUnixNano < req.StartTimeUnixNano || second.StartTimeUnixNano < first.EndTimeUnixNano ||
				second.EndTimeUnixNano > req.EndTimeUnixNano {
				t.Errorf("attempt times [%d,%d] [%d,%d] outside or out of order in the request's [%d,%d]", first.StartTimeUnixNano,
					first.EndTimeUnixNano, second.StartTimeUnixNano, second.EndTimeUnixNano, req.StartTimeUnixNano, req.EndTimeUnixNano)
			}

			// Each engine was sent its attempt's span as parent, sampled.
			if want := "00-" + trace + "-" + hexID(first.SpanId) + "-01"; !contains(badTPs, want) {
				t.Errorf("the primary got traceparents %q, want one of %q", badTPs, want)
			}
			if want := "00-" + trace + "-" + hexID(second.SpanId) + "-01"; !contains(goodTPs, want) {
				t.Errorf("the fallback got traceparents %q, want one of %q", goodTPs, want)
			}
			// The second layer0 traced it (ratio 0, but the parent was sampled), as a child of
			// the attempt.
			up := byParent[hexID(second.SpanId)]
			if len(up) != 1 || up[0].service != "engine" || hexID(up[0].TraceId) != trace || up[0].Name != "chat chat-backup" {
				t.Errorf("spans under the second attempt: %v, want the engine's one request span in the trace", up)
			}
		})
	}
	recv.mu.Lock()
	auth := recv.auth
	recv.mu.Unlock()
	if !contains(auth, "Bearer otel-secret") {
		t.Errorf("exports' Authorization headers %q: want the configured header", auth)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestOTelReload swaps the exporter with the configuration: spans of requests served before a
// reload reach the old endpoint (flushed as its generation retires), those after reach the new
// one, over gRPC; a reload that turns tracing off sends no traceparent to the engines.
func TestOTelReload(t *testing.T) {
	recv1, recv2 := newOTLPHTTPReceiver(t), newOTLPGRPCReceiver(t)
	engine, err := layer0.New(parseConfig(t, "engines:\n  sim: {kind: sim}\nmodels:\n  m: {engines: [sim]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { engine.Close() })
	up := serveLogged(t, engine)
	cfg := func(telemetry string) string {
		return telemetry + "engines:\n  up: {kind: openai, url: \"" + up.URL + "\"}\nmodels:\n  m: {engines: [up]}\n"
	}
	gw, base := serveGateway(t, parseConfig(t, cfg("telemetry: {sample_ratio: 1, otlp: {endpoint: \""+recv1.URL+"\"}}\n")))
	c := openAIClient(base)
	ask := func() string {
		t.Helper()
		var resp *http.Response
		_, err := c.Chat.Completions.New(context.Background(), oai.ChatCompletionNewParams{Model: "m", MaxTokens: oai.Int(5),
			Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hi")}}, oaiopt.WithResponseInto(&resp))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Get("X-Request-Id")
	}
	has := func(o *otlpReceiver, id string) bool {
		for _, s := range o.spans() {
			if attrString(s.Span, "layer0.request_id") == id {
				return true
			}
		}
		return false
	}
	before := ask()
	if err := gw.Reload(parseConfig(t, cfg("telemetry: {sample_ratio: 1, otlp: {endpoint: \""+recv2.URL+"\", protocol: grpc}}\n"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the old exporter's flush", func() bool { return has(recv1, before) })
	after := ask()
	if err := gw.Reload(parseConfig(t, cfg(""))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the gRPC exporter's flush", func() bool { return has(recv2, after) })
	if has(recv2, before) || has(recv1, after) {
		t.Error("a span reached the endpoint of the other configuration")
	}
	off := ask()
	tps := up.traceparents()
	if len(tps) != 3 || !strings.HasPrefix(tps[0], "00-") || !strings.HasPrefix(tps[1], "00-") || tps[2] != "" {
		t.Errorf("engine traceparents %q: want two, then none with tracing off", tps)
	}
	time.Sleep(50 * time.Millisecond)
	if has(recv1, off) || has(recv2, off) {
		t.Error("a request was traced with tracing off")
	}
}

// TestOTelFailureAndClientDecision: a request no engine can serve is a span with status Error,
// its error type and the failed attempt; a client's traceparent with the sampled flag unset is
// followed — no span is exported — yet the engine is still sent the client's trace, unsampled.
func TestOTelFailureAndClientDecision(t *testing.T) {
	recv := newOTLPHTTPReceiver(t)
	down := serveLogged(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(529)
		_, _ = io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
	}))
	gw, base := serveGateway(t, parseConfig(t, `
telemetry: {sample_ratio: 1, otlp: {endpoint: "`+recv.URL+`"}}
engines:
  down: {kind: anthropic, url: "`+down.URL+`"}
models:
  m: {engines: [down]}
`))
	ask := func(opts ...option.RequestOption) string {
		t.Helper()
		var resp *http.Response
		c := anthropicClient(base, append(opts, option.WithResponseInto(&resp))...)
		_, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "m", MaxTokens: 5, Messages: userText("hi")})
		var e *anthropic.Error
		if !errors.As(err, &e) || e.StatusCode != 529 {
			t.Fatalf("got %v, want the engine's 529", err)
		}
		return e.Response.Header.Get("Request-Id")
	}
	failed := ask()
	const unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	declined := ask(option.WithHeader("Traceparent", unsampled))
	if err := gw.Close(); err != nil {
		t.Fatal(err)
	}
	var span *tracepb.Span
	for _, s := range recv.spans() {
		switch attrString(s.Span, "layer0.request_id") {
		case failed:
			span = s.Span
		case declined:
			t.Errorf("the request whose client declined sampling was exported: %v", s.Span)
		}
	}
	if span == nil {
		t.Fatalf("no span for the failed request %q", failed)
	}
	if span.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || attrString(span, "error.type") != "overloaded_error" ||
		attrInt(span, "http.response.status_code") != 529 || attrInt(span, "layer0.attempts") != 1 {
		t.Errorf("failed request's span: status %v, attributes %v: want Error, overloaded_error, 529, 1 attempt", span.Status, span.Attributes)
	}
	tps := down.traceparents()
	if len(tps) != 2 || !strings.HasPrefix(tps[0], "00-"+hexID(span.TraceId)+"-") || !strings.HasSuffix(tps[0], "-01") {
		t.Fatalf("engine traceparents %q: want the failed request's trace, sampled, first", tps)
	}
	// layer0's own (unrecorded) span under the client's, in the client's trace, unsampled.
	if !strings.HasPrefix(tps[1], unsampled[:36]) || !strings.HasSuffix(tps[1], "-00") || tps[1] == unsampled {
		t.Errorf("engine traceparent for the declined request %q, want layer0's span in the client's trace %q, unsampled",
			tps[1], unsampled)
	}
}

// TestOTelExportFailureLogged: a collector that cannot be reached costs the spans, never the
// request, and the failure is in the process log (JSON, like every line), without the export's
// header values.
func TestOTelExportFailureLogged(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	var logs syncbuf.Buffer
	gw, base := serveGateway(t, parseConfig(t, `
telemetry: {sample_ratio: 1, otlp: {endpoint: "`+dead+`", timeout: 2s, headers: {Authorization: "Bearer otel-secret"}}}
engines:
  sim: {kind: sim}
models:
  m: {engines: [sim]}
`), layer0.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
	c := anthropicClient(base)
	if _, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "m", MaxTokens: 5, Messages: userText("hi")}); err != nil {
		t.Fatalf("a request with the collector down: %v", err)
	}
	_ = gw.Close() // the flush fails
	out := logs.String()
	if !strings.Contains(out, `"level":"WARN"`) || !strings.Contains(out, "telemetry") || strings.Contains(out, "otel-secret") {
		t.Errorf("log %q: want a WARN line about the failed export, without the header's value", out)
	}
}
