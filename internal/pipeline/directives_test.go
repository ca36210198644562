package pipeline

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/route"
	"github.com/layer0ai/layer0/internal/upstream/fake"
)

// capture is an engine (with the pass-through path) that keeps a copy of the request it got.
type capture struct {
	forwarder
	mu  sync.Mutex
	got llm.Request
}

func (e *capture) Generate(ctx context.Context, req *llm.Request, sink llm.Sink) error {
	e.mu.Lock()
	e.got = *req
	e.mu.Unlock()
	return e.scripted.Generate(ctx, req, sink)
}

// stagesRig is a pipeline with model m (window 40 words), model big (no window) and offload
// target "b" for big; the key "limited" may use m only.
func stagesRig(t *testing.T, pol ContextPolicy) (*Pipeline, *capture, *capture) {
	t.Helper()
	small := &capture{forwarder: forwarder{format: llm.FormatAnthropic, body: "passed"}}
	large := &capture{forwarder: forwarder{format: llm.FormatAnthropic, body: "passed"}}
	rs := route.NewReplica("small", small, policy())
	rl := route.NewReplica("large", large, policy())
	table, err := route.New(routing(route.Config{Models: []route.Model{
		{Name: "m", ContextWindow: 40, Replicas: []*route.Replica{rs}},
		{Name: "big", Replicas: []*route.Replica{rl}},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.New([]auth.Spec{{Name: "limited", Hash: auth.HashHex("l0-limited"), Models: []string{"m"}},
		{Name: "all", Hash: auth.HashHex("l0-all")}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Keys: keys, Routes: table, Tokens: wordCounter{}, Offload: map[string]string{"b": "big"},
		Models: []*Model{{ID: "m", Context: pol}}})
	if err != nil {
		t.Fatal(err)
	}
	return p, small, large
}

func withSystem(req *llm.Request, format llm.Format, system string) *llm.Request {
	req.Format = format
	req.System = []llm.Block{{Type: llm.BlockText, Text: system}}
	return req
}

func serveStages(p *Pipeline, req *llm.Request, key string, h http.Header, forward bool) (*Call, error) {
	if h == nil {
		h = http.Header{}
	}
	h.Set("X-Api-Key", key)
	c := &Call{Request: req, Sink: &llm.Collector{}, Header: h}
	if forward {
		c.Forward = &Forward{Body: []byte("{}"), Out: fake.Writer(&strings.Builder{})}
	}
	err := p.Serve(context.Background(), c)
	return c, err
}

func TestStagesDirectives(t *testing.T) {
	p, small, large := stagesRig(t, ContextPolicy{})

	// Without directives the request goes as it is, through the pass-through path when offered.
	req := withSystem(request("m", "hello there"), llm.FormatAnthropic, "Be brief.")
	c, err := serveStages(p, req, "l0-all", nil, true)
	if err != nil || !c.Record.Passed || c.Record.Directives != 0 || small.calls.Load() != 1 {
		t.Fatalf("no directives: err %v, passed %v, directives %v", err, c.Record.Passed, c.Record.Directives)
	}

	// With directives: applied, stripped, recorded, and never passed through (the client's body
	// still holds them).
	temp := 0.9
	req = withSystem(request("m", "hello there"), llm.FormatBinary, "<|temperature:0.7|>\n<|json_mode|>\nBe brief.")
	req.Temperature = &temp
	c, err = serveStages(p, req, "l0-all", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	got := small.got
	if c.Record.Passed || got.SystemText() != "Be brief." || *got.Temperature != 0.7 || got.ResponseFormat.Type != llm.ResponseJSONObject {
		t.Errorf("the engine got system %q temperature %v format %v (passed %v)", got.SystemText(), *got.Temperature, got.ResponseFormat.Type, c.Record.Passed)
	}
	if c.Record.Directives.String() != "temperature,json_mode" || *req.Temperature != 0.9 || !strings.HasPrefix(req.System[0].Text, "<|") {
		t.Errorf("record %q; the client's request must stay as it was: %v %q", c.Record.Directives, *req.Temperature, req.System[0].Text)
	}

	// The binary protocol's range is Anthropic's.
	_, err = serveStages(p, withSystem(request("m", "hi"), llm.FormatBinary, "<|temperature:1.5|>"), "l0-all", nil, false)
	var e *apierr.Error
	if !errors.As(err, &e) || e.Kind != apierr.InvalidRequest || e.Param != "system" {
		t.Errorf("binary temperature 1.5: got %v, want a 400 on system", err)
	}

	// Offload by directive and by header; the key must be allowed the target's model.
	c, err = serveStages(p, withSystem(request("m", "hi"), llm.FormatAnthropic, "<|offload:b|> hi"), "l0-all", nil, false)
	if err != nil || c.Record.Served != "big" || c.Record.Offload != "b" || c.Record.Model != "m" || large.got.SystemText() != " hi" {
		t.Errorf("offload directive: err %v, record %+v", err, c.Record)
	}
	c, err = serveStages(p, request("m", "hi"), "l0-all", http.Header{OffloadHeader: {"b"}}, true)
	if err != nil || c.Record.Served != "big" || !c.Record.Passed || c.Record.Directives != 0 {
		t.Errorf("offload header: err %v, served %q passed %v: the request itself is unchanged and may pass through", err, c.Record.Served, c.Record.Passed)
	}
	_, err = serveStages(p, request("m", "hi"), "l0-limited", http.Header{OffloadHeader: {"b"}}, false)
	if !errors.As(err, &e) || e.Kind != apierr.Permission {
		t.Errorf("offload to a model the key may not use: got %v, want 403", err)
	}
	_, err = serveStages(p, request("m", "hi"), "l0-all", http.Header{OffloadHeader: {"https://elsewhere.example"}}, false)
	if !errors.As(err, &e) || e.Kind != apierr.InvalidRequest || e.Param != OffloadHeader {
		t.Errorf("offload to an address: got %v, want a 400 on the header", err)
	}
}

func TestStagesContext(t *testing.T) {
	long := strings.Repeat("Alpha beta gamma delta. ", 10) + "\n\n" + strings.Repeat("Epsilon zeta eta theta. ", 10) // 80 words
	old := request("m", long)
	old.Messages = append(old.Messages,
		llm.Message{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockText, Text: "Noted."}}},
		llm.Message{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "Now summarize it."}}})

	p, small, _ := stagesRig(t, ContextPolicy{})
	_, err := serveStages(p, old, "l0-all", nil, false)
	var e *apierr.Error
	if !errors.As(err, &e) || e.Code != "context_length_exceeded" || !strings.Contains(e.Message, "> 40") {
		t.Fatalf("no truncation allowed: got %v, want the 400 stating the sizes", err)
	}

	// A copy: the request above stays the client's, without a system prompt.
	cp := *old
	req := withSystem(&cp, llm.FormatAnthropic, "<|truncate|>")
	c, err := serveStages(p, req, "l0-all", nil, true)
	if err != nil {
		t.Fatal(err)
	}
	cx := c.Record.Context
	if !cx.Truncated || cx.Before != 87 || cx.After > 40 || cx.TurnsDropped != 0 || c.Record.Passed {
		t.Errorf("record %+v (passed %v), want truncated from 87 to at most 40", cx, c.Record.Passed)
	}
	// The oldest turn is trimmed, not dropped: its text keeps whole sentences, 32 words of 80.
	want := strings.TrimSpace(strings.Repeat("Alpha beta gamma delta. ", 8))
	if n := len(small.got.Messages); n != 3 || small.got.Messages[0].Content[0].Text != want ||
		small.got.Messages[2].Content[0].Text != "Now summarize it." {
		t.Errorf("the engine got %d messages, the first %q, want 3 with the first cut to %q", n, small.got.Messages[0].Content[0].Text, want)
	}
	if len(req.Messages) != 3 || req.Messages[0].Content[0].Text != long {
		t.Error("the client's request was modified")
	}
	if h := cx.Header(); h != "truncated; before=87; after="+itoa(cx.After) {
		t.Errorf("header %q", h)
	}

	// The model's policy allows it without the directive; a budget in the directive applies
	// below the window too.
	p, small, _ = stagesRig(t, ContextPolicy{Truncate: true})
	if c, err = serveStages(p, old, "l0-all", nil, false); err != nil || !c.Record.Context.Truncated {
		t.Errorf("overflow truncate: err %v, record %+v", err, c.Record.Context)
	}
	short := withSystem(request("m", "one two three four five. six seven eight nine ten."), llm.FormatAnthropic, "<|truncate:8|>")
	if c, err = serveStages(p, short, "l0-all", nil, false); err != nil || c.Record.Context.After > 8 ||
		small.got.Messages[0].Content[0].Text != "one two three four five." {
		t.Errorf("truncate:8: err %v, record %+v, engine got %q", err, c.Record.Context, small.got.Messages[0].Content[0].Text)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
