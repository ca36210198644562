package e2e

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"go.yaml.in/yaml/v3"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/fakeclock"
	"github.com/layer0ai/layer0/internal/syncbuf"
)

// get fetches url and returns the status, the headers and the body.
func get(t *testing.T, url string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// The admin listener serves the running configuration with every kind of secret redacted — key
// hashes, an engine's credential, Redis URLs with passwords — and the profiles; the public
// listener serves neither.
func TestAdminConfigAndProfiles(t *testing.T) {
	const (
		engineKey   = "sk-engine-value-Q7f2Lx"
		redisPass   = "redis-pass-K4m8Zq"
		clusterPass = "cluster-pass-W2n5Rb"
		keyA, keyB  = "l0-admin-key-a-4Tg7", "l0-admin-key-b-8Pw1"
	)
	t.Setenv("L0_ADMIN_TEST_ENGINE_KEY", engineKey)
	text := `
server:
  addr: 127.0.0.1:0
  admin_addr: 127.0.0.1:0
keys:
  - {name: a, hash: ` + authHash(keyA) + `}
  - {name: b, hash: ` + authHash(keyB) + `}
engines:
  local: {kind: sim}
  vendor: {kind: openai, url: "http://127.0.0.1:1", api_key_env: L0_ADMIN_TEST_ENGINE_KEY}
models:
  local: {engines: [local]}
  vendor: {engines: [vendor], required: false}
store:
  kind: redis
  url: "redis://:` + redisPass + `@127.0.0.1:1,redis://admin:` + clusterPass + `@127.0.0.2:1"
`
	g, base := serveGateway(t, parseConfig(t, text))
	admin := serveAdmin(t, g)

	status, h, body := get(t, admin+"/config")
	if status != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "application/yaml") {
		t.Fatalf("GET /config: %d %s\n%s", status, h.Get("Content-Type"), body)
	}
	for _, secret := range []string{engineKey, redisPass, clusterPass, keyA, keyB, authHash(keyA), authHash(keyB)} {
		if strings.Contains(body, secret) {
			t.Errorf("/config shows the secret %q:\n%s", secret, body)
		}
	}
	var shown struct {
		Keys []struct {
			Name, Hash string
		}
		Engines map[string]struct {
			URL       string `yaml:"url"`
			APIKeyEnv string `yaml:"api_key_env"`
		}
		Models map[string]struct {
			Required bool
		}
	}
	if err := yaml.Unmarshal([]byte(body), &shown); err != nil {
		t.Fatalf("/config is not YAML: %v\n%s", err, body)
	}
	if len(shown.Keys) != 2 || shown.Keys[0].Name != "a" || shown.Keys[0].Hash != "REDACTED" {
		t.Errorf("keys: %+v, want the names with their hashes redacted", shown.Keys)
	}
	if v := shown.Engines["vendor"]; v.URL != "http://127.0.0.1:1" || v.APIKeyEnv != "L0_ADMIN_TEST_ENGINE_KEY" {
		t.Errorf("engine vendor: %+v, want the URL and the variable's name", v)
	}
	if !shown.Models["local"].Required || shown.Models["vendor"].Required {
		t.Errorf("models: %+v, want the defaults filled in (required: true) and vendor's false", shown.Models)
	}

	if status, _, body := get(t, admin+"/debug/pprof/"); status != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("GET /debug/pprof/: %d\n%.300s", status, body)
	}
	if status, _, body := get(t, admin+"/debug/pprof/goroutine?debug=1"); status != http.StatusOK || !strings.Contains(body, "goroutine profile:") {
		t.Errorf("GET /debug/pprof/goroutine: %d\n%.300s", status, body)
	}
	if status, _, body := get(t, admin+"/debug/pprof/heap?debug=1"); status != http.StatusOK || !strings.Contains(body, "heap profile:") {
		t.Errorf("GET /debug/pprof/heap: %d\n%.300s", status, body)
	}
	// A CPU profile runs for its seconds: no write deadline cuts it. pprof's format is gzipped.
	if status, _, body := get(t, admin+"/debug/pprof/profile?seconds=1"); status != http.StatusOK || !strings.HasPrefix(body, "\x1f\x8b") {
		t.Errorf("GET /debug/pprof/profile?seconds=1: %d, %d bytes, want a gzipped profile", status, len(body))
	}
	status, h, body = get(t, admin+"/metrics")
	if status != http.StatusOK || h.Get("X-Response-Time") == "" || h.Get("X-Processing-Time") == "" || h.Get("X-Request-Id") == "" {
		t.Errorf("GET /metrics: %d, headers %v: want the timing headers every answer carries", status, h)
	}
	if !strings.Contains(body, `layer0_build_info{commit="`) || !strings.Contains(body, `go_version="`+runtime.Version()+`"`) {
		t.Errorf("/metrics has no layer0_build_info with this Go version:\n%.2000s", body)
	}
	for _, path := range []string{"/config", "/debug/pprof/", "/debug/pprof/goroutine", "/debug/pprof/cmdline"} {
		if status, _, _ := get(t, base+path); status != http.StatusNotFound {
			t.Errorf("public listener GET %s: %d, want 404", path, status)
		}
	}
}

