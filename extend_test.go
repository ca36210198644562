package layer0_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/layer0ai/layer0"
	"github.com/layer0ai/layer0/internal/upstream/fake"
)

// tenantPicker sends the requests whose X-Tenant header is "gold" to the replica named gold and
// the others to the first replica that is not; it records what it was given.
type tenantPicker struct {
	gold string

	mu    sync.Mutex
	seen  []layer0.PickRequest
	names [][]string
}

func (p *tenantPicker) Pick(req *layer0.PickRequest, replicas []layer0.ReplicaLoad) int {
	p.mu.Lock()
	r := *req
	r.Header = req.Header.Clone()
	p.seen = append(p.seen, r)
	var names []string
	for _, l := range replicas {
		names = append(names, l.Name)
	}
	p.names = append(p.names, names)
	p.mu.Unlock()
	gold := req.Header.Get("X-Tenant") == "gold"
	for i, l := range replicas {
		if (l.Name == p.gold) == gold {
			return i
		}
	}
	return 0
}

// A configuration naming a picker that is neither built in nor registered is refused — at the
// global routing.picker and a model's, by LoadConfig and by New — and accepted once the picker
// is registered; a built-in picker's name cannot be registered.
func TestPickerMustBeRegistered(t *testing.T) {
	opt := layer0.WithPicker("tenant", func(string) layer0.Picker { return &tenantPicker{} })
	dir := t.TempDir()
	for _, tt := range []struct{ file, path string }{
		{"routing: {picker: tenant}\nengines: {s: {kind: sim}}\nmodels: {m: {engines: [s]}}\n", "routing.picker"},
		{"engines: {s: {kind: sim}}\nmodels: {m: {engines: [s], routing: {picker: tenant}}}\n", "models.m.routing.picker"},
	} {
		path := filepath.Join(dir, "layer0.yaml")
		if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
			t.Fatal(err)
		}
		want := tt.path + `: unknown picker "tenant"`
		if _, err := layer0.LoadConfig(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadConfig without WithPicker: got %v, want %q", err, want)
		}
		other := layer0.WithPicker("other", func(string) layer0.Picker { return &tenantPicker{} })
		if _, err := layer0.LoadConfig(path, other); err == nil || !strings.Contains(err.Error(), "or one of the application's: other") {
			t.Errorf("LoadConfig with another picker: got %v, want the registered ones listed", err)
		}
		cfg, err := layer0.LoadConfig(path, opt)
		if err != nil {
			t.Fatalf("LoadConfig with WithPicker: %v", err)
		}
		if _, err := layer0.New(cfg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New without WithPicker: got %v, want %q", err, want)
		}
		g, err := layer0.New(cfg, opt)
		if err != nil {
			t.Fatalf("New with WithPicker: %v", err)
		}
		g.Close()
	}
	for _, name := range []string{layer0.PickerP2C, layer0.PickerSticky, ""} {
		if _, err := layer0.New(nil, layer0.WithPicker(name, func(string) layer0.Picker { return &tenantPicker{} })); err == nil {
			t.Errorf("WithPicker(%q): accepted", name)
		}
	}
	if _, err := layer0.New(nil, layer0.WithPicker("nil", nil)); err == nil {
		t.Error("WithPicker with no factory: accepted")
	}
}

