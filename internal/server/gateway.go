package server

import (
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/metrics"
	"github.com/layer0ai/layer0/internal/pipeline"
	"github.com/layer0ai/layer0/internal/trace"
)

// The gateway's own endpoints beside the client APIs: the legacy negotiate redirect, the
// Prometheus metrics, and the vLLM-style load of embedded engines.

// enginePrefix + NAME serves an embedded engine's load as vLLM's gauges.
const enginePrefix = "/metrics/engines/"

// sunset is the Sunset date (RFC 8594) announced for /v1/layer/negotiate.
const sunset = "Fri, 31 Dec 2027 23:59:59 GMT"

// isAPI reports whether path is a client API endpoint: those need an API key (when keys are
// configured) and are counted in the request metrics. The binary protocol's vocabulary is public
// data clients cache, and health and metrics endpoints are for the operator's network.
func isAPI(path string) bool {
	return strings.HasPrefix(path, "/v1/") && !isVocabPath(path)
}

// routeOf is the metrics' route label of an API path (isAPI): the endpoint the request was for.
func routeOf(path string) string {
	switch {
	case isGeneration(path):
		return metrics.RouteMessages
	case strings.HasPrefix(path, "/v1/responses/"):
		return metrics.RouteResponses
	case path == "/v1/messages/count_tokens":
		return metrics.RouteCountTokens
	case path == "/v1/embeddings":
		return metrics.RouteEmbeddings
	case path == "/v1/models", strings.HasPrefix(path, "/v1/models/"):
		return metrics.RouteModels
	case path == "/v1/cache":
		return metrics.RouteCache
	case path == "/v1/layer/negotiate":
		return metrics.RouteNegotiate
	}
	return metrics.RouteNotFound
}

// negotiate serves /v1/layer/negotiate for legacy clients: the routing decision
// for ?model=NAME (or a JSON body's "model" on POST) as a 302 to the engine the router picks —
// its base URL, or this server's /v1/messages for an engine embedded here — with Deprecation and
// Sunset headers. The request is authenticated like any other; the key must be allowed the model.
func (x *exchange) negotiate() {
	if x.r.Method != http.MethodGet && x.r.Method != http.MethodPost {
		x.w.Header().Set("Allow", "GET, POST")
		x.fail(&apierr.Error{Kind: apierr.MethodNotAllowed, Code: "method_not_allowed",
			Message: x.r.Method + " /v1/layer/negotiate: method not allowed, use GET or POST"})
		return
	}
	model := x.r.URL.Query().Get("model")
	if model == "" && x.r.Method == http.MethodPost {
		body, ok := x.readBody()
		if !ok {
			return
		}
		var v struct {
			Model string `json:"model"`
		}
		if err := json.Unmarshal(body, &v); err != nil {
			x.fail(apierr.Wrap(apierr.InvalidRequest, err, "body: not a JSON object with a \"model\""))
			return
		}
		model = v.Model
	}
	if model == "" {
		x.fail(apierr.Invalid("model", "required: send ?model=NAME, or a JSON body with \"model\""))
		return
	}
	key := x.call.Key
	if key == nil {
		var err error
		if key, err = x.p.Admit(x.r.Header); err != nil {
			x.fail(err)
			return
		}
	}
	picked, err := x.p.Pick(key, model)
	if err != nil {
		x.fail(err)
		return
	}
	rec := &x.call.Record
	rec.Model, rec.Served, rec.Engine = picked.Name, picked.Model, picked.Engine
	loc := picked.URL
	if loc == "" {
		// An engine embedded here: this server's own path, relative (RFC 9110 §10.2.2), never
		// built from the client's Host header, which the client controls.
		loc = "/v1/messages"
	}
	h := x.w.Header()
	h.Set("Location", loc)
	h.Set("Deprecation", "true")
	h.Set("Sunset", sunset)
	b, err := json.Marshal(struct {
		Model    string `json:"model"`
		Engine   string `json:"engine"`
		Location string `json:"location"`
	}{picked.Model, picked.Engine, loc})
	if err != nil {
		x.fail(err)
		return
	}
	x.writeFull(http.StatusFound, "application/json", b)
}

