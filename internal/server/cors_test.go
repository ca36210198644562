package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/server"
	"github.com/layer0ai/layer0/internal/syncbuf"
)

const (
	corsOrigin = "https://app.example"
	corsKey    = "l0-cors-key"
	corsTiny   = "l0-cors-tiny"
)

// serveCORS serves a gateway configured with extra (YAML: cors, keys, playground) and the sim
// on loopback; it returns the base URL, the gateway, and a func that stops it and returns its
// access log.
func serveCORS(t *testing.T, extra string) (string, *layer0.Gateway, func() string) {
	t.Helper()
	cfg, err := config.Parse([]byte(extra + simModel))
	if err != nil {
		t.Fatal(err)
	}
	var log syncbuf.Buffer
	g, err := layer0.New(cfg, layer0.WithAccessLog(&log))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.HTTPServer(g, server.ListenOptions{ReadHeaderTimeout: 30 * time.Second})
	go srv.Serve(ln) //nolint:errcheck // ends at Close
	closed := false
	t.Cleanup(func() {
		srv.Close()
		if !closed {
			g.Close()
		}
	})
	return "http://" + ln.Addr().String(), g, func() string {
		srv.Close()
		g.Close() // writes the queued records
		closed = true
		return log.String()
	}
}

const simModel = `
engines: {s: {kind: sim}}
models: {sim: {engines: [s]}}
`

func keyed(cors string) string {
	return cors + fmt.Sprintf(`
keys:
  - {name: main, hash: %s}
  - {name: tiny, hash: %s, limits: {requests_per_minute: 1}}
`, auth.HashHex(corsKey), auth.HashHex(corsTiny))
}

func do(t *testing.T, method, url string, body string, h map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp
}

func preflight(t *testing.T, base, origin, method string) *http.Response {
	return do(t, http.MethodOptions, base+"/v1/messages", "", map[string]string{
		"Origin": origin, "Access-Control-Request-Method": method,
		"Access-Control-Request-Headers": "content-type,x-api-key,anthropic-version,x-binary-version",
	})
}

// list splits a comma-separated header value into its lower-case items.
func list(v string) map[string]bool {
	m := map[string]bool{}
	for _, s := range strings.Split(v, ",") {
		m[strings.ToLower(strings.TrimSpace(s))] = true
	}
	return m
}

