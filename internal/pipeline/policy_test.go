package pipeline

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/limit"
	"github.com/layer0ai/layer0/internal/llm"
)

// keySpecs declares keys by name and secret, for tests.
type keySpecs []struct{ name, secret string }

func (ks keySpecs) specs() []auth.Spec {
	out := make([]auth.Spec, len(ks))
	for i, k := range ks {
		out[i] = auth.Spec{Name: k.name, Hash: auth.HashHex(k.secret)}
	}
	return out
}

func headerWithKey(key string) http.Header {
	h := http.Header{}
	h.Set("X-Api-Key", key)
	return h
}

func TestServeAuth(t *testing.T) {
	specs := []auth.Spec{
		{Name: "all", Hash: auth.HashHex("l0-all")},
		{Name: "small-only", Hash: auth.HashHex("l0-small"), Models: []string{"small"}},
	}
	engines := map[string]any{"e": &scripted{}}
	models := []rigModel{{name: "small", engines: []string{"e"}}, {name: "large", engines: []string{"e"}}}
	r := newRig(t, engines, models, rigOptions{keys: specs})
	tests := []struct {
		name     string
		header   http.Header
		model    string
		wantCode string // "" for success
		wantKey  string
		status   int
	}{
		{"x-api-key", headerWithKey("l0-all"), "large", "", "all", 200},
		{"bearer", http.Header{"Authorization": {"Bearer l0-all"}}, "large", "", "all", 200},
		{"missing", http.Header{}, "large", "MISSING_API_KEY", "", 401},
		{"unknown key", headerWithKey("l0-nope"), "large", "INVALID_API_KEY", "", 401},
		{"basic scheme", http.Header{"Authorization": {"Basic bDA6YWxs"}}, "large", "MISSING_API_KEY", "", 401},
		{"allowed model", headerWithKey("l0-small"), "small", "", "small-only", 200},
		{"model not allowed", headerWithKey("l0-small"), "large", "MODEL_NOT_ALLOWED", "small-only", 403},
		{"unknown model before permission", headerWithKey("l0-small"), "nope", "model_not_found", "small-only", 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Call{Request: request(tt.model, "hi"), Sink: &recorder{}, Header: tt.header}
			err := r.p.Serve(context.Background(), c)
			e := apierr.From(err)
			if tt.wantCode == "" {
				if err != nil {
					t.Fatalf("got %v, want success", err)
				}
			} else if e == nil || e.Code != tt.wantCode || e.Status() != tt.status {
				t.Fatalf("got %v, want %d %s", err, tt.status, tt.wantCode)
			}
			if c.Record.Key != tt.wantKey {
				t.Errorf("record key: got %q, want %q", c.Record.Key, tt.wantKey)
			}
			if e != nil && strings.Contains(e.Error(), "l0-") {
				t.Errorf("error %q mentions the key", e.Error())
			}
		})
	}

	// The in-process caller is trusted, whatever keys exist.
	c := &Call{Request: request("large", "hi"), Sink: &recorder{}, Key: Anonymous()}
	if err := r.p.Serve(context.Background(), c); err != nil {
		t.Errorf("in-process call: got %v, want success", err)
	}

	// Without keys, every caller is the anonymous key, whatever it sends.
	open := newRig(t, engines, models, rigOptions{})
	for _, h := range []http.Header{{}, headerWithKey("l0-anything")} {
		k, err := open.p.Admit(h)
		if err != nil || k != Anonymous() {
			t.Errorf("no keys, header %v: got %v %v, want the anonymous key", h, k, err)
		}
	}
}

func TestServeSizes(t *testing.T) {
	r := newRig(t, map[string]any{"e": &scripted{}}, []rigModel{{name: "m", engines: []string{"e"}}},
		rigOptions{sizes: limit.Sizes{MaxHeaderBytes: 200, MaxMessages: 2, MaxContentBytes: 16}})
	three := request("m", "a")
	three.Messages = append(three.Messages, three.Messages[0], three.Messages[0])
	tests := []struct {
		name   string
		header http.Header
		req    *llm.Request
		status int
		param  string
	}{
		{"fits", http.Header{}, request("m", "short"), 200, ""},
		{"headers too large", http.Header{"X-Big": {strings.Repeat("x", 300)}}, request("m", "short"), 413, ""},
		{"too many messages", http.Header{}, three, 400, "messages"},
		{"message too long", http.Header{}, request("m", strings.Repeat("long ", 5)), 400, "messages[0].content"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Call{Request: tt.req, Sink: &recorder{}, Header: tt.header}
			err := r.p.Serve(context.Background(), c)
			if tt.status == 200 {
				if err != nil {
					t.Fatalf("got %v, want success", err)
				}
				return
			}
			e := apierr.From(err)
			if e.Status() != tt.status || e.Param != tt.param {
				t.Errorf("got %d param %q (%v), want %d param %q", e.Status(), e.Param, err, tt.status, tt.param)
			}
		})
	}
}