// isAdminPath reports whether path is one of the operator's endpoints beside the health checks.
func isAdminPath(path string) bool {
	return path == "/metrics" || strings.HasPrefix(path, enginePrefix)
}

// isScrape reports whether path is a health check or a metrics scrape, which the access log
// leaves out unless Options.LogScrapes.
func isScrape(path string) bool {
	return path == "/healthz" || path == "/readyz" || isAdminPath(path)
}

// pprofPrefix is where net/http/pprof's handlers are mounted, on the admin listener only.
const pprofPrefix = "/debug/pprof/"

// admin serves the operator's endpoints: metrics, engine load, health; on the admin listener
// (adminListener) also the profiles, the running configuration and the decision traces.
func (x *exchange) admin(adminListener bool) {
	switch path := x.r.URL.Path; {
	case path == "/metrics" && x.s.metrics != nil:
		x.onlyMethod(http.MethodGet, x.serveMetrics)
	case strings.HasPrefix(path, enginePrefix) && x.s.load != nil:
		x.onlyMethod(http.MethodGet, func() { x.engineMetrics(strings.TrimPrefix(path, enginePrefix)) })
	case path == "/healthz":
		x.onlyMethod(http.MethodGet, x.health)
	case path == "/readyz":
		x.onlyMethod(http.MethodGet, x.readiness)
	case adminListener && path == "/config" && x.s.config != nil:
		x.onlyMethod(http.MethodGet, x.serveConfig)
	case adminListener && (path == pprofPrefix[:len(pprofPrefix)-1] || strings.HasPrefix(path, pprofPrefix)):
		x.profile(strings.TrimPrefix(path, pprofPrefix))
	case adminListener && isDebugPath(path):
		x.onlyMethod(http.MethodGet, func() { x.debugRequests(nil) })
	case adminListener && path == spendPath:
		x.onlyMethod(http.MethodGet, x.spendReport)
	default:
		x.fail(apierr.New(apierr.NotFound, "%s %s: no such endpoint", x.r.Method, sanitize(path)))
	}
}

// serveMetrics serves GET /metrics, with the timing headers every answer carries.
func (x *exchange) serveMetrics() {
	x.writeTimingHeaders(0, -1)
	x.armWrite()
	sw := &statusWriter{ResponseWriter: x.w, status: http.StatusOK}
	x.s.metrics.Handler().ServeHTTP(sw, x.r)
	x.call.Record.Status = sw.status
	x.wrote = true
}

// engineMetrics serves an embedded engine's load under the vLLM gauge names.
func (x *exchange) engineMetrics(name string) {
	l, ok := x.s.load(name)
	if !ok {
		x.fail(apierr.New(apierr.NotFound, "no embedded engine named %q", sanitize(name)))
		return
	}
	x.writeFull(http.StatusOK, "text/plain; version=0.0.4; charset=utf-8", metrics.AppendVLLM(nil, name, l))
}

// debugPrefix + ID serves one request's decision trace; debugPrefix without the slash lists them.
const debugPrefix = "/debug/requests/"

// isDebugPath reports whether path is one of the decision trace endpoints.
func isDebugPath(path string) bool {
	return path == debugPrefix[:len(debugPrefix)-1] || strings.HasPrefix(path, debugPrefix)
}

// debugOnMain serves the decision traces on the main listener, which has them only when no
// admin address is set, and only to a key with debug (or to everyone when the gateway serves
// without keys, which it does only on loopback): the traces of that key's own requests, or of
// every key's to an admin key.
func (x *exchange) debugOnMain() {
	key, ok := x.admitOperator(func(k *auth.Key) bool { return k.Debug }, &apierr.Error{
		Kind: apierr.Permission, Code: "DEBUG_NOT_ALLOWED",
		Message: "this API key may not read decision traces (keys[].debug)"})
	if !ok {
		return
	}
	if key.Admin {
		key = nil
	}
	x.onlyMethod(http.MethodGet, func() { x.debugRequests(key) })
}

// ownView reports whether a trace read by key is shown as the request's own key may read it
// (trace.Trace.Own) rather than in full: any key but an admin key, or the anonymous caller of a
// gateway without keys (on loopback: every request is its own). nil is an operator (an admin
// key, the admin listener).
func ownView(key *auth.Key) bool {
	return key != nil && !key.Admin && key != pipeline.Anonymous()
}

