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
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/upstream/fake"
)

// Claude Code against layer0. The fixtures in testdata/claudecode are requests Claude Code sent,
// recorded by recordClaudeCode (go test -run TestClaudeCodeFixtures -update-claude-code, with
// claude on PATH): every field, role, block type, query and header as it sent them, with its own
// prompt and tool texts replaced by placeholder text of the same size (those texts are its
// authors', not ours). TestClaudeCodeFixtures replays them on every engine kind;
// TestClaudeCodeLive runs the claude binary itself when it is installed.

var updateClaudeCode = flag.Bool("update-claude-code", false,
	"record testdata/claudecode again by running the claude binary against a capture server")

// claudeCodeFixtures are the recorded requests: print mode's only request, and the second
// request of a session in which the model called the Read tool (it holds the tool call and its
// result).
var claudeCodeFixtures = []string{"print", "tool"}

// claudeFixture is one recorded request.
type claudeFixture struct {
	Method string          `json:"method"`
	URL    string          `json:"url"`
	Header http.Header     `json:"header"`
	Body   json.RawMessage `json:"body"`
}

func loadClaudeFixture(t *testing.T, name string) claudeFixture {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "claudecode", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var f claudeFixture
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return f
}

// claudeCodeGateway serves the model sim on the simulator, vllm on a fake vLLM and claude on a
// fake Messages API, both on loopback.
func claudeCodeGateway(t *testing.T) (base string, vllm, claude *fake.Server, rec *bodyRecorder) {
	t.Helper()
	vllm = fake.NewOpenAI(fake.Script{Text: "Hello from the fake engine.", TextOnly: true})
	claude = fake.NewAnthropic(fake.Script{Text: "Hello from the fake engine.", TextOnly: true})
	t.Cleanup(vllm.Close)
	t.Cleanup(claude.Close)
	g, err := layer0.New(parseConfig(t, fmt.Sprintf(`
engines:
  sim: {kind: sim}
  vllm: {kind: openai, url: %q}
  claude: {kind: anthropic, url: %q}
models:
  sim: {engines: [sim]}
  vllm: {engines: [vllm]}
  claude: {engines: [claude]}
  claude-cached: {engines: [claude], cache: {enabled: true, cache_sampled: true}}
`, vllm.URL, claude.URL)))
	if err != nil {
		t.Fatal(err)
	}
	rec = &bodyRecorder{h: g}
	base = serveHandler(t, rec)
	t.Cleanup(func() { g.Close() })
	return base, vllm, claude, rec
}

func TestClaudeCodeFixtures(t *testing.T) {
	if *updateClaudeCode {
		recordClaudeCode(t)
	}
	base, vllm, claude, _ := claudeCodeGateway(t)
	for _, name := range claudeCodeFixtures {
		f := loadClaudeFixture(t, name)
		for _, model := range []string{"sim", "vllm", "claude", "claude-cached"} {
			t.Run(name+"/"+model, func(t *testing.T) {
				body := withModel(t, f.Body, model)
				events, _ := replayClaude(t, base, f, body)
				if events[0] != "message_start" || events[len(events)-1] != "message_stop" {
					t.Errorf("events %v, want message_start … message_stop", events)
				}
				switch model {
				case "claude":
					// Pass-through: the body, the beta headers and the query as Claude Code sent them.
					got := last(t, claude)
					if got.URL != "/v1/messages?beta=true" {
						t.Errorf("engine got %s, want /v1/messages?beta=true", got.URL)
					}
					if g, w := got.Header.Get("Anthropic-Beta"), f.Header.Get("Anthropic-Beta"); g != w {
						t.Errorf("engine got anthropic-beta %q, want %q", g, w)
					}
					if diff := cmp.Diff(decodeAny(t, body), decodeAny(t, got.Body)); diff != "" {
						t.Errorf("engine got another body (-sent +forwarded):\n%s", diff)
					}
				case "claude-cached":
					// Claude Code's requests carry fields layer0 does not act on (thinking,
					// output_config, …), which the cache key could not tell apart: the cache
					// leaves them alone, and they pass through whole as on an uncached model.
					got := last(t, claude)
					if got.URL != "/v1/messages?beta=true" || got.Header.Get("Anthropic-Beta") != f.Header.Get("Anthropic-Beta") {
						t.Errorf("engine got %s with anthropic-beta %q, want the client's", got.URL, got.Header.Get("Anthropic-Beta"))
					}
					if diff := cmp.Diff(decodeAny(t, body), decodeAny(t, got.Body)); diff != "" {
						t.Errorf("engine got another body (-sent +forwarded):\n%s", diff)
					}
					n := len(claude.Requests())
					if _, h := replayClaude(t, base, f, body); h.Get("X-Layer0-Cache") != "bypass" || len(claude.Requests()) != n+1 {
						t.Errorf("the same request again: X-Layer0-Cache %q, %d more engine requests; want bypass, one", h.Get("X-Layer0-Cache"), len(claude.Requests())-n)
					}
				case "vllm":
					// Translated: each system message of the conversation at its place.
					if g, w := openAIRoles(t, last(t, vllm).Body), wantOpenAIRoles(t, f.Body); !cmp.Equal(g, w) {
						t.Errorf("engine got roles %v, want %v", g, w)
					}
				}
			})
		}
	}
}

