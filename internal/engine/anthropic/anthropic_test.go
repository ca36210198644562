package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/engine/passthrough"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/upstream"
	"github.com/layer0ai/layer0/internal/upstream/fake"
	wire "github.com/layer0ai/layer0/internal/wire/anthropic"
	"github.com/layer0ai/layer0/internal/wire/sse"
)

const secret = "sk-ant-test-0123456789abcdef"

func env(name string) string {
	if name == "ANTHROPIC_KEY" {
		return secret
	}
	return ""
}

func newEngine(t *testing.T, f *fake.Server, to config.Timeouts, bearer bool) *Engine {
	t.Helper()
	if to == (config.Timeouts{}) {
		to = config.Timeouts{Connect: 2 * time.Second, FirstByte: 5 * time.Second, Idle: 5 * time.Second, Total: 10 * time.Second}
	}
	e, err := New("claude", config.Engine{Kind: config.KindAnthropic, URL: f.URL, APIKeyEnv: "ANTHROPIC_KEY", Timeouts: to},
		Options{Bearer: bearer, Upstream: upstream.Options{Getenv: env}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Client().CloseIdle)
	return e
}

func request(tools bool) *llm.Request {
	r := &llm.Request{Model: "claude-sonnet-4-5", // no max_tokens: the engine must add one
		System:   []llm.Block{{Type: llm.BlockText, Text: "be brief"}},
		Messages: []llm.Message{{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "hi"}}}}}
	if tools {
		r.Tools = []llm.Tool{{Name: "get_weather", InputSchema: json.RawMessage(`{"type":"object"}`)}}
	}
	return r
}

type sink struct {
	llm.Collector
	events []llm.EventKind
}

func (s *sink) Send(ev *llm.Event) error {
	s.events = append(s.events, ev.Kind)
	return s.Collector.Send(ev)
}
func (s *sink) Flush() error  { return nil }
func (s *sink) stopped() bool { return len(s.events) > 0 && s.events[len(s.events)-1] == llm.EventStop }

func TestGenerate(t *testing.T) {
	f := fake.NewAnthropic(fake.Script{Key: secret, CachedTokens: 7, Text: "Hi there."})
	defer f.Close()
	e := newEngine(t, f, config.Timeouts{}, false)
	tests := []struct {
		tools bool
		want  llm.Response
	}{
		{false, llm.Response{ID: "msg_01XFDUDYJgAACzvnptvVoYEL", Model: "claude-sonnet-4-5", Content: []llm.Block{{Type: llm.BlockText, Text: "Hi there."}}, Stop: llm.StopEndTurn}},
		{true, llm.Response{ID: "msg_01XFDUDYJgAACzvnptvVoYEL", Model: "claude-sonnet-4-5", Stop: llm.StopToolUse,
			Content: []llm.Block{{Type: llm.BlockToolUse, ID: "toolu_01T1x1fJ34qAmk2tNTrN7Up6", Name: "get_weather", Input: json.RawMessage(`{"city": "Paris", "unit": "c"}`)}}}},
	}
	for _, tt := range tests {
		var s sink
		if err := e.Generate(context.Background(), request(tt.tools), &s); err != nil {
			t.Fatalf("tools=%v: %v", tt.tools, err)
		}
		got := s.Response
		if got.Usage.CacheReadInputTokens != 7 || got.Usage.InputTokens == 0 || got.Usage.OutputTokens == 0 {
			t.Errorf("got usage %+v", got.Usage)
		}
		got.Usage = llm.Usage{}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("tools=%v mismatch (-want +got):\n%s", tt.tools, diff)
		}
	}
	r := f.Requests()[0]
	if r.Header.Get("X-Api-Key") != secret || r.Header.Get("Anthropic-Version") != Version || r.Header.Get("Authorization") != "" {
		t.Errorf("got headers %v", r.Header)
	}
	if !bytes.Contains(r.Body, []byte(`"max_tokens":4096`)) || !bytes.Contains(r.Body, []byte(`"stream":true`)) {
		t.Errorf("got body %s, want the default max_tokens and stream", r.Body)
	}
}