// admitOperator authenticates a request to an operator endpoint of the main listener: the key
// its header presents, recorded, must be one that allowed accepts, or the anonymous key of a
// gateway serving without keys (which it does only on loopback). Else the failure, or refusal,
// is answered and ok is false.
func (x *exchange) admitOperator(allowed func(*auth.Key) bool, refusal *apierr.Error) (key *auth.Key, ok bool) {
	key, err := x.p.Admit(x.r.Header)
	if err != nil {
		x.fail(err)
		return nil, false
	}
	x.call.Record.Key = key.Name
	if !allowed(key) && key != pipeline.Anonymous() {
		x.fail(refusal)
		return nil, false
	}
	return key, true
}

// debugRequests serves GET /debug/requests/{id}, one request's trace, and
// GET /debug/requests?model=&status=&limit=, the requests kept, newest first: every request's,
// or only those of own when it is not nil. Another key's request is not found, as an unknown
// one is.
func (x *exchange) debugRequests(own *auth.Key) {
	if x.s.traces == nil {
		x.fail(apierr.New(apierr.NotFound, "decision traces are off: set debug.requests to keep them"))
		return
	}
	var v any
	if id, ok := strings.CutPrefix(x.r.URL.Path, debugPrefix); ok {
		t, found := x.s.traces.Get(id)
		if found && own != nil && t.Key != own.Name {
			found = false
		}
		if !found {
			x.fail(apierr.New(apierr.NotFound, "no trace of request %q: unknown, or older than the last %d requests",
				sanitize(id), x.s.traces.Len()))
			return
		}
		if ownView(own) {
			t.Own() // not an operator: only what the key's own prompts cached (trace.Trace.Own)
		}
		v = t
	} else {
		q := x.r.URL.Query()
		f := trace.Filter{Model: q.Get("model"), Status: q.Get("status")}
		if own != nil {
			f.Own, f.Key = true, own.Name
		}
		if f.Status != "" && !trace.ValidStatus(f.Status) {
			x.fail(apierr.Invalid("status", "want a status (529) or a class (5xx)"))
			return
		}
		if l := q.Get("limit"); l != "" {
			n, err := strconv.Atoi(l)
			if err != nil || n < 1 {
				x.fail(apierr.Invalid("limit", "want a positive number"))
				return
			}
			f.Limit = n
		}
		v = struct {
			Requests []trace.Summary `json:"requests"`
		}{x.s.traces.List(f)}
	}
	b, err := json.Marshal(v)
	if err != nil {
		x.fail(err)
		return
	}
	x.writeFull(http.StatusOK, "application/json", b)
}

// serveConfig serves GET /config: the running configuration as YAML, its secrets redacted.
func (x *exchange) serveConfig() {
	b, err := x.s.config()
	if err != nil {
		x.fail(err)
		return
	}
	x.writeFull(http.StatusOK, "application/yaml; charset=utf-8", b)
}

// profile serves net/http/pprof's handlers under /debug/pprof/: the index, the named profiles
// (heap, goroutine, allocs, block, mutex, threadcreate), and cmdline, profile (CPU), symbol and
// trace. A CPU profile or execution trace runs for ?seconds=, so no write deadline is armed.
func (x *exchange) profile(name string) {
	sw := &statusWriter{ResponseWriter: x.w, status: http.StatusOK}
	switch name {
	case "cmdline":
		pprof.Cmdline(sw, x.r)
	case "profile":
		pprof.Profile(sw, x.r)
	case "symbol":
		pprof.Symbol(sw, x.r)
	case "trace":
		pprof.Trace(sw, x.r)
	default:
		pprof.Index(sw, x.r) // the index at "", a named profile otherwise, 404 for an unknown one
	}
	x.call.Record.Status = sw.status
	x.wrote = true
}

// isGeneration reports whether path is one of the endpoints that generate (the requests traced
// with OpenTelemetry).
func isGeneration(path string) bool {
	return path == "/v1/messages" || path == "/v1/chat/completions" || path == "/v1/responses"
}
