package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/upstream/fake"
)

// Codex CLI (OpenAI's coding agent, npm @openai/codex) speaks only the Responses API. Its
// requests are kept as fixtures in testdata/codex — every field, item type, tool type and
// header as Codex sends them, with its own prompt and tool texts replaced by placeholder text of
// the same size — and replayed against every engine kind; and when codex is on PATH, the agent
// itself runs against a gateway (`go test -run TestCodexLive -update-codex` records the
// fixtures anew).

var updateCodex = flag.Bool("update-codex", false, "TestCodexLive rewrites testdata/codex from the requests Codex sends")

// codexFixture is one recorded request.
type codexFixture struct {
	Method string            `json:"method"`
	Path   string            `json:"path"`
	Header map[string]string `json:"header"`
	Body   json.RawMessage   `json:"body"`
}

// codexConfig is the gateway both Codex tests run: the sim, an OpenAI-format engine and an
// Anthropic engine on loopback, and another layer0 in front of the first; two keys.
func codexGateway(t *testing.T) string {
	t.Helper()
	vllm := fake.NewOpenAI(fake.Script{Text: "Hello from the fake engine."})
	claude := fake.NewAnthropic(fake.Script{Text: "Hello from the fake engine."})
	t.Cleanup(vllm.Close)
	t.Cleanup(claude.Close)
	peer := vllmPeer(t, vllm.URL)
	return startGateway(t, fmt.Sprintf(`
keys:
  - {name: codex, hash: %s}
  - {name: other, hash: %s}
engines:
  sim: {kind: sim}
  vllm: {kind: openai, url: %q}
  claude: {kind: anthropic, url: %q}
  peer: {kind: layer0, url: %q}
models:
  sim: {engines: [sim]}
  vllm: {engines: [vllm], upstream_model: meta-llama/Llama-3.1-8B-Instruct}
  claude: {engines: [claude], upstream_model: claude-sonnet-4-5}
  chain: {engines: [peer], upstream_model: vllm}
`, authHash("codex-key"), authHash("other-key"), vllm.URL, claude.URL, peer))
}

// TestCodexReplay replays the recorded Codex requests on every engine kind: each must stream to
// response.completed, its sequence numbers without a gap.
func TestCodexReplay(t *testing.T) {
	files, err := filepath.Glob("testdata/codex/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in testdata/codex (%v)", err)
	}
	base := codexGateway(t)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var fx codexFixture
		if err := json.Unmarshal(raw, &fx); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, model := range []string{"sim", "vllm", "claude", "chain"} {
			t.Run(filepath.Base(f)+"/"+model, func(t *testing.T) {
				var body map[string]json.RawMessage
				if err := json.Unmarshal(fx.Body, &body); err != nil {
					t.Fatal(err)
				}
				body["model"], _ = json.Marshal(model)
				b, _ := json.Marshal(body)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, fx.Method, base+fx.Path, bytes.NewReader(b))
				for k, v := range fx.Header {
					req.Header.Set(k, v)
				}
				req.Header.Set("Authorization", "Bearer codex-key")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					msg, _ := io.ReadAll(resp.Body)
					t.Fatalf("status %d: %s", resp.StatusCode, msg)
				}
				types := readEvents(t, resp.Body)
				if len(types) < 3 || types[0] != "response.created" || types[len(types)-1] != "response.completed" {
					t.Errorf("events %v: want response.created … response.completed", types)
				}
			})
		}
	}
}

// readEvents reads an SSE stream of Responses events, checking that each event's name is its
// data's type and that sequence numbers count from 0; it returns the types.
func readEvents(t *testing.T, r io.Reader) []string {
	t.Helper()
	var types []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var ev struct {
				Type string `json:"type"`
				Seq  *int   `json:"sequence_number"`
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev); err != nil {
				t.Fatalf("event %d: %v", len(types), err)
			}
			if ev.Type != name || ev.Seq == nil || *ev.Seq != len(types) {
				t.Fatalf("event %d: name %q, type %q, sequence_number %v", len(types), name, ev.Type, ev.Seq)
			}
			types = append(types, ev.Type)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return types
}

// recorder is a reverse proxy that keeps the requests it forwards: the capture server Codex is
// pointed at.
type recorder struct {
	mu   sync.Mutex
	reqs []codexFixture
}

func (rc *recorder) start(t *testing.T, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.FlushInterval = -1
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h := map[string]string{}
		for k := range r.Header {
			h[strings.ToLower(k)] = r.Header.Get(k)
		}
		rc.mu.Lock()
		rc.reqs = append(rc.reqs, codexFixture{Method: r.Method, Path: r.URL.RequestURI(), Header: h, Body: body})
		rc.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		proxy.ServeHTTP(w, r)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln) //nolint:errcheck // ends at Close
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

func (rc *recorder) take() []codexFixture {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := rc.reqs
	rc.reqs = nil
	return out
}