func TestGenerateBearerHTTP2(t *testing.T) {
	f := fake.NewAnthropicTLS(fake.Script{Key: secret})
	defer f.Close()
	tr := f.Client().Transport.(*http.Transport)
	e, err := New("peer", config.Engine{Kind: config.KindLayer0, URL: f.URL, APIKeyEnv: "ANTHROPIC_KEY",
		Timeouts: config.Timeouts{Connect: time.Second, FirstByte: time.Second, Idle: time.Second, Total: 5 * time.Second}},
		Options{Bearer: true, Upstream: upstream.Options{Getenv: env, TLSConfig: tr.TLSClientConfig}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Generate(context.Background(), request(false), &sink{}); err != nil {
		t.Fatal(err)
	}
	if r := f.Requests()[0]; r.ProtoMajor != 2 || r.Header.Get("Authorization") != "Bearer "+secret {
		t.Errorf("got HTTP/%d, Authorization %q", r.ProtoMajor, r.Header.Get("Authorization"))
	}
}

func TestGenerateErrors(t *testing.T) {
	short := config.Timeouts{Connect: time.Second, FirstByte: 50 * time.Millisecond, Idle: 50 * time.Millisecond, Total: 5 * time.Second}
	tests := []struct {
		name     string
		script   fake.Script
		timeouts config.Timeouts
		kind     apierr.Kind
		msg      string
		partial  bool
	}{
		{name: "529", script: fake.Script{Status: 529, Body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}, kind: apierr.Overloaded, msg: "Overloaded"},
		{name: "429", script: fake.Script{Status: 429, Header: http.Header{"Retry-After": {"3"}}, Body: `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`}, kind: apierr.RateLimit, msg: "slow down"},
		{name: "bad key", script: fake.Script{Key: "other"}, kind: apierr.BadGateway, msg: "credentials"},
		{name: "first byte", script: fake.Script{FirstByte: 2 * time.Second}, timeouts: short, kind: apierr.Timeout, msg: "no response within"},
		{name: "idle", script: fake.Script{HangAfter: 3}, timeouts: short, kind: apierr.Timeout, msg: "nothing received", partial: true},
		{name: "error event", script: fake.Script{ErrorAfter: 3}, kind: apierr.Overloaded, msg: "Overloaded", partial: true},
		{name: "cut", script: fake.Script{CutAfter: 3}, kind: apierr.BadGateway, partial: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := fake.NewAnthropic(tt.script)
			defer f.Close()
			e := newEngine(t, f, tt.timeouts, false)
			var s sink
			err := e.Generate(context.Background(), request(false), &s)
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
			if s.stopped() || (len(s.events) > 0) != tt.partial {
				t.Errorf("got events %v, want partial=%v and no stop", s.events, tt.partial)
			}
			for _, m := range []string{err.Error(), ae.Message, fmt.Sprintf("%+v %#v", e, e)} {
				if strings.Contains(m, secret) {
					t.Errorf("the credential appears in %q", m)
				}
			}
		})
	}
}

func TestCancelReachesEngine(t *testing.T) {
	f := fake.NewAnthropic(fake.Script{HangAfter: 3})
	defer f.Close()
	e := newEngine(t, f, config.Timeouts{}, false)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- e.Generate(ctx, request(false), &sink{}) }()
	<-f.Received
	time.Sleep(20 * time.Millisecond) // let the first events through
	t0 := time.Now()
	cancel()
	select {
	case at := <-f.Canceled:
		t.Logf("cancel reached the engine in %v", at.Sub(t0))
		if d := at.Sub(t0); d > 100*time.Millisecond {
			t.Errorf("cancel took %v, want under 100ms", d)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the engine never saw the cancel")
	}
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}

func TestForward(t *testing.T) {
	f := fake.NewAnthropic(fake.Script{Text: "a b c", CachedTokens: 2})
	defer f.Close()
	e := newEngine(t, f, config.Timeouts{}, false)
	body := `{"model":"sonnet","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"the \"model\" is"}],"thinking":{"type":"disabled"}}`
	rec := httptest.NewRecorder()
	res, err := e.Forward(context.Background(), &passthrough.Pass{Body: []byte(body), Model: "claude-sonnet-4-5", ClientModel: "sonnet"}, fake.Writer(rec))
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(body, `"model":"sonnet"`, `"model":"claude-sonnet-4-5"`, 1)
	if got := string(f.Requests()[0].Body); got != want {
		t.Errorf("engine got %s\nwant %s", got, want)
	}
	out := rec.Body.String()
	if strings.Contains(out, "claude-sonnet-4-5") || !strings.Contains(out, `"model":"sonnet"`) || !strings.HasSuffix(out, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n") {
		t.Errorf("got output:\n%s", out)
	}
	if res.Usage.OutputTokens != 3 || res.Usage.CacheReadInputTokens != 2 || res.Usage.InputTokens == 0 || res.Bytes != int64(len(out)) || res.Deltas != 3 {
		t.Errorf("got %+v", res)
	}
	var c llm.Collector
	if err := wire.ReadStream(strings.NewReader(out), &c); err != nil || c.Response.Content[0].Text != "a b c" {
		t.Errorf("the client's stream does not read back: %v %+v", err, c.Response)
	}
	// Non-streamed.
	rec = httptest.NewRecorder()
	res, err = e.Forward(context.Background(), &passthrough.Pass{Body: []byte(`{"model":"x","max_tokens":5,"messages":[]}`)}, fake.Writer(rec))
	if err != nil || res.Stream || res.Usage.OutputTokens == 0 || !strings.Contains(rec.Body.String(), `"model":"x"`) {
		t.Errorf("got %+v %v\n%s", res, err, rec.Body.String())
	}
	// The client sees its model name whatever the engine reports and however it spaces it.
	for _, stream := range []bool{true, false} {
		f.SetScript(fake.Script{Model: "claude-sonnet-4-5-20250929", Pretty: true})
		rec = httptest.NewRecorder()
		b := strings.Replace(body, `"stream":true`, `"stream":`+strconv.FormatBool(stream), 1)
		if _, err := e.Forward(context.Background(), &passthrough.Pass{Body: []byte(b), ClientModel: "sonnet"}, fake.Writer(rec)); err != nil {
			t.Fatal(err)
		}
		out := rec.Body.String()
		var m struct {
			Model   string `json:"model"`
			Message struct {
				Model string `json:"model"`
			} `json:"message"`
		}
		if stream {
			_, _, data, err := sse.NewReader(strings.NewReader(out)).Next()
			if err == nil {
				err = json.Unmarshal(data, &m)
			}
			if err != nil {
				t.Fatal(err)
			}
			m.Model = m.Message.Model
		} else if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatal(err)
		}
		if m.Model != "sonnet" || strings.Contains(out, "claude-sonnet-4-5") || !strings.Contains(out, `"model": "sonnet"`) {
			t.Errorf("stream=%v: got model %q, want sonnet with the engine's spacing:\n%s", stream, m.Model, out)
		}
	}

	// An error event is returned, not passed on: after content, the content was written; before
	// it (after message_start, content_block_start and ping), nothing was; an error object with a
	// 200 is an error too.
	for _, tt := range []struct {
		name    string
		after   int
		body    string
		written bool
	}{
		{"after content", 4, body, true},
		{"after the prelude", 3, body, false},
		{"right away", 1, body, false},
		{"not streamed", 1, `{"model":"x","max_tokens":5,"messages":[]}`, false},
	} {
		f.SetScript(fake.Script{ErrorAfter: tt.after})
		var buf bytes.Buffer
		_, err = e.Forward(context.Background(), &passthrough.Pass{Body: []byte(tt.body)}, fake.Writer(&buf))
		var ae *apierr.Error
		if !errors.As(err, &ae) || ae.Kind != apierr.Overloaded || strings.Contains(buf.String(), "error") || (buf.Len() > 0) != tt.written {
			t.Errorf("%s: got %v, want overloaded with written %v; output:\n%s", tt.name, err, tt.written, buf.String())
		}
	}
}