// /readyz follows the replicas of the required models: an ejected primary makes it 503 naming
// the model and why, a model marked required: false does not, and the end of the ejection makes
// it ready again. The ejection and the return are one log line each, and a request that no
// replica can take gets 503 with retry-after.
func TestReadyzFollowsEngines(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var proc syncbuf.Buffer
	logger := slog.New(slog.NewJSONHandler(&proc, nil))
	g, base := serveGateway(t, parseConfig(t, `
server: {addr: 127.0.0.1:0, admin_addr: 127.0.0.1:0}
engines:
  primary: {kind: sim, sim: {fail: {status: 529, message: "primary overloaded"}}}
  backup: {kind: sim}
models:
  chat: {engines: [primary], fallback: [backup]}
  backup: {engines: [backup]}
  side: {engines: [primary], required: false}
routing: {ejection: {consecutive_failures: 1, base_time: 30s}}
`), layer0.WithClock(clock.Now), layer0.WithLogger(logger))
	admin := serveAdmin(t, g)

	if status, _, body := get(t, admin+"/readyz"); status != http.StatusOK || body != `{"status":"ok"}` {
		t.Fatalf("before any failure: /readyz %d %s", status, body)
	}
	c := anthropicClient(base, option.WithMaxRetries(0))
	var served *http.Response
	if _, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "chat", MaxTokens: 3, Messages: userText("hi")},
		option.WithResponseInto(&served)); err != nil {
		t.Fatal(err)
	}
	if e := served.Header.Get("X-Layer0-Engine"); e != "backup" {
		t.Fatalf("served by %q, want the fallback", e)
	}

	for _, u := range []string{admin + "/readyz", base + "/readyz"} {
		status, _, body := get(t, u)
		var r struct {
			Status  string
			Reasons []string
		}
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("%s: %v: %s", u, err, body)
		}
		if status != http.StatusServiceUnavailable || r.Status != "unavailable" || len(r.Reasons) != 1 ||
			!strings.Contains(r.Reasons[0], `model "chat"`) || !strings.Contains(r.Reasons[0], "primary: ejected") {
			t.Errorf("with primary ejected: %s %d %s, want 503 naming chat (and not side, which is optional)", u, status, body)
		}
	}
	if status, _, _ := get(t, admin+"/healthz"); status != http.StatusOK {
		t.Errorf("/healthz %d: liveness does not follow the engines", status)
	}

	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages",
		strings.NewReader(`{"model":"side","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "30" || resp.Header.Get("X-Error-Code") != "NO_REPLICA" {
		t.Errorf("side with its only replica ejected: %d retry-after %q code %q, want 503, 30, NO_REPLICA",
			resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("X-Error-Code"))
	}

	clock.Advance(31 * time.Second)
	if status, _, body := get(t, admin+"/readyz"); status != http.StatusOK {
		t.Errorf("after the ejection ended: /readyz %d %s", status, body)
	}
	logs := proc.String()
	for _, want := range []string{"replica ejected", "replica back from ejection"} {
		n := 0
		for line := range strings.Lines(logs) {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("log line not JSON: %q", line)
			}
			if rec["msg"] == want && rec["engine"] == "primary" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d log lines %q for primary, want 1:\n%s", n, want, logs)
		}
	}
}

// Health checks and metrics scrapes stay out of the access log unless
// log.access_log.scrapes is set; log.access_log.format text writes key=value lines.
func TestAccessLogScrapesAndFormat(t *testing.T) {
	for _, tc := range []struct {
		settings string
		scrapes  bool
		text     bool
	}{{"{}", false, false}, {"{scrapes: true, format: text}", true, true}} {
		var access syncbuf.Buffer
		g, base := serveGateway(t, parseConfig(t, "log: {access_log: "+tc.settings+"}\n"), layer0.WithAccessLog(&access))
		for _, path := range []string{"/healthz", "/readyz", "/metrics", "/v1/models"} {
			if status, _, _ := get(t, base+path); status != http.StatusOK {
				t.Fatalf("%s: %d", path, status)
			}
		}
		g.Close() // writes what is queued
		logged := map[string]bool{}
		for line := range strings.Lines(access.String()) {
			if tc.text {
				if !strings.HasPrefix(line, "time=") {
					t.Errorf("%s: not a text line: %q", tc.settings, line)
				}
				_, rest, _ := strings.Cut(line, " path=")
				path, _, _ := strings.Cut(rest, " ")
				logged[path] = true
				continue
			}
			var rec struct{ Path string }
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("%s: not JSON: %q", tc.settings, line)
			}
			logged[rec.Path] = true
		}
		want := map[string]bool{"/v1/models": true}
		if tc.scrapes {
			want = map[string]bool{"/v1/models": true, "/healthz": true, "/readyz": true, "/metrics": true}
		}
		if len(logged) != len(want) {
			t.Errorf("%s: logged %v, want %v", tc.settings, logged, want)
		}
		for p := range want {
			if !logged[p] {
				t.Errorf("%s: %s not logged (logged %v)", tc.settings, p, logged)
			}
		}
	}
}
