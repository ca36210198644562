package e2e

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/metrics"
	"github.com/layer0ai/layer0/internal/syncbuf"
	"github.com/layer0ai/layer0/internal/upstream/fake"
)

func TestGatewayNegotiate(t *testing.T) {
	_, base := serveGateway(t, parseConfig(t, `
keys:
  - {name: any, hash: `+authHash("l0-any")+`}
  - {name: limited, hash: `+authHash("l0-limited")+`, models: [local]}
engines:
  sim: {kind: sim}
  vllm: {kind: openai, url: "http://10.9.8.7:8000"}
models:
  local: {engines: [sim]}
  remote: {engines: [vllm]}
`))
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	tests := []struct {
		method, query, body, key string
		status                   int
		location                 string
	}{
		{"GET", "?model=local", "", "l0-any", 302, "/v1/messages"},
		{"GET", "?model=remote", "", "l0-any", 302, "http://10.9.8.7:8000"},
		{"POST", "", `{"model":"remote","max_tokens":1,"messages":[]}`, "l0-any", 302, "http://10.9.8.7:8000"},
		{"GET", "?model=remote", "", "", 401, ""},
		{"GET", "?model=remote", "", "l0-limited", 403, ""},
		{"GET", "?model=nope", "", "l0-any", 404, ""},
		{"GET", "", "", "l0-any", 400, ""},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest(tt.method, base+"/v1/layer/negotiate"+tt.query, strings.NewReader(tt.body))
		if tt.key != "" {
			req.Header.Set("X-Api-Key", tt.key)
		}
		if tt.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.status {
			t.Errorf("%s %s: got %d, want %d", tt.method, tt.query, resp.StatusCode, tt.status)
			continue
		}
		if tt.status != 302 {
			continue
		}
		if got := resp.Header.Get("Location"); got != tt.location {
			t.Errorf("%s %s: location %q, want %q", tt.method, tt.query, got, tt.location)
		}
		if got := resp.Header.Get("Deprecation"); got != "true" {
			t.Errorf("deprecation: got %q, want true", got)
		}
		if _, err := http.ParseTime(resp.Header.Get("Sunset")); err != nil {
			t.Errorf("sunset %q is not an HTTP date: %v", resp.Header.Get("Sunset"), err)
		}
	}
}

// TestGatewayUtilizationAndHealth checks the background loop: an engine whose vLLM metrics say
// it is saturated is skipped while another replica can serve, one whose health checks fail is
// taken out, and an embedded sim's load is served in the vLLM format for others to scrape.
func TestGatewayUtilizationAndHealth(t *testing.T) {
	busy := fake.NewOpenAI(fake.Script{})
	defer busy.Close()
	busyMetrics := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			w.Write(metrics.AppendVLLM(nil, "m", metrics.Load{Running: 12, KVCacheUsage: 0.97})) //nolint:errcheck
			return
		}
		busy.Config.Handler.ServeHTTP(w, r)
	}))
	defer busyMetrics.Close()
	sick := fake.NewOpenAI(fake.Script{})
	defer sick.Close()
	sickHealth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		sick.Config.Handler.ServeHTTP(w, r)
	}))
	defer sickHealth.Close()

	_, base := serveGateway(t, parseConfig(t, `
engines:
  busy: {kind: openai, url: "`+busyMetrics.URL+`", metrics_path: /metrics}
  sick: {kind: openai, url: "`+sickHealth.URL+`", health_path: /health}
  idle: {kind: sim}
models:
  m: {engines: [busy, sick, idle]}
routing:
  picker: round_robin
  utilization_interval: 20ms
  health: {interval: 20ms, unhealthy_threshold: 2}
`))
	waitFor(t, "busy's utilisation scraped and sick marked down", func() bool {
		u, _ := findMetric(t, base, "layer0_engine_utilization", `engine="busy"`)
		up, _ := findMetric(t, base, "layer0_engine_up", `engine="sick"`)
		return u == 0.97 && up == 0
	})
	c := anthropicClient(base)
	for i := range 6 {
		var resp *http.Response
		if _, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "m", MaxTokens: 3,
			Messages: userText("hi")}, option.WithResponseInto(&resp)); err != nil {
			t.Fatal(err)
		}
		if got := resp.Header.Get("X-Layer0-Engine"); got != "idle" {
			t.Errorf("request %d served by %q, want idle", i, got)
		}
	}
	if n := len(busy.Requests()) + len(sick.Requests()); n != 0 {
		t.Errorf("busy and sick engines got %d requests, want 0", n)
	}

	// The sim's load, as another layer0 or a test would scrape it.
	resp, err := http.Get(base + "/metrics/engines/idle")
	if err != nil {
		t.Fatal(err)
	}
	l, err := metrics.ParseVLLM(resp.Body)
	resp.Body.Close()
	if err != nil || l.Utilization() != 0 {
		t.Errorf("idle sim's load: got %+v %v, want parsed and idle", l, err)
	}
}