// A body the pipeline checked reaches the engine as it is when its model needs no renaming,
// streamed as Pass.Stream says; one whose model the engine names otherwise is renamed as before.
func TestForwardChecked(t *testing.T) {
	f := fake.NewAnthropic(fake.Script{Text: "a b c"})
	defer f.Close()
	e := newEngine(t, f, config.Timeouts{}, false)
	body := `{"model" : "sonnet","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"the \"model\" is"}]}`
	for i, tt := range []struct {
		model, want string
	}{
		{"", body},
		{"sonnet", body},
		{"claude-sonnet-4-5", strings.Replace(body, `"sonnet"`, `"claude-sonnet-4-5"`, 1)},
	} {
		rec := httptest.NewRecorder()
		res, err := e.Forward(context.Background(), &passthrough.Pass{Body: []byte(body), Model: tt.model, ClientModel: "sonnet",
			Checked: true, Stream: true}, fake.Writer(rec))
		if err != nil {
			t.Fatal(err)
		}
		if got := string(f.Requests()[i].Body); got != tt.want {
			t.Errorf("model %q: engine got %s\nwant %s", tt.model, got, tt.want)
		}
		if !res.Stream || res.Deltas != 3 || !strings.Contains(rec.Body.String(), `"model":"sonnet"`) {
			t.Errorf("model %q: got %+v\n%s", tt.model, res, rec.Body.String())
		}
	}
}

