package layer0_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/config"
	l0 "github.com/layer0ai/layer0/internal/engine/layer0"
	"github.com/layer0ai/layer0/internal/llm"
)

// TestRealPeer runs the engine against a real layer0 serving the sim: the request goes over the
// binary protocol and comes back complete, tool call included.
func TestRealPeer(t *testing.T) {
	cfg, err := config.Parse([]byte("engines:\n  sim: {kind: sim}\nmodels:\n  sim: {engines: [sim]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	g, err := layer0.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	peer := httptest.NewServer(g)
	defer peer.Close()
	e, err := l0.New("core", config.Engine{Kind: config.KindLayer0, URL: peer.URL,
		Timeouts: config.Timeouts{Connect: time.Second, FirstByte: 5 * time.Second, Idle: 5 * time.Second, Total: 10 * time.Second}}, l0.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Client().CloseIdle()
	for _, tools := range []bool{false, true} {
		req := &llm.Request{Model: "sim", MaxTokens: 100,
			Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "What is the weather in Paris? Use get_weather."}}}}}
		if tools {
			req.Tools = []llm.Tool{{Name: "get_weather", InputSchema: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}}
		}
		var c llm.Collector
		if err := e.Generate(context.Background(), req, &c); err != nil {
			t.Fatalf("tools=%v: %v", tools, err)
		}
		r := c.Response
		if r.Usage.InputTokens == 0 || r.Usage.OutputTokens == 0 || len(r.Content) == 0 {
			t.Errorf("tools=%v: got %+v", tools, r)
		}
		last := r.Content[len(r.Content)-1]
		if tools && (r.Stop != llm.StopToolUse || last.Type != llm.BlockToolUse || last.Name != "get_weather" || !json.Valid(last.Input)) {
			t.Errorf("got %+v, want a get_weather call", r)
		}
		if !tools && (r.Stop != llm.StopEndTurn && r.Stop != llm.StopMaxTokens || last.Text == "") {
			t.Errorf("got %+v, want text", r)
		}
	}
	if !e.Binary() {
		t.Error("the engine fell back to JSON against a layer0 that speaks binary")
	}
}