// TestServeLimits drives each limit through the pipeline with an injected clock: requests,
// input tokens (estimated, then settled with the engine's count), output tokens (charged as
// they stream; a stream that crosses the limit finishes and the debt refuses what follows), and
// the global scope shared by keys.
func TestServeLimits(t *testing.T) {
	type step struct {
		advance time.Duration
		key     string // "a" or "b"
		words   int    // words in the prompt (each a token, plus one for the message)
		answer  int    // output tokens the engine streams
		input   int    // input tokens the engine reports; 0: the estimate
		status  int    // 200 or the error status
		retry   time.Duration
	}
	tests := []struct {
		name   string
		a      limit.Limits
		global limit.Limits
		steps  []step
	}{
		{"requests per minute", limit.Limits{RequestsPerMinute: 2}, limit.Limits{}, []step{
			{key: "a", status: 200}, {key: "a", status: 200}, {key: "a", status: 429, retry: 30 * time.Second},
			{key: "b", status: 200}, // another key is not affected
			{advance: 30 * time.Second, key: "a", status: 200}, {key: "a", status: 429, retry: 30 * time.Second},
		}},
		{"input tokens per minute", limit.Limits{InputTokensPerMinute: 20}, limit.Limits{}, []step{
			{key: "a", words: 9, status: 200}, {key: "a", words: 9, status: 200}, {key: "a", words: 9, status: 429, retry: 30 * time.Second},
			{advance: 30 * time.Second, key: "a", words: 9, status: 200},
			{advance: time.Minute, key: "a", words: 25, status: 429}, // more than the limit: never fits
		}},
		{"input settled with the engine's count", limit.Limits{InputTokensPerMinute: 50}, limit.Limits{}, []step{
			{key: "a", words: 1, input: 40, status: 200},                      // estimated 2, the engine counted 40
			{key: "a", words: 1, input: 2, status: 200},                       // 42 of 50 used
			{key: "a", words: 9, status: 429, retry: 2400 * time.Millisecond}, // needs 10, 8 left
		}},
		{"output tokens per minute", limit.Limits{OutputTokensPerMinute: 5}, limit.Limits{}, []step{
			{key: "a", answer: 8, status: 200}, // crosses the limit: finishes, 3 in debt
			{key: "a", answer: 1, status: 429, retry: 48 * time.Second},
			{advance: 48 * time.Second, key: "a", answer: 1, status: 200},
		}},
		{"global requests shared by keys", limit.Limits{}, limit.Limits{RequestsPerMinute: 3}, []step{
			{key: "a", status: 200}, {key: "b", status: 200}, {key: "a", status: 200},
			{key: "b", status: 429, retry: 20 * time.Second},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &scripted{}
			specs := []auth.Spec{{Name: "a", Hash: auth.HashHex("l0-a"), Limits: tt.a}, {Name: "b", Hash: auth.HashHex("l0-b")}}
			r := newRig(t, map[string]any{"e": e}, []rigModel{{name: "m", engines: []string{"e"}}},
				rigOptions{keys: specs, global: tt.global})
			for i, s := range tt.steps {
				r.clock.Advance(s.advance)
				e.words = make([]string, max(s.answer, 1))
				for j := range e.words {
					e.words[j] = "w "
				}
				words := max(s.words, 1)
				e.input = max(s.input, words+1)
				rec := &recorder{}
				c, err := r.serve(request("m", strings.Repeat("w ", words)), "l0-"+s.key, rec)
				if s.status == 200 {
					if err != nil {
						t.Fatalf("step %d: got %v, want success", i, err)
					}
					if n := strings.Count(strings.Join(rec.log, "\n"), "text w"); n != len(e.words) {
						t.Errorf("step %d: got %d deltas, want %d (a stream is never cut)", i, n, len(e.words))
					}
					continue
				}
				ae := apierr.From(err)
				if ae.Status() != s.status {
					t.Fatalf("step %d: got %v, want %d", i, err, s.status)
				}
				if !c.Record.RateLimited {
					t.Errorf("step %d: record not marked rate limited", i)
				}
				if s.retry != 0 && (ae.RetryAfter < s.retry-time.Millisecond || ae.RetryAfter > s.retry+time.Millisecond) {
					t.Errorf("step %d: retry after %v, want %v", i, ae.RetryAfter, s.retry)
				}
				if s.retry == 0 && ae.Header.Get("X-Should-Retry") != "false" {
					t.Errorf("step %d: a request that can never fit: got headers %v, want x-should-retry false", i, ae.Header)
				}
				if s.retry != 0 && ae.Header.Get("Anthropic-Ratelimit-Requests-Limit")+ae.Header.Get("Anthropic-Ratelimit-Input-Tokens-Limit")+
					ae.Header.Get("Anthropic-Ratelimit-Output-Tokens-Limit") == "" {
					t.Errorf("step %d: 429 without anthropic-ratelimit headers: %v", i, ae.Header)
				}
			}
		})
	}
}