// The client's anthropic-beta headers (several lines joined) and its ?beta=true reach the engine
// on pass-through, and nothing else of its headers or query; without them the call is as before.
func TestForwardBeta(t *testing.T) {
	f := fake.NewAnthropic(fake.Script{Text: "a"})
	defer f.Close()
	e := newEngine(t, f, config.Timeouts{}, false)
	body := []byte(`{"model":"sonnet","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"x"}]}`)
	tests := []struct {
		name, query, wantURL, wantBeta string
		header                         http.Header
	}{
		{"none", "", "/v1/messages", "", nil},
		{"beta query and headers", "beta=true&x=1", "/v1/messages?beta=true", "a-1,b-2,c-3",
			http.Header{"Anthropic-Beta": {"a-1,b-2", "c-3"}, "X-App": {"cli"}}},
		{"beta=false", "beta=false", "/v1/messages", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 2 { // the second call takes the prepared header
				_, err := e.Forward(context.Background(), &passthrough.Pass{Body: body, Header: tt.header, Query: tt.query}, fake.Writer(httptest.NewRecorder()))
				if err != nil {
					t.Fatal(err)
				}
				got := f.Requests()[len(f.Requests())-1]
				if got.URL != tt.wantURL || got.Header.Get("Anthropic-Beta") != tt.wantBeta || got.Header.Get("X-App") != "" {
					t.Errorf("engine got %s, anthropic-beta %q, x-app %q; want %s, %q, none",
						got.URL, got.Header.Get("Anthropic-Beta"), got.Header.Get("X-App"), tt.wantURL, tt.wantBeta)
				}
				if got.Header.Get("Anthropic-Version") != Version || got.Header.Get("X-Api-Key") == "" {
					t.Errorf("engine got anthropic-version %q and no key: the fixed headers were lost", got.Header.Get("Anthropic-Version"))
				}
			}
		})
	}
}