func TestCORSPreflight(t *testing.T) {
	base, _, accessLog := serveCORS(t, keyed(`cors: {allowed_origins: ["`+corsOrigin+`"], max_age: 15m}`))

	resp := preflight(t, base, corsOrigin, "POST")
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("preflight from an allowed origin: %d, want 204", resp.StatusCode)
	}
	h := resp.Header
	if got := h.Get("Access-Control-Allow-Origin"); got != corsOrigin {
		t.Errorf("Access-Control-Allow-Origin %q, want %q", got, corsOrigin)
	}
	if got := h.Get("Access-Control-Max-Age"); got != "900" {
		t.Errorf("Access-Control-Max-Age %q, want 900", got)
	}
	if !list(h.Get("Access-Control-Allow-Methods"))["post"] || !list(h.Get("Access-Control-Allow-Methods"))["get"] {
		t.Errorf("Access-Control-Allow-Methods %q, want GET and POST", h.Get("Access-Control-Allow-Methods"))
	}
	allowed := list(h.Get("Access-Control-Allow-Headers"))
	for _, want := range []string{"content-type", "x-api-key", "authorization", "anthropic-version", "anthropic-beta",
		"anthropic-dangerous-direct-browser-access", "x-binary-version", "x-offload-target", "x-layer0-debug",
		"cache-control", "x-session-id"} {
		if !allowed[want] {
			t.Errorf("Access-Control-Allow-Headers lacks %s: %q", want, h.Get("Access-Control-Allow-Headers"))
		}
	}
	if !list(h.Get("Vary"))["origin"] {
		t.Errorf("Vary %q, want Origin", h.Get("Vary"))
	}
	if h.Get("Access-Control-Allow-Credentials") != "" {
		t.Error("Access-Control-Allow-Credentials sent without allow_credentials")
	}

	// Refused: another origin, and an allowed origin asking for a method the APIs do not have.
	for _, c := range []struct{ origin, method string }{{"https://evil.example", "POST"}, {corsOrigin, "DELETE"}} {
		resp := preflight(t, base, c.origin, c.method)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("preflight %s %s: %d, want 403", c.origin, c.method, resp.StatusCode)
		}
		for k := range resp.Header {
			if strings.HasPrefix(k, "Access-Control-") {
				t.Errorf("preflight %s %s: refused but carries %s", c.origin, c.method, k)
			}
		}
		var e struct {
			Type  string `json:"type"`
			Error struct{ Type, Message string }
		}
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || e.Error.Type != "permission_error" || !strings.Contains(e.Error.Message, "cors.allowed_origins") {
			t.Errorf("preflight %s %s: body %+v (%v), want a permission_error naming cors.allowed_origins", c.origin, c.method, e, err)
		}
	}

	// A refused preflight of an OpenAI path answers in OpenAI's format; every refusal carries
	// X-Error-Code.
	resp = do(t, http.MethodOptions, base+"/v1/chat/completions", "", map[string]string{
		"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
	var oe struct {
		Error struct{ Type, Message, Code string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&oe); err != nil || resp.StatusCode != http.StatusForbidden ||
		oe.Error.Code != "cors_not_allowed" || !strings.Contains(oe.Error.Message, "cors.allowed_origins") ||
		resp.Header.Get("X-Error-Code") != "CORS_NOT_ALLOWED" {
		t.Errorf("refused preflight of /v1/chat/completions: %d %+v (%v), X-Error-Code %q; want a 403 OpenAI error and CORS_NOT_ALLOWED",
			resp.StatusCode, oe, err, resp.Header.Get("X-Error-Code"))
	}

	// An OPTIONS that is not a preflight is an ordinary request: 405 in the API's format.
	if resp := do(t, http.MethodOptions, base+"/v1/messages", "", map[string]string{"x-api-key": corsKey}); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("OPTIONS without a preflight's headers: %d, want 405", resp.StatusCode)
	}
	// Preflights touch nothing else, not even the access log: its one record is the plain OPTIONS.
	if log := accessLog(); strings.Count(log, "\n") != 1 || !strings.Contains(log, `"method":"OPTIONS"`) {
		t.Errorf("access log: want one record, of the plain OPTIONS; got:\n%s", log)
	}
}

func TestCORSNoOriginAllowedByDefault(t *testing.T) {
	base, g, _ := serveCORS(t, keyed(""))
	if resp := preflight(t, base, corsOrigin, "POST"); resp.StatusCode != http.StatusForbidden || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight without cors: %d, ACAO %q; want 403 and none", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
	}
	resp := do(t, http.MethodGet, base+"/v1/models", "", map[string]string{"Origin": corsOrigin, "x-api-key": corsKey, "anthropic-version": "2023-06-01"})
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != "" || resp.Header.Get("Vary") != "" {
		t.Errorf("answer without cors: %d, ACAO %q, Vary %q; want 200 and no CORS headers", resp.StatusCode,
			resp.Header.Get("Access-Control-Allow-Origin"), resp.Header.Get("Vary"))
	}
	// A reload that allows the origin applies to the next preflight, and one that removes it too.
	for _, c := range []struct {
		cors   string
		status int
	}{{`cors: {allowed_origins: ["` + corsOrigin + `"]}`, http.StatusNoContent}, {"", http.StatusForbidden}} {
		cfg, err := config.Parse([]byte(keyed(c.cors) + simModel))
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Reload(cfg); err != nil {
			t.Fatal(err)
		}
		if resp := preflight(t, base, corsOrigin, "POST"); resp.StatusCode != c.status {
			t.Errorf("after a reload to %q: preflight %d, want %d", c.cors, resp.StatusCode, c.status)
		}
	}
}