// TestGatewaySecretsNotLogged captures the process log and the access log of a gateway that
// sees valid, wrong and missing keys, an engine that echoes its credential in an error, and a
// reload — and checks that no API key and no engine credential appears in either.
func TestGatewaySecretsNotLogged(t *testing.T) {
	const (
		alphaKey  = "l0-secret-alpha-5Yx9Qm2"
		wrongKey  = "l0-wrong-key-Zz81Kq"
		engineKey = "sk-engine-credential-3fJ8Lw"
	)
	t.Setenv("L0_TEST_ENGINE_KEY", engineKey)
	vendor := fake.NewOpenAI(fake.Script{Key: "a-different-credential"}) // answers 401 echoing what it got
	defer vendor.Close()
	var proc, access syncbuf.Buffer
	logger := slog.New(slog.NewJSONHandler(&proc, &slog.HandlerOptions{Level: slog.LevelDebug}))
	text := `
keys:
  - {name: alpha, hash: ` + authHash(alphaKey) + `}
engines:
  sim: {kind: sim}
  vendor: {kind: openai, url: "` + vendor.URL + `", api_key_env: L0_TEST_ENGINE_KEY}
models:
  sim: {engines: [sim]}
  vendor: {engines: [vendor], fallback: [sim]}
  vendor-only: {engines: [vendor]}
log: {level: debug}
`
	g, base := serveGateway(t, parseConfig(t, text), layer0.WithLogger(logger), layer0.WithAccessLog(&access))
	ctx := context.Background()
	good := anthropicClient(base, option.WithAPIKey(alphaKey))
	if _, err := good.Messages.New(ctx, anthropic.MessageNewParams{Model: "sim", MaxTokens: 3, Messages: userText("hi")}); err != nil {
		t.Fatal(err)
	}
	_, err := good.Messages.New(ctx, anthropic.MessageNewParams{Model: "vendor-only", MaxTokens: 3, Messages: userText("hi")})
	if err == nil {
		t.Fatal("the engine refusing its credential: got success")
	}
	if _, err := good.Messages.New(ctx, anthropic.MessageNewParams{Model: "vendor", MaxTokens: 3, Messages: userText("hi")}); err != nil {
		t.Fatal(err)
	}
	wrong := anthropicClient(base, option.WithAPIKey(wrongKey))
	_, err = wrong.Messages.New(ctx, anthropic.MessageNewParams{Model: "sim", MaxTokens: 3, Messages: userText("hi")})
	assertAPIError(t, err, 401, "authentication_error")
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+wrongKey)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	if err := g.Reload(parseConfig(t, text)); err != nil {
		t.Fatal(err)
	}
	g.Close() // writes the queued access log records
	if len(vendor.Requests()) == 0 {
		t.Fatal("the vendor engine was never called")
	}

	logs := proc.String() + access.String()
	if !strings.Contains(logs, `"key":"alpha"`) {
		t.Errorf("the access log does not name the key (want \"key\":\"alpha\"):\n%s", logs)
	}
	for _, secret := range []string{alphaKey, wrongKey, engineKey} {
		if strings.Contains(logs, secret) {
			t.Errorf("the logs contain the secret %q:\n%s", secret, logs)
		}
	}
}

// TestGatewayMetrics checks the per-request metrics written from the record.
func TestGatewayMetrics(t *testing.T) {
	_, base := serveGateway(t, parseConfig(t, testConfig))
	c := anthropicClient(base)
	for range 3 {
		if _, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "sim", MaxTokens: 5,
			Messages: userText("count me")}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "e400", MaxTokens: 5, Messages: userText("x")})
	assertAPIError(t, err, 400, "invalid_request_error")
	for _, m := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"layer0_requests_total", []string{`model="sim"`, `outcome="ok"`, `format="anthropic"`}, 3},
		{"layer0_requests_total", []string{`model="e400"`, `outcome="invalid"`}, 1},
		{"layer0_tokens_total", []string{`model="sim"`, `kind="output"`}, 15},
		{"layer0_request_duration_seconds_count", []string{`model="sim"`}, 3},
		{"layer0_time_to_first_token_seconds_count", []string{`model="sim"`}, 3},
		{"layer0_overhead_seconds_count", nil, 4},
		{"layer0_engine_up", []string{`engine="sim"`}, 1},
	} {
		if got := metricValue(t, base, m.name, m.labels...); got != m.want {
			t.Errorf("%s%v: got %v, want %v", m.name, m.labels, got, m.want)
		}
	}
}