// TestServeConcurrentLimit holds one request inside the engine: a second is refused while it is
// in flight, and admitted once it ends.
func TestServeConcurrentLimit(t *testing.T) {
	e := &scripted{entered: make(chan struct{}, 1), release: make(chan struct{})}
	specs := []auth.Spec{{Name: "a", Hash: auth.HashHex("l0-a"), Limits: limit.Limits{Concurrent: 1}}}
	r := newRig(t, map[string]any{"e": e}, []rigModel{{name: "m", engines: []string{"e"}}}, rigOptions{keys: specs})
	done := make(chan error, 1)
	go func() {
		_, err := r.serve(request("m", "hi"), "l0-a", &recorder{})
		done <- err
	}()
	<-e.entered
	_, err := r.serve(request("m", "hi"), "l0-a", &recorder{})
	if got := apierr.From(err).Status(); got != 429 {
		t.Errorf("second concurrent request: got %v, want 429", err)
	}
	close(e.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	go func() { <-e.entered }()
	if _, err := r.serve(request("m", "hi"), "l0-a", &recorder{}); err != nil {
		t.Errorf("after the first ended: got %v, want success", err)
	}
}

// TestServeChargesWhileStreaming checks output tokens are charged before the stream ends: the
// rate-limit state seen from inside the engine's stream already counts the deltas flushed.
func TestServeChargesWhileStreaming(t *testing.T) {
	specs := []auth.Spec{{Name: "a", Hash: auth.HashHex("l0-a"), Limits: limit.Limits{OutputTokensPerMinute: 100}}}
	var r *rig
	var seen []string
	probe := &probeSink{onFlush: func() {
		h := http.Header{}
		r.lim.Header("a", h)
		seen = append(seen, h.Get("Anthropic-Ratelimit-Output-Tokens-Remaining"))
	}}
	r = newRig(t, map[string]any{"e": &scripted{}}, []rigModel{{name: "m", engines: []string{"e"}}}, rigOptions{keys: specs})
	if _, err := r.serve(request("m", "hi"), "l0-a", probe); err != nil {
		t.Fatal(err)
	}
	// Flushes: after the prelude (held, so not passed on), then after each of the 3 deltas.
	if diff := cmp.Diff([]string{"99", "98", "97"}, seen); diff != "" {
		t.Errorf("remaining output tokens at each flush (-want +got):\n%s", diff)
	}
}

type probeSink struct {
	recorder
	onFlush func()
}

func (p *probeSink) Flush() error { p.onFlush(); return nil }

// TestServeAllocs guards the pipeline's own allocations per request, with auth and limits on.
func TestServeAllocs(t *testing.T) {
	r := allocRig(t)
	req := request("m", "hello there")
	h := headerWithKey("l0-a")
	var c Call
	sink := &nopSink{}
	got := testing.AllocsPerRun(200, func() {
		c = Call{Request: req, Sink: sink, Header: h}
		if err := r.p.Serve(context.Background(), &c); err != nil {
			t.Fatal(err)
		}
	})
	// The route plan is the one allocation.
	if got > 1 {
		t.Errorf("got %v allocations per request, want at most 1", got)
	}
}

// allocRig is a pipeline with a key limited in every dimension (never reached), over an engine
// and a counter that allocate nothing, so that what is measured is the pipeline.
func allocRig(t testing.TB) *rig {
	specs := []auth.Spec{{Name: "a", Hash: auth.HashHex("l0-a"), Limits: limit.Limits{RequestsPerMinute: 1 << 40,
		InputTokensPerMinute: 1 << 40, OutputTokensPerMinute: 1 << 40, Concurrent: 1 << 20}}}
	r := newRig(t, map[string]any{"e": &quietEngine{}}, []rigModel{{name: "m", engines: []string{"e"}}}, rigOptions{keys: specs})
	r.p.tokens = fixedCounter(12)
	return r
}

type fixedCounter int

func (n fixedCounter) CountRequest(*llm.Request) int { return int(n) }

// quietEngine answers with a prelude, two deltas and a stop from one reused event. Not safe for
// concurrent use.
type quietEngine struct{ ev llm.Event }

func (e *quietEngine) Close() error { return nil }

func (e *quietEngine) Generate(_ context.Context, req *llm.Request, sink llm.Sink) error {
	for _, ev := range [...]llm.Event{{Kind: llm.EventStart, Model: req.Model}, {Kind: llm.EventBlockStart},
		{Kind: llm.EventTextDelta, Text: "a"}, {Kind: llm.EventTextDelta, Text: "b"}, {Kind: llm.EventBlockStop},
		{Kind: llm.EventStop, Usage: llm.Usage{InputTokens: 12, OutputTokens: 2}}} {
		e.ev = ev
		if err := sink.Send(&e.ev); err != nil {
			return err
		}
		if ev.Kind == llm.EventTextDelta {
			if err := sink.Flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

type nopSink struct{}

func (nopSink) Send(*llm.Event) error { return nil }
func (nopSink) Flush() error          { return nil }

// BenchmarkServe is the pipeline's own cost per request with auth and every limit on, over an
// engine that answers at once.
func BenchmarkServe(b *testing.B) {
	r := allocRig(b)
	req := request("m", "hello there")
	h := headerWithKey("l0-a")
	sink := &nopSink{}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		c := Call{Request: req, Sink: sink, Header: h}
		if err := r.p.Serve(ctx, &c); err != nil {
			b.Fatal(err)
		}
	}
}
