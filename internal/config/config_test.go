package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDefault(t *testing.T) {
	c := Default()
	if got, want := c.Server.Addr, "127.0.0.1:8080"; got != want {
		t.Errorf("addr: got %q, want %q", got, want)
	}
	if got, want := c.Server.MaxBodyBytes, int64(32<<20); got != want {
		t.Errorf("max body: got %d, want %d", got, want)
	}
	if got := c.Models["sim"].Engines; !cmp.Equal(got, []string{"sim"}) {
		t.Errorf("model sim engines: got %v, want [sim]", got)
	}
	if got, want := c.Engines["sim"].Kind, KindSim; got != want {
		t.Errorf("engine kind: got %q, want %q", got, want)
	}
	if err := c.Validate(Known{}); err != nil {
		t.Errorf("default config invalid: %v", err)
	}
}

func TestParseEmptyIsDefault(t *testing.T) {
	c, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Playground = false // on only in the embedded default, never from a document
	want.Debug.Requests = 0 // kept only by the embedded default, or when a document asks
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("empty document differs from Default (-want +got):\n%s", diff)
	}
}

func TestParseFull(t *testing.T) {
	c, err := Parse([]byte(`
server:
  addr: 127.0.0.1:9999
  max_body_bytes: 1024
engines:
  fast:
    kind: sim
    sim: {preset: realistic, mode: echo, max_queue: 3}
  vllm:
    kind: openai
    url: http://127.0.0.1:8000
    api_key_env: VLLM_KEY
    timeouts: {first_byte: 2s}
models:
  chat:
    engines: [fast, vllm]
    upstream_model: meta-llama/Llama-3.1-8B-Instruct
    context_window: 8192
log:
  level: debug
  access: false
`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Engines["fast"].Sim.TTFT, 150*time.Millisecond; got != want {
		t.Errorf("realistic ttft: got %v, want %v", got, want)
	}
	if got, want := c.Engines["vllm"].Timeouts.FirstByte, 2*time.Second; got != want {
		t.Errorf("first byte timeout: got %v, want %v", got, want)
	}
	if got, want := c.Engines["vllm"].Timeouts.Connect, 5*time.Second; got != want {
		t.Errorf("default connect timeout: got %v, want %v", got, want)
	}
	if got, want := c.Models["chat"].ContextWindow, 8192; got != want {
		t.Errorf("context window: got %d, want %d", got, want)
	}
	if got, want := c.Models["chat"].DisplayName, "chat"; got != want {
		t.Errorf("display name default: got %q, want %q", got, want)
	}
	if *c.Log.Access {
		t.Errorf("access log: got true, want false")
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string // substrings, each must appear in the error
	}{
		{"unknown keys", "server:\n  adr: x\n  max_bodybytes: 3\nengines:\n  s: {kind: sim}\nmodels:\n  m: {engines: [s]}\nbogus: 1\n",
			[]string{`field adr not found`, `field max_bodybytes not found`, `field bogus not found`}},
		{"wrong types", "server:\n  max_body_bytes: lots\nengines:\n  s: {kind: sim, sim: {ttft: soon}}\n",
			[]string{"max_body_bytes", "soon"}},
		{"semantic", `
engines:
  a: {kind: openai}
  b: {kind: warp}
  c: {kind: sim, sim: {mode: shout, preset: slow, block_tokens: -1, fail: {status: 200}}}
  d: {kind: anthropic, url: "ftp://x"}
models:
  m: {engines: [a, missing]}
  n: {engines: []}
log: {level: loud}
debug: {requests: -1}
`, []string{
			"debug.requests: -1: want 0 (none) to 1048576",
			"engines.a.url: required for kind openai",
			`engines.b.kind: unknown kind "warp"`,
			`engines.c.sim.mode: unknown mode "shout"`,
			`engines.c.sim.preset: unknown preset "slow"`,
			"engines.c.sim.block_tokens: must be positive",
			"engines.c.sim.fail.status: must be an HTTP error status",
			"engines.d.url: must start with http:// or https://",
			`models.m.engines[1]: unknown engine "missing"`,
			"models.n.engines: at least one engine is required",
			`log.level: unknown level "loud"`,
		}},
		{"not yaml", "server: [", []string{"did not find expected node content"}},
		{"unknown key does not hide the rest", "bogus: 1\nengines:\n  a: {kind: openai}\nmodels:\n  m: {engines: [missing]}\n",
			[]string{"field bogus not found", "engines.a.url: required for kind openai", `models.m.engines[0]: unknown engine "missing"`}},
		{"second document", "server: {addr: '127.0.0.1:1'}\n---\nserver: {addr: '0.0.0.0:2'}\n",
			[]string{"a second YAML document"}},
		{"bad urls", `
engines:
  a: {kind: openai, url: "http://"}
  b: {kind: openai, url: "http://h:99999"}
  c: {kind: openai, url: "https://h/v1?x=1"}
models:
  m: {engines: [a, b, c]}
`, []string{"engines.a.url: must name a host", "engines.b.url: port must be 1-65535", "engines.c.url: must not have a query"}},
		{"models without engines", "models:\n  m: {engines: [x]}\n", []string{`models.m.engines[0]: unknown engine "x"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc))
			if err == nil {
				t.Fatal("got nil error, want problems")
			}
			var errs *Errors
			if !errors.As(err, &errs) {
				t.Fatalf("got %T, want *Errors", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not mention %q", err, w)
				}
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "l0.yaml")
	if err := os.WriteFile(p, []byte("server: {addr: '127.0.0.1:1'}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Server.Addr, "127.0.0.1:1"; got != want {
		t.Errorf("addr: got %q, want %q", got, want)
	}
	if _, err := Load(filepath.Join(dir, "nope.yaml")); err == nil {
		t.Error("missing file: got nil error")
	}
}

func TestExampleConfigsParse(t *testing.T) {
	files, _ := filepath.Glob("../../examples/*.yaml")
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("server: {addr: ':1'}\nengines: {s: {kind: sim}}\nmodels: {m: {engines: [s]}}\n"))
	f.Add([]byte("engines:\n  a: {kind: openai, url: 'http://x'}\n"))
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Parse(b)
		if err == nil {
			if verr := c.Validate(Known{}); verr != nil {
				t.Fatalf("Parse accepted a config that Validate rejects: %v", verr)
			}
		}
	})
}

func TestLoadBytesRefusesEmptyAndCutFiles(t *testing.T) {
	for _, tt := range []struct{ name, text, want string }{
		{"empty", "", "the file is empty"},
		{"comments only", "# layer0\n\n", "the file is empty"},
		{"null document", "~\n", "the file is empty"},
		{"bare section", "engines: {s: {kind: sim}}\nmodels:\n", "models: the section has no value"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadBytes("layer0.yaml", []byte(tt.text))
			var errs *Errors
			if !errors.As(err, &errs) || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "config: layer0.yaml: ") {
				t.Errorf("got %v, want an *Errors naming the file and saying %q", err, tt.want)
			}
		})
	}
	if _, err := LoadBytes("layer0.yaml", []byte("engines: {s: {kind: sim}}\nmodels: {m: {engines: [s]}}\n")); err != nil {
		t.Errorf("a complete file: %v", err)
	}
}

func TestRedactUserinfo(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"http://user:pass@host:8000/v1", "http://xxxxx@host:8000/v1"},
		{`got "https://tok@h" and "http://a:b@c/d"`, `got "https://xxxxx@h" and "http://xxxxx@c/d"`},
		{"http://u:pa/ss@host", "http://xxxxx@host"},
		{`got "http://u:pa@ss/w rd@host" and "redis://:x@h"`, `got "http://xxxxx@host" and "redis://xxxxx@h"`},
		{"http://host/path no credentials", "http://host/path no credentials"},
		{"no url at all", "no url at all"},
	} {
		if got := RedactUserinfo(tt.in); got != tt.want {
			t.Errorf("RedactUserinfo(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestErrorsNeverShowEngineCredentials checks every message a bad engine URL can produce.
func TestErrorsNeverShowEngineCredentials(t *testing.T) {
	for _, text := range []string{
		"engines: {e: {kind: openai, url: 'ftp://admin:s3cret@host'}}\nmodels: {m: {engines: [e]}}\n",
		"engines: {e: {kind: openai, url: 'http://admin:s3cret@host:99999'}}\nmodels: {m: {engines: [e]}}\n",
		"engines: {e: {kind: openai, url: 'http://admin:s3cret@host?x=1'}}\nmodels: {m: {engines: [e]}}\n",
		"engines: {e: {kind: openai, url: 'http://admin:s3cret@ho st'}}\nmodels: {m: {engines: [e]}}\n",
		"engines: {e: {kind: openai, url: 'http://admin:s3cret@host', timeouts: 'http://admin:s3cret@host'}}\nmodels: {m: {engines: [e]}}\n",
		"engines: {e: {kind: openai, url: {x: 'http://admin:s3cret@host'}}}\n",
		"engines: {e: {kind: openai, url: [http://admin:s3cret@host}\n",
		// A password with an unescaped '@' and '/': parsers read its tail as host and path.
		"engines: {e: {kind: openai, url: 'http://admin:s3cr@t/s3cret@host'}}\nmodels: {m: {engines: [e]}}\n",
		"engines: {e: {kind: openai, url: 'http://admin:s3cr@t?s3cret@host'}}\nmodels: {m: {engines: [e]}}\n",
		"store: {kind: redis, url: 'redis://admin:s3cr@t/s3cret@10.0.0.1:6379'}\n",
		"store: {kind: redis, url: 'redis://h:6379,redis://admin:s3cr@t/s3cret@10.0.0.1:6379'}\n",
		"telemetry: {otlp: {endpoint: 'http://admin:s3cr@t/s3cret@host', protocol: grpc}}\n",
		"engines: {e: {kind: openai, url: 'ftp://admin:s3cr@t/s3 cret@host'}}\nmodels: {m: {engines: [e]}}\n",
	} {
		_, err := LoadBytes("layer0.yaml", []byte(text))
		if err == nil {
			t.Errorf("%q: loaded, want an error", text)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "admin") {
			t.Errorf("%q: the error shows the credentials: %v", text, err)
		}
	}
}