// runCodex runs `codex exec` (with args after exec) in dir against base with the key, under its
// own CODEX_HOME, and returns its final message.
func runCodex(t *testing.T, home, dir, base, key, model string, args ...string) string {
	t.Helper()
	// Everything Codex would fetch or send beyond the provider is off — update checks, the
	// plugin catalogue, analytics, feedback — so that it talks to nothing but the loopback.
	cfg := fmt.Sprintf(`model = %q
model_provider = "layer0"
check_for_update_on_startup = false
[features]
plugins = false
[analytics]
enabled = false
[feedback]
enabled = false
[model_providers.layer0]
name = "layer0"
base_url = "%s/v1"
env_key = "LAYER0_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
`, model, base)
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	last := filepath.Join(dir, "last-message.txt")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "codex", append([]string{"exec", "--skip-git-repo-check", "-s", "read-only",
		"--output-last-message", last}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CODEX_HOME="+home, "LAYER0_API_KEY="+key, "NO_COLOR=1")
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("codex %v: %v\n%s", args, err, out)
	}
	msg, err := os.ReadFile(last)
	if err != nil {
		t.Fatalf("codex wrote no last message: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(msg))
}

// TestCodexLive runs Codex CLI itself, when it is on PATH: `codex exec` gets an answer on the
// sim, through an OpenAI-format engine and through an Anthropic engine; on the sim a turn in
// which the model calls a tool Codex runs and reads its result; `codex exec resume` continues
// the conversation (Codex sends the whole history each turn, store false). With -update-codex
// the requests it sent become the fixtures TestCodexReplay replays.
func TestCodexLive(t *testing.T) {
	if _, err := exec.LookPath("codex"); err != nil {
		t.Skip("codex is not on PATH (npm install -g @openai/codex): the live Codex test is skipped; TestCodexReplay replays its recorded requests")
	}
	base := codexGateway(t)
	var rec recorder
	proxied := rec.start(t, base)
	dir := t.TempDir()
	for _, model := range []string{"sim", "vllm", "claude"} {
		t.Run(model, func(t *testing.T) {
			msg := runCodex(t, t.TempDir(), dir, proxied, "codex-key", model, "Say hello.")
			if msg == "" || model != "sim" && msg != "Hello from the fake engine." {
				t.Errorf("got answer %q", msg)
			}
			for _, r := range rec.take() {
				if r.Path != "/v1/responses" || r.Header["authorization"] != "Bearer codex-key" {
					t.Errorf("Codex sent %s %s", r.Method, r.Path)
				}
			}
		})
	}

	t.Run("sim/tool", func(t *testing.T) {
		home := t.TempDir()
		// The sim calls the first tool the last user message names, and answers in text after
		// its result.
		msg := runCodex(t, home, dir, proxied, "codex-key", "sim", "Run exec_command to look around.")
		if msg == "" {
			t.Error("no answer after the tool call")
		}
		first := rec.take()
		if len(first) != 2 || !hasItem(first[1].Body, "function_call_output") {
			t.Fatalf("Codex sent %d requests, want 2 (the second with the tool's output)", len(first))
		}
		// resume continues the last session: its request holds the previous turns.
		msg = runCodex(t, home, dir, proxied, "codex-key", "sim", "resume", "--last", "And now?")
		if msg == "" {
			t.Error("no answer on resume")
		}
		again := rec.take()
		if len(again) != 1 || items(again[0].Body) <= items(first[1].Body) {
			t.Fatalf("resume sent %d requests, with %d input items after %d: want the conversation continued",
				len(again), items(again[len(again)-1].Body), items(first[1].Body))
		}
		if *updateCodex {
			writeCodexFixtures(t, map[string]codexFixture{"text.json": first[0], "tool-result.json": first[1], "resume.json": again[0]})
		}
	})
}

func inputItems(body []byte) []map[string]any {
	var b struct {
		Input []map[string]any `json:"input"`
	}
	_ = json.Unmarshal(body, &b)
	return b.Input
}

func items(body []byte) int { return len(inputItems(body)) }

func hasItem(body []byte, typ string) bool {
	for _, it := range inputItems(body) {
		if it["type"] == typ {
			return true
		}
	}
	return false
}

var uuidPattern = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// placeholderKeys are the members whose string values are Codex's own texts (or the machine's):
// replaced by placeholder text of the same length.
var placeholderKeys = map[string]bool{"text": true, "description": true, "instructions": true, "output": true,
	"arguments": true}

// writeCodexFixtures writes the recorded requests with Codex's texts replaced by placeholders,
// ids by zeros, and the key by a placeholder.
func writeCodexFixtures(t *testing.T, fx map[string]codexFixture) {
	t.Helper()
	if err := os.MkdirAll("testdata/codex", 0o755); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(fx))
	for n := range fx {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		f := fx[name]
		var body any
		if err := json.Unmarshal(f.Body, &body); err != nil {
			t.Fatal(err)
		}
		body = scrub(body, "")
		b, err := json.MarshalIndent(body, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		f.Body = b
		h := map[string]string{}
		for k, v := range f.Header {
			switch k {
			case "authorization", "host", "content-length", "accept-encoding":
				continue
			}
			h[k] = scrubString(v)
		}
		f.Header = h
		out, err := json.MarshalIndent(f, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("testdata/codex", name), append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// scrub returns v with the strings of placeholderKeys members replaced and ids zeroed.
func scrub(v any, key string) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = scrub(e, k)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = scrub(e, key)
		}
		return x
	case string:
		if placeholderKeys[key] {
			if key == "arguments" {
				return `{}`
			}
			return placeholder(len(x))
		}
		return scrubString(x)
	}
	return v
}

// scrubString zeroes the UUIDs (session, thread, installation ids) in s and the machine's paths;
// a string that holds a JSON object (Codex's turn metadata) is scrubbed inside, keeping its shape.
func scrubString(s string) string {
	if strings.HasPrefix(s, "{") {
		var v any
		if json.Unmarshal([]byte(s), &v) == nil {
			if b, err := json.Marshal(scrub(v, "")); err == nil {
				return string(b)
			}
		}
	}
	s = uuidPattern.ReplaceAllString(s, "00000000-0000-0000-0000-000000000000")
	if strings.Contains(s, os.TempDir()) || strings.Contains(s, "/root") {
		return placeholder(len(s))
	}
	return s
}

// placeholder returns n bytes of placeholder text.
func placeholder(n int) string {
	const text = "Placeholder text standing in for the agent's own words. "
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(text)
	}
	return b.String()[:n]
}