// TestCORSAnswers checks the headers of actual answers: to an allowed origin every answer,
// errors included, lets the page read it and its headers; another origin gets none.
func TestCORSAnswers(t *testing.T) {
	base, _, _ := serveCORS(t, keyed(`cors: {allowed_origins: ["`+corsOrigin+`", "http://localhost:3000"], exposed_headers: [x-custom]}`))
	msg := `{"model":"sim","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	anth := func(key string) map[string]string {
		return map[string]string{"Origin": corsOrigin, "x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json"}
	}
	do(t, http.MethodPost, base+"/v1/messages", msg, anth(corsTiny)) // spends the tiny key's one request
	cases := []struct {
		name   string
		method string
		body   string
		h      map[string]string
		status int
	}{
		{"ok", http.MethodPost, msg, anth(corsKey), http.StatusOK},
		{"unauthorized", http.MethodPost, msg, anth("l0-wrong"), http.StatusUnauthorized},
		{"rate limited", http.MethodPost, msg, anth(corsTiny), http.StatusTooManyRequests},
		{"invalid", http.MethodPost, `{"model":"sim","max_tokens":-1,"messages":[]}`, anth(corsKey), http.StatusBadRequest},
		{"not found", http.MethodGet, "", anth(corsKey), http.StatusNotFound},
	}
	for _, c := range cases {
		path := "/v1/messages"
		if c.name == "not found" {
			path = "/v1/nothing"
		}
		resp := do(t, c.method, base+path, c.body, c.h)
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d", c.name, resp.StatusCode, c.status)
		}
		h := resp.Header
		if h.Get("Access-Control-Allow-Origin") != corsOrigin || !list(h.Get("Vary"))["origin"] {
			t.Errorf("%s: ACAO %q, Vary %q; want the origin and Origin", c.name, h.Get("Access-Control-Allow-Origin"), h.Get("Vary"))
		}
		exposed := list(h.Get("Access-Control-Expose-Headers"))
		for _, want := range []string{"x-request-id", "request-id", "x-processing-time", "x-response-time", "retry-after",
			"anthropic-ratelimit-requests-remaining", "x-ratelimit-remaining-requests", "x-cache", "x-layer0-cache",
			"x-binary-vocab", "x-binary-version", "x-error-code", "x-custom"} {
			if !exposed[want] {
				t.Errorf("%s: Access-Control-Expose-Headers lacks %s", c.name, want)
			}
		}
		if c.status == http.StatusTooManyRequests && h.Get("Retry-After") == "" {
			t.Errorf("%s: no Retry-After to expose", c.name)
		}
	}
	// The binary protocol's vocabulary keeps its own Vary next to Origin.
	resp := do(t, http.MethodGet, base+"/v1/binary/vocab/", "", map[string]string{"Origin": corsOrigin})
	if v := list(strings.Join(resp.Header.Values("Vary"), ",")); resp.StatusCode == http.StatusOK && (!v["origin"] || !v["accept-encoding"]) {
		t.Errorf("vocabulary: Vary %q, want Origin and Accept-Encoding", resp.Header.Values("Vary"))
	}
	// Another origin: Vary only (caches must not serve one origin's answer to another).
	resp = do(t, http.MethodGet, base+"/v1/models", "", map[string]string{"Origin": "https://evil.example", "x-api-key": corsKey, "anthropic-version": "2023-06-01"})
	if resp.Header.Get("Access-Control-Allow-Origin") != "" || resp.Header.Get("Access-Control-Expose-Headers") != "" || resp.Header.Get("Vary") != "Origin" {
		t.Errorf("another origin: ACAO %q, expose %q, Vary %q; want none, none, Origin", resp.Header.Get("Access-Control-Allow-Origin"),
			resp.Header.Get("Access-Control-Expose-Headers"), resp.Header.Get("Vary"))
	}
}

func TestCORSAnyOriginAndCredentials(t *testing.T) {
	// "*" without keys: any origin, answered with "*".
	base, _, _ := serveCORS(t, `cors: {allowed_origins: ["*"]}`)
	resp := preflight(t, base, "http://whatever.example:8000", "POST")
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("any origin: %d, ACAO %q; want 204 and *", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
	}
	// Credentials: the origin itself, never "*", and Allow-Credentials on both.
	base, _, _ = serveCORS(t, keyed(`cors: {allowed_origins: ["`+corsOrigin+`"], allow_credentials: true}`))
	resp = preflight(t, base, corsOrigin, "GET")
	if resp.Header.Get("Access-Control-Allow-Origin") != corsOrigin || resp.Header.Get("Access-Control-Allow-Credentials") != "true" {
		t.Errorf("credentials preflight: ACAO %q, credentials %q", resp.Header.Get("Access-Control-Allow-Origin"), resp.Header.Get("Access-Control-Allow-Credentials"))
	}
	resp = do(t, http.MethodGet, base+"/v1/models", "", map[string]string{"Origin": corsOrigin, "x-api-key": corsKey})
	if resp.Header.Get("Access-Control-Allow-Credentials") != "true" {
		t.Errorf("credentials answer: Access-Control-Allow-Credentials %q, want true", resp.Header.Get("Access-Control-Allow-Credentials"))
	}
}

// TestPlaygroundServed checks the playground's page and files, the redirect of /, and that a
// configuration without playground serves neither.
func TestPlaygroundServed(t *testing.T) {
	base, _, _ := serveCORS(t, "playground: true\n")
	js, err := os.ReadFile("../../web/layer0.js")
	if err != nil {
		t.Fatal(err)
	}
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/playground" {
		t.Errorf("GET /: %d to %q, want 302 to /playground", resp.StatusCode, resp.Header.Get("Location"))
	}
	for path, want := range map[string]string{"/playground": "text/html", "/playground/playground.js": "text/javascript",
		"/playground/playground.css": "text/css", "/playground/layer0.js": "text/javascript"} {
		resp := do(t, http.MethodGet, base+path, "", nil)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), want) {
			t.Errorf("GET %s: %d %q, want 200 %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), want)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "connect-src 'self'") || !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("GET %s: Content-Security-Policy %q keeps nothing to this origin", path, csp)
		}
		b, _ := io.ReadAll(resp.Body)
		if path == "/playground/layer0.js" && !bytes.Equal(b, js) {
			t.Errorf("GET %s: not web/layer0.js", path)
		}
		if path == "/playground" && (bytes.Contains(b, []byte("http://")) || bytes.Contains(b, []byte("https://"))) {
			t.Errorf("GET %s: the page names another site", path)
		}
	}
	if resp := do(t, http.MethodGet, base+"/playground/nothing.js", "", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /playground/nothing.js: %d, want 404", resp.StatusCode)
	}
	if resp := do(t, http.MethodPost, base+"/playground", "", nil); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /playground: %d, want 405", resp.StatusCode)
	}

	off, _, _ := serveCORS(t, "")
	for _, path := range []string{"/", "/playground", "/playground/layer0.js"} {
		if resp := do(t, http.MethodGet, off+path, "", nil); resp.StatusCode != http.StatusNotFound {
			t.Errorf("without playground, GET %s: %d, want 404", path, resp.StatusCode)
		}
	}
}

// nullWriter is the cheapest http.ResponseWriter: it keeps the header map between requests
// (cleared), so a benchmark counts the handler's cost, not the recorder's.
type nullWriter struct {
	h      http.Header
	status int
}

func (w *nullWriter) Header() http.Header         { return w.h }
func (w *nullWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nullWriter) WriteHeader(code int)        { w.status = code }

// BenchmarkCORSPreflight measures answering a preflight in the handler (no network):
// "preflight" is an allowed origin's, "refused" another origin's; "options_405" is an OPTIONS
// without a preflight's headers, which takes the ordinary way (an exchange, the access log) to
// its 405 — what every preflight cost before CORS was answered up front.
func BenchmarkCORSPreflight(b *testing.B) {
	cfg, err := config.Parse([]byte(keyed(`cors: {allowed_origins: ["`+corsOrigin+`"]}`) + `
engines: {s: {kind: sim}}
models: {sim: {engines: [s]}}
`))
	if err != nil {
		b.Fatal(err)
	}
	g, err := layer0.New(cfg, layer0.WithAccessLog(io.Discard))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Close() })
	for _, c := range []struct {
		name   string
		h      http.Header
		status int
	}{
		{"preflight", http.Header{"Origin": {corsOrigin}, "Access-Control-Request-Method": {"POST"},
			"Access-Control-Request-Headers": {"content-type,x-api-key"}}, http.StatusNoContent},
		{"refused", http.Header{"Origin": {"https://evil.example"}, "Access-Control-Request-Method": {"POST"}}, http.StatusForbidden},
		{"options_405", http.Header{"Origin": {corsOrigin}, "X-Api-Key": {corsKey}}, http.StatusMethodNotAllowed},
	} {
		b.Run(c.name, func(b *testing.B) {
			req, _ := http.NewRequest(http.MethodOptions, "http://gw/v1/messages", nil)
			req.Header = c.h
			w := &nullWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				g.ServeHTTP(w, req)
			}
			if w.status != c.status {
				b.Fatalf("status %d, want %d", w.status, c.status)
			}
		})
	}
}

// TestCORSVaryWithoutOrigin: with origins configured, an answer to a request that sent no
// Origin (a navigation, curl) still carries Vary: Origin, so that a cache — the browser's own
// included — does not replay it, without Access-Control-Allow-Origin, to an allowed page.
func TestCORSVaryWithoutOrigin(t *testing.T) {
	base, _, _ := serveCORS(t, keyed(`cors: {allowed_origins: ["`+corsOrigin+`"]}`))
	for _, path := range []string{"/v1/models", "/v1/binary/vocab"} {
		resp := do(t, http.MethodGet, base+path, "", map[string]string{"x-api-key": corsKey, "anthropic-version": "2023-06-01"})
		if resp.StatusCode != http.StatusOK || !list(strings.Join(resp.Header.Values("Vary"), ","))["origin"] ||
			resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("GET %s without Origin: %d, Vary %q, ACAO %q; want 200, Origin and none", path, resp.StatusCode,
				resp.Header.Values("Vary"), resp.Header.Get("Access-Control-Allow-Origin"))
		}
	}
}
