package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/layer0ai/layer0"
)

// tagged is an application's engine: it answers "TAG:last user message" and counts its closes.
type tagged struct {
	tag    string
	closed *atomic.Int32
}

func (e *tagged) Generate(ctx context.Context, req *layer0.Request, sink layer0.Sink) error {
	var text string
	for _, b := range req.Messages[len(req.Messages)-1].Content {
		text += b.Text
	}
	for _, ev := range []layer0.Event{
		{Kind: layer0.EventStart, Model: req.Model, Usage: layer0.Usage{InputTokens: 2}},
		{Kind: layer0.EventBlockStart, Block: layer0.BlockText},
		{Kind: layer0.EventTextDelta, Text: e.tag + ":" + text},
		{Kind: layer0.EventBlockStop},
		{Kind: layer0.EventStop, Stop: layer0.StopEndTurn, Usage: layer0.Usage{InputTokens: 2, OutputTokens: 1}},
	} {
		if err := sink.Send(&ev); err != nil {
			return err
		}
	}
	return sink.Flush()
}

func (e *tagged) Close() error {
	e.closed.Add(1)
	return nil
}

// TestWithEngine serves an application's engine kind, named in a configuration file, through
// HTTP (in both client formats) and through Do; a reload that changes the engine's
// configuration builds a new one and closes the old, and Close closes the last.
func TestWithEngine(t *testing.T) {
	var built, closed atomic.Int32
	opt := layer0.WithEngine("tagged", func(name string, cfg layer0.EngineConfig) (layer0.Engine, error) {
		built.Add(1)
		return &tagged{tag: name + "@" + cfg.URL, closed: &closed}, nil
	})
	path := filepath.Join(t.TempDir(), "layer0.yaml")
	file := "engines:\n  t: {kind: tagged, url: one}\nmodels:\n  m: {engines: [t]}\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := layer0.LoadConfig(path); err == nil || !strings.Contains(err.Error(), `unknown kind "tagged"`) {
		t.Fatalf("LoadConfig without WithEngine: got %v, want the kind refused", err)
	}
	cfg, err := layer0.LoadConfig(path, opt)
	if err != nil {
		t.Fatal(err)
	}
	g, base := serveGateway(t, cfg, opt)

	var c layer0.Collector
	req := &layer0.Request{Model: "m", MaxTokens: 8, Messages: []layer0.Message{
		{Role: layer0.RoleUser, Content: []layer0.Block{{Type: layer0.BlockText, Text: "in-process"}}}}}
	if err := g.Do(context.Background(), req, &c); err != nil {
		t.Fatal(err)
	}
	if got := c.Response.Content[0].Text; got != "t@one:in-process" {
		t.Errorf("Do: got %q, want %q", got, "t@one:in-process")
	}

	for _, tt := range []struct{ path, want string }{
		{"/v1/messages", `"text":"t@one:over http"`},
		{"/v1/chat/completions", `"content":"t@one:over http"`},
	} {
		resp, err := http.Post(base+tt.path, "application/json",
			strings.NewReader(`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"over http"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), tt.want) || !json.Valid(b) {
			t.Errorf("POST %s: got %d %s, want 200 with %s", tt.path, resp.StatusCode, b, tt.want)
		}
	}

	next, err := layer0.LoadConfig(path, opt)
	if err != nil {
		t.Fatal(err)
	}
	next.Engines["t"] = layer0.EngineConfig{Kind: "tagged", URL: "two"}
	if err := g.Reload(next); err != nil {
		t.Fatal(err)
	}
	if got := closed.Load(); got != 1 {
		t.Errorf("after a reload that replaced the engine: %d closes, want 1", got)
	}
	c = layer0.Collector{}
	if err := g.Do(context.Background(), req, &c); err != nil || c.Response.Content[0].Text != "t@two:in-process" {
		t.Errorf("Do after reload: got %+v %v, want the new engine's answer", c.Response.Content, err)
	}
	g.Close()
	if b, cl := built.Load(), closed.Load(); b != 2 || cl != 2 {
		t.Errorf("after Close: %d engines built, %d closed; want 2 and 2", b, cl)
	}
}

// TestWithEngineRefused checks the registrations New refuses: a built-in kind, and a factory
// that is missing.
func TestWithEngineRefused(t *testing.T) {
	f := func(string, layer0.EngineConfig) (layer0.Engine, error) { return nil, nil }
	for _, tt := range []struct {
		name string
		opt  layer0.Option
		want string
	}{
		{"built-in kind", layer0.WithEngine(layer0.KindOpenAI, f), "the kind is built in"},
		{"no factory", layer0.WithEngine("mine", nil), "a kind and a factory are required"},
	} {
		_, err := layer0.New(nil, tt.opt)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: got %v, want %q", tt.name, err, tt.want)
		}
	}
	cfg := &layer0.Config{
		Engines: map[string]layer0.EngineConfig{"x": {Kind: "mine"}},
		Models:  map[string]layer0.Model{"m": {Engines: []string{"x"}}},
	}
	_, err := layer0.New(cfg, layer0.WithEngine("mine", f))
	if err == nil || !strings.Contains(err.Error(), "returned no engine") {
		t.Errorf("a factory returning nil: got %v, want it refused", err)
	}
}

// TestWithEngineOptions checks an engine's options block: handed to its kind's factory as
// decoded, checked by the kind's Validate when the file is loaded (and by New), and refused for
// a built-in kind.
func TestWithEngineOptions(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"good":    "engines:\n  w: {kind: wrapped, options: {prefix: hi, n: [1, 2]}}\nmodels:\n  m: {engines: [w]}\n",
		"bad":     "engines:\n  w: {kind: wrapped, options: {prefix: 3}}\nmodels:\n  m: {engines: [w]}\n",
		"builtin": "engines:\n  s: {kind: sim, options: {a: 1}}\nmodels:\n  m: {engines: [s]}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	good, bad, builtin := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml"), filepath.Join(dir, "builtin.yaml")
	var got atomic.Value
	kind := layer0.WithEngineKind("wrapped", layer0.EngineKind{
		Build: func(name string, cfg layer0.EngineConfig) (layer0.Engine, error) {
			got.Store(cfg.Options)
			inner := cfg
			inner.Kind, inner.Options = layer0.KindSim, nil
			return layer0.NewBuiltinEngine(name, inner)
		},
		Validate: func(name string, cfg layer0.EngineConfig) error {
			if _, ok := cfg.Options["prefix"].(string); !ok {
				return fmt.Errorf("prefix must be a string, got %v", cfg.Options["prefix"])
			}
			return nil
		},
	})
	cfg, err := layer0.LoadConfig(good, kind)
	if err != nil {
		t.Fatal(err)
	}
	g, err := layer0.New(cfg, kind)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	opts, _ := got.Load().(map[string]any)
	if opts["prefix"] != "hi" || fmt.Sprint(opts["n"]) != "[1 2]" {
		t.Errorf("the factory got options %v", opts)
	}
	var c layer0.Collector
	req := &layer0.Request{Model: "m", MaxTokens: 8, Messages: []layer0.Message{layer0.TextMessage(layer0.RoleUser, "hi")}}
	if err := g.Do(context.Background(), req, &c); err != nil {
		t.Fatalf("the wrapped sim engine: %v", err)
	}
	if _, err := layer0.LoadConfig(bad, kind); err == nil || !strings.Contains(err.Error(), "engines.w.options: prefix must be a string") {
		t.Errorf("LoadConfig of invalid options: got %v", err)
	}
	cfg.Engines["w"] = layer0.EngineConfig{Kind: "wrapped", Options: map[string]any{"prefix": 3}}
	if err := g.Reload(cfg); err == nil || !strings.Contains(err.Error(), "engines.w.options: prefix must be a string") {
		t.Errorf("Reload with invalid options: got %v", err)
	}
	if _, err := layer0.LoadConfig(builtin); err == nil || !strings.Contains(err.Error(), "engines.s.options: kind sim takes no options") {
		t.Errorf("options on a built-in kind: got %v", err)
	}
}
