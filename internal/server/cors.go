package server

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
)

// corsRequestHeaders are the request headers a page may send: the Anthropic and OpenAI APIs'
// (with the official SDKs' own), the binary protocol's and layer0's.
var corsRequestHeaders = []string{
	"content-type", "x-api-key", "authorization", "anthropic-version", "anthropic-beta",
	"anthropic-dangerous-direct-browser-access", "x-binary-version", "x-offload-target",
	"x-layer0-debug", "cache-control", "x-session-id", "openai-organization", "openai-project",
	"x-stainless-arch", "x-stainless-lang", "x-stainless-os", "x-stainless-package-version",
	"x-stainless-runtime", "x-stainless-runtime-version", "x-stainless-retry-count",
	"x-stainless-timeout", "x-stainless-helper-method",
}

// corsExposedHeaders are the response headers a page may read: the request id, the timings,
// the rate-limit state, the cache's verdict, the binary protocol's and the error's details.
var corsExposedHeaders = []string{
	"request-id", "x-request-id", "x-processing-time", "x-response-time", "retry-after",
	"retry-after-ms", "x-should-retry", "x-error-code", "x-cache", "x-cache-hit", "x-cache-ratio",
	"x-layer0-cache", "x-layer0-engine", "x-layer0-simulated", "x-layer0-context",
	"x-layer0-trace-id", "x-binary-version", "x-binary-vocab",
	"anthropic-ratelimit-requests-limit", "anthropic-ratelimit-requests-remaining",
	"anthropic-ratelimit-requests-reset", "anthropic-ratelimit-input-tokens-limit",
	"anthropic-ratelimit-input-tokens-remaining", "anthropic-ratelimit-input-tokens-reset",
	"anthropic-ratelimit-output-tokens-limit", "anthropic-ratelimit-output-tokens-remaining",
	"anthropic-ratelimit-output-tokens-reset", "x-ratelimit-limit-requests",
	"x-ratelimit-limit-tokens", "x-ratelimit-remaining-requests", "x-ratelimit-remaining-tokens",
	"x-ratelimit-reset-requests", "x-ratelimit-reset-tokens",
}

// corsMethods are the methods the APIs answer.
const corsMethods = "GET, HEAD, POST"

// CORS answers browsers' cross-origin checks from a configuration's cors section: preflights
// (OPTIONS with Access-Control-Request-Method) are answered before anything else runs, and
// answers to allowed origins carry the headers that let the page read them — errors included.
// Every header value is built once, here; answering allocates nothing of its own. The zero
// value (and nil) allows no origin.
type CORS struct {
	origins     map[string]bool
	any         bool
	credentials []string // nil without allow_credentials
	methods     []string
	headers     []string
	expose      []string
	maxAge      []string
	star        []string
	vary        []string
	varyPre     []string
}

// jsonType is the Content-Type of a refused preflight; cap 1, so an Add copies.
var jsonType = []string{"application/json"}

// NewCORS compiles c; nil when it allows no origin.
func NewCORS(c config.CORS) *CORS {
	if len(c.AllowedOrigins) == 0 {
		return nil
	}
	one := func(s string) []string { return []string{s} }
	cc := &CORS{
		origins: make(map[string]bool, len(c.AllowedOrigins)),
		any:     c.AnyOrigin(),
		methods: one(corsMethods),
		headers: one(strings.Join(append(append([]string(nil), corsRequestHeaders...), lower(c.AllowedHeaders)...), ", ")),
		expose:  one(strings.Join(append(append([]string(nil), corsExposedHeaders...), lower(c.ExposedHeaders)...), ", ")),
		maxAge:  one(strconv.Itoa(int(c.MaxAge.Seconds()))),
		star:    one("*"),
		vary:    one("Origin"),
		varyPre: one("Origin, Access-Control-Request-Method, Access-Control-Request-Headers"),
	}
	if c.AllowCredentials {
		cc.credentials = one("true")
	}
	for _, o := range c.AllowedOrigins {
		cc.origins[o] = true
	}
	return cc
}

func lower(hs []string) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = strings.ToLower(h)
	}
	return out
}

// corsRefused is the answer to a refused preflight (refuse).
var corsRefused = &apierr.Error{Kind: apierr.Permission, Code: "CORS_NOT_ALLOWED",
	Message: "CORS: this origin or method is not allowed to call this gateway from a browser (cors.allowed_origins)"}

// isPreflight reports whether r is a browser's CORS preflight.
func isPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && len(r.Header["Origin"]) > 0 && len(r.Header["Access-Control-Request-Method"]) > 0
}

// allowed returns the Access-Control-Allow-Origin value for the request's origin, or nil.
func (c *CORS) allowed(r *http.Request) []string {
	if c == nil {
		return nil
	}
	o := r.Header["Origin"]
	if len(o) == 0 {
		return nil
	}
	if c.any && c.credentials == nil {
		return c.star
	}
	if c.any || c.origins[o[0]] {
		return o[:1:1] // the request's own value: no allocation; cap 1 so an Add copies
	}
	return nil
}

// preflight answers a preflight of an allowed origin and method: 204 with the allow headers.
// It reports false, having written nothing, for any other: the caller refuses it (corsRefused).
func (c *CORS) preflight(w http.ResponseWriter, r *http.Request) bool {
	allow := c.allowed(r)
	if allow == nil || !corsMethod(r.Header["Access-Control-Request-Method"][0]) {
		return false
	}
	h := w.Header()
	h["Vary"] = c.varyPre
	h["Access-Control-Allow-Origin"] = allow
	h["Access-Control-Allow-Methods"] = c.methods
	h["Access-Control-Allow-Headers"] = c.headers
	h["Access-Control-Max-Age"] = c.maxAge
	if c.credentials != nil {
		h["Access-Control-Allow-Credentials"] = c.credentials
	}
	w.WriteHeader(http.StatusNoContent)
	return true
}

// refuse answers a preflight preflight did not allow: 403 without the allow headers, in the
// path's error format with its X-Error-Code (a browser shows the page no body, but a
// developer's tools and curl do).
func (c *CORS) refuse(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	if c != nil {
		h["Vary"] = c.varyPre
	}
	h["Content-Type"] = jsonType
	h["X-Error-Code"] = corsRefusedCode
	b, status := frontFor(r).error(nil, corsRefused, "")
	w.WriteHeader(status)
	w.Write(b) //nolint:errcheck // the client went away; nothing to do
}

var corsRefusedCode = []string{"CORS_NOT_ALLOWED"}

func corsMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodPost || m == http.MethodHead
}

// actual sets the headers of an answer (any status): Vary: Origin on every one, since the
// answer differs with the Origin sent or not (a cache must not replay an answer to a request
// without Origin to an allowed page), and the allow headers for an allowed origin.
func (c *CORS) actual(h http.Header, r *http.Request) {
	if c == nil {
		return
	}
	h["Vary"] = c.vary
	if len(r.Header["Origin"]) == 0 {
		return
	}
	allow := c.allowed(r)
	if allow == nil {
		return
	}
	h["Access-Control-Allow-Origin"] = allow
	h["Access-Control-Expose-Headers"] = c.expose
	if c.credentials != nil {
		h["Access-Control-Allow-Credentials"] = c.credentials
	}
}
