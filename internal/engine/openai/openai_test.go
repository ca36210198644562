package openai

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/upstream"
	"github.com/layer0ai/layer0/internal/upstream/fake"
)

const secret = "sk-test-0123456789abcdef"

func env(name string) string {
	if name == "TEST_KEY" {
		return secret
	}
	return ""
}

// newEngine returns an engine for the fake with the given timeouts (zero: generous defaults).
func newEngine(t *testing.T, f *fake.Server, to config.Timeouts, maxConc int) *Engine {
	t.Helper()
	cfg := config.Engine{Kind: config.KindOpenAI, URL: f.URL, APIKeyEnv: "TEST_KEY", MaxConcurrency: maxConc, Timeouts: to}
	if cfg.Timeouts == (config.Timeouts{}) {
		cfg.Timeouts = config.Timeouts{Connect: 2 * time.Second, FirstByte: 5 * time.Second, Idle: 5 * time.Second, Total: 10 * time.Second}
	}
	opts := Options{Upstream: upstream.Options{Getenv: env}}
	if f.TLS != nil {
		tr := f.Client().Transport.(*http.Transport)
		opts.Upstream.TLSConfig = &tls.Config{RootCAs: tr.TLSClientConfig.RootCAs}
	}
	e, err := New("vllm-1", cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Client().CloseIdle)
	return e
}

func textRequest() *llm.Request {
	return &llm.Request{Model: "meta-llama/Llama-3.1-8B-Instruct", MaxTokens: 64,
		System:   []llm.Block{{Type: llm.BlockText, Text: "be brief"}},
		Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "hi"}}}}}
}

func toolRequest() *llm.Request {
	r := textRequest()
	r.Tools = []llm.Tool{{Name: "get_weather", InputSchema: json.RawMessage(`{"type":"object"}`)}}
	return r
}

// sink collects events and remembers whether the stream stopped.
type sink struct {
	llm.Collector
	events  []llm.EventKind
	flushes int
}

func (s *sink) Send(ev *llm.Event) error {
	s.events = append(s.events, ev.Kind)
	return s.Collector.Send(ev)
}
func (s *sink) Flush() error  { s.flushes++; return nil }
func (s *sink) stopped() bool { return len(s.events) > 0 && s.events[len(s.events)-1] == llm.EventStop }

func TestGenerate(t *testing.T) {
	f := fake.NewOpenAI(fake.Script{Key: secret, CachedTokens: 4, Text: "Hello there, world."})
	defer f.Close()
	e := newEngine(t, f, config.Timeouts{}, 0)
	tests := []struct {
		name string
		req  *llm.Request
		want llm.Response
	}{
		{"text", textRequest(), llm.Response{ID: "msg_8d2f0c5b1e7a4c3f9b6a2d1e0f3c4b5a", Model: "meta-llama/Llama-3.1-8B-Instruct",
			Content: []llm.Block{{Type: llm.BlockText, Text: "Hello there, world."}}, Stop: llm.StopEndTurn}},
		{"tools", toolRequest(), llm.Response{ID: "msg_8d2f0c5b1e7a4c3f9b6a2d1e0f3c4b5a", Model: "meta-llama/Llama-3.1-8B-Instruct",
			Content: []llm.Block{{Type: llm.BlockToolUse, ID: "chatcmpl-tool-3f1e9a7c5b2d4e6f", Name: "get_weather", Input: json.RawMessage(`{"city": "Paris", "unit": "c"}`)}},
			Stop:    llm.StopToolUse}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s sink
			if err := e.Generate(context.Background(), tt.req, &s); err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			got := s.Response
			if got.Usage.CacheReadInputTokens != 4 || got.Usage.InputTokens <= 0 || got.Usage.OutputTokens <= 0 {
				t.Errorf("got usage %+v, want input, output and 4 cached tokens", got.Usage)
			}
			got.Usage = llm.Usage{}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("response mismatch (-want +got):\n%s", diff)
			}
			if s.flushes == 0 {
				t.Error("got no flush")
			}
		})
	}
	reqs := f.Requests()
	last := reqs[len(reqs)-1]
	if got := last.Header.Get("Authorization"); got != "Bearer "+secret {
		t.Errorf("got Authorization %q, want the bearer token", got)
	}
	var body struct {
		Model         string          `json:"model"`
		Stream        bool            `json:"stream"`
		StreamOptions map[string]bool `json:"stream_options"`
	}
	if err := json.Unmarshal(last.Body, &body); err != nil {
		t.Fatal(err)
	}
	if body.Model != "meta-llama/Llama-3.1-8B-Instruct" || !body.Stream || !body.StreamOptions["include_usage"] {
		t.Errorf("got upstream body %s, want the model, stream and include_usage", last.Body)
	}
}