// A registered picker places every request of the models that name it — over HTTP, with the
// request's headers, and in-process — and is given the request and the replicas that can take it.
func TestPickerPlacesRequests(t *testing.T) {
	var built []string
	pk := &tenantPicker{gold: "b"}
	opt := layer0.WithPicker("tenant", func(model string) layer0.Picker {
		built = append(built, model)
		return pk
	})
	echo := layer0.EngineConfig{Kind: layer0.KindSim, Sim: layer0.Sim{Mode: "echo"}}
	cfg := &layer0.Config{
		Engines: map[string]layer0.EngineConfig{"a": echo, "b": echo, "c": echo},
		Models: map[string]layer0.Model{
			"m":     {Engines: []string{"a", "b"}, Routing: layer0.ModelRouting{Picker: "tenant"}},
			"other": {Engines: []string{"b", "c"}},
		},
	}
	g, err := layer0.New(cfg, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if !slices.Equal(built, []string{"m"}) {
		t.Errorf("the factory built pickers for %v, want [m] (the only model naming it)", built)
	}
	srv := httptest.NewServer(g)
	defer srv.Close()
	c := anthropic.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	for i := range 8 {
		tenant := []string{"gold", "free"}[i%2]
		var hr *http.Response
		msg, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{
			Model: "m", MaxTokens: 16,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("from " + tenant))},
		}, option.WithHeader("X-Tenant", tenant), option.WithResponseInto(&hr))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"gold": "b", "free": "a"}[tenant]
		if got := hr.Header.Get("X-Layer0-Engine"); got != want {
			t.Errorf("request %d (%s): served by %q, want %q", i, tenant, got, want)
		}
		if len(msg.Content) == 0 || msg.Content[0].Text != "from "+tenant {
			t.Errorf("request %d: answer %+v", i, msg.Content)
		}
	}
	var col layer0.Collector
	if err := g.Do(context.Background(), &layer0.Request{Model: "m", MaxTokens: 8,
		Messages: []layer0.Message{layer0.TextMessage(layer0.RoleUser, "in-process")}}, &col); err != nil {
		t.Fatal(err)
	}
	// A reload builds the model's picker again; one naming an unknown picker is refused.
	if err := g.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(built, []string{"m", "m"}) {
		t.Errorf("after a reload the factory built pickers for %v, want [m m]", built)
	}
	bad := *cfg
	bad.Routing.Picker = "nope"
	if err := g.Reload(&bad); err == nil || !strings.Contains(err.Error(), `routing.picker: unknown picker "nope"`) {
		t.Errorf("a reload naming an unknown picker: %v", err)
	}

	pk.mu.Lock()
	defer pk.mu.Unlock()
	if len(pk.seen) != 9 {
		t.Fatalf("the picker placed %d requests, want 9", len(pk.seen))
	}
	for i, r := range pk.seen {
		if r.Model != "m" || r.Request == nil || r.InputTokens <= 0 || r.Retry {
			t.Errorf("pick %d: given %+v, want model m, the request and its input tokens", i, r)
		}
		if !slices.Equal(pk.names[i], []string{"a", "b"}) {
			t.Errorf("pick %d: given replicas %v, want [a b]", i, pk.names[i])
		}
	}
	if h := pk.seen[0].Header.Get("X-Tenant"); h != "gold" {
		t.Errorf("the first pick saw X-Tenant %q, want gold", h)
	}
	if last := pk.seen[8]; last.Header != nil || last.Request == nil || last.Request.Messages[0].Content[0].Text != "in-process" {
		t.Errorf("the in-process pick: header %v, request %+v", last.Header, last.Request)
	}
}

// countingLimits is a LimitStore that keeps its cells in a memory store and counts the takes.
type countingLimits struct {
	layer0.LimitStore
	mu    sync.Mutex
	ids   []string
	takes atomic.Int64
}

func (s *countingLimits) Rate(id string) layer0.RateCell {
	s.mu.Lock()
	s.ids = append(s.ids, id)
	s.mu.Unlock()
	return takeCounter{RateCell: s.LimitStore.Rate(id), takes: &s.takes}
}

type takeCounter struct {
	layer0.RateCell
	takes *atomic.Int64
}

func (c takeCounter) Take(ctx context.Context, now time.Time, r layer0.LimitRate, cost int64) (layer0.LimitStatus, bool, error) {
	c.takes.Add(1)
	return c.RateCell.Take(ctx, now, r, cost)
}

// The limits count in the application's store: two gateways given the same store share one
// global limit of 2 requests a minute, so the second gateway refuses the third request, while a
// gateway with its own (memory) store admits it.
func TestLimitStoreIsConsulted(t *testing.T) {
	st := &countingLimits{LimitStore: layer0.NewMemoryLimitStore()}
	cfg := func() *layer0.Config {
		return &layer0.Config{
			Engines: map[string]layer0.EngineConfig{"s": {Kind: layer0.KindSim, Sim: layer0.Sim{Mode: "echo"}}},
			Models:  map[string]layer0.Model{"m": {Engines: []string{"s"}}},
			Limits:  layer0.Limits{Global: layer0.Rates{RequestsPerMinute: 2}},
		}
	}
	do := func(g *layer0.Gateway) error {
		var c layer0.Collector
		return g.Do(context.Background(), &layer0.Request{Model: "m", MaxTokens: 4,
			Messages: []layer0.Message{layer0.TextMessage(layer0.RoleUser, "hi")}}, &c)
	}
	g1, err := layer0.New(cfg(), layer0.WithLimitStore(st))
	if err != nil {
		t.Fatal(err)
	}
	defer g1.Close()
	g2, err := layer0.New(cfg(), layer0.WithLimitStore(st))
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close()
	for i := range 2 {
		if err := do(g1); err != nil {
			t.Fatalf("request %d on the first gateway: %v", i, err)
		}
	}
	var e *layer0.Error
	if err := do(g2); !errors.As(err, &e) || e.Status() != http.StatusTooManyRequests {
		t.Fatalf("the third request, on the second gateway: %v, want a 429 (the shared count is 2)", err)
	}
	if n := st.takes.Load(); n != 3 {
		t.Errorf("the store's cells were taken %d times, want 3", n)
	}
	st.mu.Lock()
	if !slices.Contains(st.ids, "global/requests/2/1m0s") {
		t.Errorf("cells asked of the store: %v, want the global requests cell", st.ids)
	}
	st.mu.Unlock()
	own, err := layer0.New(cfg())
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	if err := do(own); err != nil {
		t.Errorf("a gateway with its own store: %v, want the request admitted", err)
	}
}

// countingCache is a CacheStore that keeps its entries in a memory store and counts the hits
// and the stores.
type countingCache struct {
	layer0.CacheStore
	hits, puts atomic.Int64
}