// replayClaude sends the fixture's request with body to the gateway as Claude Code sent it (its
// headers, its query) and returns the names of the stream's events and the response's header.
func replayClaude(t *testing.T, base string, f claudeFixture, body []byte) ([]string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(f.Method, base+f.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range f.Header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content type %q, want text/event-stream", ct)
	}
	var events []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			if name == "error" {
				t.Fatalf("the stream carried an error event")
			}
			events = append(events, name)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(events) == 0 {
		t.Fatal("no events")
	}
	return events, resp.Header
}

func last(t *testing.T, s *fake.Server) fake.Request {
	t.Helper()
	reqs := s.Requests()
	if len(reqs) == 0 {
		t.Fatal("the engine received no request")
	}
	return reqs[len(reqs)-1]
}

func withModel(t *testing.T, body []byte, model string) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	m["model"], _ = json.Marshal(model)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeAny(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	return v
}

// openAIRoles lists the roles of a Chat Completions body's messages.
func openAIRoles(t *testing.T, body []byte) []string {
	t.Helper()
	var r struct {
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range r.Messages {
		roles = append(roles, m.Role)
	}
	return roles
}

// wantOpenAIRoles is the roles a Messages body becomes in Chat Completions: the top-level system
// prompt first, then each message at its place, a user message of tool results as tool messages.
func wantOpenAIRoles(t *testing.T, body []byte) []string {
	t.Helper()
	var r struct {
		System   json.RawMessage `json:"system"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	roles := []string{}
	if len(r.System) > 0 {
		roles = append(roles, "system")
	}
	for _, m := range r.Messages {
		if m.Role == "user" && bytes.Contains(m.Content, []byte(`"tool_result"`)) {
			roles = append(roles, "tool")
			continue
		}
		roles = append(roles, m.Role)
	}
	return roles
}

// TestClaudeCodeLive runs Claude Code itself against layer0: print mode on the simulator, through
// an openai engine and through an anthropic engine, and on the simulator a session in which the
// model calls Claude Code's Read tool and gets the file back.
func TestClaudeCodeLive(t *testing.T) {
	claudeBin, err := exec.LookPath("claude")
	if err != nil {
		t.Skip("claude is not on PATH (npm install -g @anthropic-ai/claude-code): the live Claude Code test is skipped")
	}
	base, _, _, rec := claudeCodeGateway(t)
	home := t.TempDir()
	for _, tc := range []struct{ model, want string }{
		{"sim", ""}, {"vllm", "Hello from the fake engine."}, {"claude", "Hello from the fake engine."},
	} {
		t.Run("print/"+tc.model, func(t *testing.T) {
			out := runClaude(t, claudeBin, base, home, t.TempDir(), tc.model, "say hi")
			if strings.TrimSpace(out) == "" || !strings.Contains(out, tc.want) {
				t.Errorf("claude printed %q, want an answer containing %q", out, tc.want)
			}
		})
	}
	t.Run("tool/sim", func(t *testing.T) {
		dir := t.TempDir()
		notes := filepath.Join(dir, "notes.txt")
		if err := os.WriteFile(notes, []byte("the secret word is plum\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		rec.reset()
		// The sim calls the tool the prompt names, with the JSON object after its name as input.
		out := runClaude(t, claudeBin, base, home, dir, "sim", `Read {"file_path": "`+notes+`"}`)
		if strings.TrimSpace(out) == "" {
			t.Error("claude printed nothing after the tool call")
		}
		bodies := rec.bodies()
		found := false
		for _, b := range bodies {
			found = found || bytes.Contains(b, []byte(`"tool_result"`)) && bytes.Contains(b, []byte("the secret word is plum"))
		}
		if len(bodies) < 2 || !found {
			t.Errorf("%d requests, tool result with the file's text found: %v; want a second turn carrying it", len(bodies), found)
		}
	})
}

// runClaude runs claude -p prompt on model against base in dir and returns what it printed.
func runClaude(t *testing.T, bin, base, home, dir, model, prompt string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-p", prompt, "--model", model)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+home, "ANTHROPIC_BASE_URL="+base, "ANTHROPIC_API_KEY=test-key",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_TELEMETRY=1", "DISABLE_AUTOUPDATER=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("claude -p on %s: %v\nstdout: %s\nstderr: %s", model, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// bodyRecorder is the gateway's handler with the request bodies of /v1/messages noted.
type bodyRecorder struct {
	h    http.Handler
	mu   sync.Mutex
	seen [][]byte
}

func (b *bodyRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/messages" {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		b.mu.Lock()
		b.seen = append(b.seen, body)
		b.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	b.h.ServeHTTP(w, r)
}

func (b *bodyRecorder) reset() {
	b.mu.Lock()
	b.seen = nil
	b.mu.Unlock()
}

func (b *bodyRecorder) bodies() [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([][]byte(nil), b.seen...)
}

// serveHandler serves h with net/http on a loopback listener and returns its base URL.
func serveHandler(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends at Close
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}