func TestGenerateWithModel(t *testing.T) {
	f := fake.NewOpenAI(fake.Script{})
	defer f.Close()
	e := newEngine(t, f, config.Timeouts{}, 0)
	e.Model = "served-name" // as Options.Model sets it
	if err := e.Generate(context.Background(), textRequest(), &sink{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(f.Requests()[0].Body, []byte(`"model":"served-name"`)) {
		t.Errorf("got body %s, want model served-name", f.Requests()[0].Body)
	}
}

func TestGenerateHTTP2(t *testing.T) {
	f := fake.NewOpenAITLS(fake.Script{})
	defer f.Close()
	e := newEngine(t, f, config.Timeouts{}, 0)
	for i := 0; i < 3; i++ {
		var s sink
		if err := e.Generate(context.Background(), textRequest(), &s); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range f.Requests() {
		if r.ProtoMajor != 2 {
			t.Errorf("request %d: got HTTP/%d, want HTTP/2", i, r.ProtoMajor)
		}
	}
}

func TestGenerateErrors(t *testing.T) {
	tests := []struct {
		name     string
		script   fake.Script
		timeouts config.Timeouts
		kind     apierr.Kind
		msg      string
		retry    time.Duration
		partial  bool // events were sent before the failure
	}{
		{name: "429 with retry-after", script: fake.Script{Status: 429, Header: http.Header{"Retry-After": {"7"}},
			Body: `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`},
			kind: apierr.RateLimit, msg: "Rate limit reached", retry: 7 * time.Second},
		{name: "503 loading", script: fake.Script{Status: 503, Body: `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`},
			kind: apierr.Overloaded, msg: "Loading model"},
		{name: "400 context", script: fake.Script{Status: 400, Body: `{"object":"error","message":"This model's maximum context length is 8192 tokens.","type":"BadRequestError","param":null,"code":400}`},
			kind: apierr.InvalidRequest, msg: "maximum context length"},
		{name: "first byte", script: fake.Script{FirstByte: 2 * time.Second},
			timeouts: config.Timeouts{Connect: time.Second, FirstByte: 50 * time.Millisecond, Idle: time.Second, Total: 5 * time.Second},
			kind:     apierr.Timeout, msg: "no response within 50ms"},
		{name: "idle", script: fake.Script{HangAfter: 2},
			timeouts: config.Timeouts{Connect: time.Second, FirstByte: time.Second, Idle: 50 * time.Millisecond, Total: 5 * time.Second},
			kind:     apierr.Timeout, msg: "nothing received for 50ms", partial: true},
		{name: "total", script: fake.Script{Gap: 30 * time.Millisecond, Text: strings.Repeat("word ", 20)},
			timeouts: config.Timeouts{Connect: time.Second, FirstByte: time.Second, Idle: time.Second, Total: 150 * time.Millisecond},
			kind:     apierr.Timeout, msg: "did not finish within 150ms", partial: true},
		{name: "cut mid-stream", script: fake.Script{CutAfter: 3}, kind: apierr.BadGateway, partial: true},
		{name: "error mid-stream", script: fake.Script{ErrorAfter: 3}, kind: apierr.BadGateway, msg: "The engine failed", partial: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := fake.NewOpenAI(tt.script)
			defer f.Close()
			e := newEngine(t, f, tt.timeouts, 0)
			var s sink
			start := time.Now()
			err := e.Generate(context.Background(), textRequest(), &s)
			var ae *apierr.Error
			if !errors.As(err, &ae) {
				t.Fatalf("got %v, want *apierr.Error", err)
			}
			// The engine's own words are in the error's cause (the log's), never in the
			// client's message.
			said := errors.Is(ae, apierr.ErrEngineSaid)
			if ae.Kind != tt.kind || !strings.Contains(ae.Error(), tt.msg) || said && tt.msg != "" && strings.Contains(ae.Message, tt.msg) {
				t.Errorf("got kind %v error %q, want %v with %q (in its cause only when the engine's)", ae.Kind, ae.Error(), tt.kind, tt.msg)
			}
			if ae.RetryAfter != tt.retry {
				t.Errorf("got retry-after %v, want %v", ae.RetryAfter, tt.retry)
			}
			if s.stopped() {
				t.Error("got a stop event from a failed generation")
			}
			if got := len(s.events) > 0; got != tt.partial {
				t.Errorf("got events sent %v, want %v", got, tt.partial)
			}
			if time.Since(start) > 3*time.Second {
				t.Errorf("took %v", time.Since(start))
			}
			if n := e.Client().InFlight(); n != 0 {
				t.Errorf("got %d in flight after return, want 0", n)
			}
		})
	}
}

// TestCancelReachesEngine measures how long a client's cancel takes to reach the engine: the
// issue asks for under 100 ms.
func TestCancelReachesEngine(t *testing.T) {
	for _, tls := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", tls), func(t *testing.T) {
			script := fake.Script{HangAfter: 2}
			f := fake.NewOpenAI(script)
			if tls {
				f = fake.NewOpenAITLS(script)
			}
			defer f.Close()
			e := newEngine(t, f, config.Timeouts{}, 0)
			ctx, cancel := context.WithCancel(context.Background())
			s := &notifySink{first: make(chan struct{})}
			errc := make(chan error, 1)
			go func() { errc <- e.Generate(ctx, textRequest(), s) }()
			select {
			case <-s.first:
			case <-time.After(5 * time.Second):
				t.Fatal("no event within 5s")
			}
			t0 := time.Now()
			cancel()
			select {
			case at := <-f.Canceled:
				d := at.Sub(t0)
				t.Logf("cancel reached the engine in %v", d)
				if d > 100*time.Millisecond {
					t.Errorf("cancel took %v to reach the engine, want under 100ms", d)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("the engine never saw the cancel")
			}
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Errorf("got %v, want context.Canceled", err)
			}
		})
	}
}