func (s *countingCache) Get(ctx context.Context, k layer0.CacheKey) (*layer0.CacheEntry, bool) {
	e, ok := s.CacheStore.Get(ctx, k)
	if ok {
		s.hits.Add(1)
	}
	return e, ok
}

func (s *countingCache) Put(ctx context.Context, k layer0.CacheKey, e *layer0.CacheEntry, ttl time.Duration) error {
	s.puts.Add(1)
	return s.CacheStore.Put(ctx, k, e, ttl)
}

// The response cache keeps its answers in the application's store, for every model that
// caches: the second of two identical requests is answered from it.
func TestCacheStoreKeepsAnswers(t *testing.T) {
	st := &countingCache{CacheStore: layer0.NewMemoryCacheStore(1 << 20)}
	g, err := layer0.New(&layer0.Config{
		Engines: map[string]layer0.EngineConfig{"s": {Kind: layer0.KindSim, Sim: layer0.Sim{Mode: "echo"}}},
		Models: map[string]layer0.Model{
			"m": {Engines: []string{"s"}, Cache: layer0.Cache{Enabled: true, TTL: time.Minute}},
			"n": {Engines: []string{"s"}, Cache: layer0.Cache{Enabled: true, TTL: time.Minute}},
		},
	}, layer0.WithCacheStore(st))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	zero := 0.0
	for i, model := range []string{"m", "m", "n"} {
		var c layer0.Collector
		req := &layer0.Request{Model: model, MaxTokens: 8, Temperature: &zero,
			Messages: []layer0.Message{layer0.TextMessage(layer0.RoleUser, "same question")}}
		if err := g.Do(context.Background(), req, &c); err != nil {
			t.Fatal(err)
		}
		if got := c.Response.Content[0].Text; got != "same question" {
			t.Errorf("request %d: %q", i, got)
		}
	}
	if h, p := st.hits.Load(), st.puts.Load(); h != 1 || p != 2 {
		t.Errorf("the store had %d hits and %d stores, want 1 and 2 (m's second request hit; n keeps its own)", h, p)
	}
}

// metered decorates an engine: it counts the requests it generates.
type metered struct {
	layer0.Engine
	generated *atomic.Int64
}

func (m metered) Generate(ctx context.Context, req *layer0.Request, sink layer0.Sink) error {
	m.generated.Add(1)
	return m.Engine.Generate(ctx, req, sink)
}

// An engine that wraps a built-in one keeps its pass-through path with PassThrough: a client
// of the engine's format gets the engine's bytes (the fake's indented JSON) and the engine gets
// the client's, while a client of another format is served by the wrapper's Generate. Without
// PassThrough every request goes through Generate.
func TestPassThroughWrapped(t *testing.T) {
	up := fake.NewOpenAI(fake.Script{Text: "passed through", Pretty: true})
	defer up.Close()
	for _, pass := range []bool{true, false} {
		var generated atomic.Int64
		kind := layer0.EngineKind{Build: func(name string, cfg layer0.EngineConfig) (layer0.Engine, error) {
			cfg.Kind, cfg.Options = layer0.KindOpenAI, nil
			inner, err := layer0.NewBuiltinEngine(name, cfg)
			if err != nil {
				return nil, err
			}
			outer := metered{Engine: inner, generated: &generated}
			if !pass {
				return outer, nil
			}
			return layer0.PassThrough(outer, inner), nil
		}}
		g, err := layer0.New(&layer0.Config{
			Engines: map[string]layer0.EngineConfig{"e": {Kind: "metered", URL: up.URL}},
			Models:  map[string]layer0.Model{"m": {Engines: []string{"e"}}},
		}, layer0.WithEngineKind("metered", kind))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(g)
		body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":8}`
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		reqs := up.Requests()
		sent := reqs[len(reqs)-1].Body
		indented := bytes.Contains(got, []byte(`"object": "chat.completion"`))
		if resp.StatusCode != http.StatusOK || !bytes.Contains(got, []byte("passed through")) {
			t.Fatalf("pass %v: %d %s", pass, resp.StatusCode, got)
		}
		if pass && (generated.Load() != 0 || !indented || string(sent) != body) {
			t.Errorf("with PassThrough: %d generated, answer %s, the engine got %s; want none generated and the bytes passed both ways",
				generated.Load(), got, sent)
		}
		if !pass && (generated.Load() != 1 || indented) {
			t.Errorf("without PassThrough: %d generated, answer %s; want the request generated", generated.Load(), got)
		}
		c := anthropic.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("unused"), option.WithMaxRetries(0))
		if _, err := c.Messages.New(context.Background(), anthropic.MessageNewParams{Model: "m", MaxTokens: 8,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}); err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int64{true: 1, false: 2}[pass]; generated.Load() != want {
			t.Errorf("pass %v: %d generated after a Messages API request, want %d", pass, generated.Load(), want)
		}
		srv.Close()
		g.Close()
	}
}