type notifySink struct {
	sink
	first chan struct{}
	once  bool
}

func (s *notifySink) Send(ev *llm.Event) error {
	if !s.once {
		s.once = true
		close(s.first)
	}
	return nil
}

func TestCredentialsNeverLeak(t *testing.T) {
	f := fake.NewOpenAI(fake.Script{Key: "a-different-key"}) // echoes our credential in its 401 body
	defer f.Close()
	e := newEngine(t, f, config.Timeouts{}, 0)
	err := e.Generate(context.Background(), textRequest(), &sink{})
	if err == nil {
		t.Fatal("got no error for a refused credential")
	}
	var ae *apierr.Error
	if !errors.As(err, &ae) || ae.Kind != apierr.BadGateway {
		t.Errorf("got %v, want a 502", err)
	}
	for _, s := range []string{err.Error(), ae.Message, fmt.Sprintf("%v %+v %#v", e, e, e), fmt.Sprintf("%+v", *e.Client())} {
		if strings.Contains(s, secret) {
			t.Errorf("the credential appears in %q", s)
		}
	}
	if !bytes.Contains(f.Requests()[0].Body, []byte("hi")) {
		t.Error("the fake got no request")
	}
	// A named but empty variable is refused, naming the variable only.
	_, err = New("x", config.Engine{Kind: config.KindOpenAI, URL: f.URL, APIKeyEnv: "MISSING"}, Options{Upstream: upstream.Options{Getenv: env}})
	if err == nil || !strings.Contains(err.Error(), "MISSING") {
		t.Errorf("got %v, want an error naming MISSING", err)
	}
}

func TestMaxConcurrency(t *testing.T) {
	f := fake.NewOpenAI(fake.Script{HangAfter: 1})
	defer f.Close()
	e := newEngine(t, f, config.Timeouts{Connect: time.Second, FirstByte: 50 * time.Millisecond, Idle: 5 * time.Second, Total: 5 * time.Second}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	s := &notifySink{first: make(chan struct{})}
	done := make(chan struct{})
	go func() { _ = e.Generate(ctx, textRequest(), s); close(done) }()
	<-s.first
	if n := e.Client().InFlight(); n != 1 {
		t.Errorf("got %d in flight, want 1", n)
	}
	err := e.Generate(context.Background(), textRequest(), &sink{})
	var ae *apierr.Error
	if !errors.As(err, &ae) || ae.Kind != apierr.Overloaded {
		t.Errorf("got %v, want overloaded", err)
	}
	cancel()
	<-done
}
