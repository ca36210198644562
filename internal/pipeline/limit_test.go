package pipeline

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/limit"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/tokenizer"
	"github.com/layer0ai/layer0/internal/upstream/fake"
)

// countingCounter counts its calls and every request as n tokens.
type countingCounter struct {
	n     int
	calls atomic.Int32
}

func (c *countingCounter) CountRequest(*llm.Request) int { c.calls.Add(1); return c.n }

// TestServeLimitsBeforeCounting checks that a key out of requests, or of concurrency, is refused
// without its input being counted, and that a request whose counted input does not fit gives back
// its request and slot.
func TestServeLimitsBeforeCounting(t *testing.T) {
	specs := []auth.Spec{{Name: "a", Hash: auth.HashHex("l0-a"), Limits: limit.Limits{RequestsPerMinute: 2,
		InputTokensPerMinute: 100, Concurrent: 1}}}
	r := newRig(t, map[string]any{"e": &scripted{}}, []rigModel{{name: "m", engines: []string{"e"}}}, rigOptions{keys: specs})
	counter := &countingCounter{n: 101}
	r.p.tokens = counter
	h := headerWithKey("l0-a")
	serve := func() error {
		c := Call{Request: request("m", "hello"), Sink: &recorder{}, Header: h}
		err := r.p.Serve(context.Background(), &c)
		if err != nil && !c.Record.RateLimited {
			t.Errorf("refused with %v but not recorded as rate limited", err)
		}
		return err
	}
	// Too many tokens: counted once, refused, and neither the request nor the slot is spent.
	if err := serve(); !strings.Contains(errText(err), "more than this API key's limit of 100") {
		t.Fatalf("101 tokens: got %v, want the too-big 429", err)
	}
	counter.n = 10
	for i := range 2 {
		if err := serve(); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if got := counter.calls.Load(); got != 3 {
		t.Fatalf("counted %d times for 3 admitted requests, want 3", got)
	}
	err := serve()
	var e *apierr.Error
	if !errors.As(err, &e) || e.Kind != apierr.RateLimit || !strings.Contains(e.Message, "2 requests per minute") {
		t.Fatalf("third request: got %v, want a 429 on requests per minute", err)
	}
	if got := counter.calls.Load(); got != 3 {
		t.Errorf("a request refused on its request count was counted (%d calls, want 3)", got)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// startSink notes the input tokens of the start event that reaches the client.
type startSink struct{ input int }

func (s *startSink) Send(ev *llm.Event) error {
	if ev.Kind == llm.EventStart {
		s.input = ev.Usage.InputTokens
	}
	return nil
}

func (s *startSink) Flush() error { return nil }

// TestServeCountsOnlyWhenNeeded checks that the input is counted only where something needs the
// count: an input-token limit or a context window before the engine runs, or a start event
// without the engine's own count (it then carries the estimate). Otherwise — a pass-through, an
// engine that counts its input — the tokenizer never runs.
func TestServeCountsOnlyWhenNeeded(t *testing.T) {
	specs := []auth.Spec{{Name: "limited", Hash: auth.HashHex("l0-limited"), Limits: limit.Limits{InputTokensPerMinute: 1000}},
		{Name: "free", Hash: auth.HashHex("l0-free"), Limits: limit.Limits{RequestsPerMinute: 1000}}}
	engines := map[string]any{"counts": &scripted{}, "late": &scripted{lateIn: true},
		"pass": &forwarder{format: llm.FormatAnthropic, body: `{"type":"message"}`}}
	r := newRig(t, engines, []rigModel{{name: "counts", engines: []string{"counts"}}, {name: "late", engines: []string{"late"}},
		{name: "pass", engines: []string{"pass"}}, {name: "windowed", engines: []string{"counts"}, window: 1000}},
		rigOptions{keys: specs})
	counter := &countingCounter{n: 42}
	r.p.tokens = counter
	for _, tc := range []struct {
		key, model string
		pass       bool
		calls      int32
		start      int // the start event's input tokens as the client sees them
	}{
		{"free", "counts", false, 0, 10},
		{"free", "pass", true, 0, 0},
		{"free", "late", false, 1, 42},
		{"free", "windowed", false, 1, 10},
		{"limited", "counts", false, 1, 10},
		{"limited", "pass", true, 1, 0},
		{"limited", "late", false, 1, 42}, // counted once, for the limit, and that count reused
	} {
		before := counter.calls.Load()
		sink := &startSink{}
		req := request(tc.model, "hello")
		req.Format = llm.FormatAnthropic
		c := Call{Request: req, Sink: sink, Header: headerWithKey("l0-" + tc.key)}
		if tc.pass {
			var out strings.Builder
			c.Forward = &Forward{Body: []byte(`{}`), Out: fake.Writer(&out)}
		}
		if err := r.p.Serve(context.Background(), &c); err != nil {
			t.Fatalf("%s on %s: %v", tc.key, tc.model, err)
		}
		if c.Record.Passed != tc.pass {
			t.Fatalf("%s on %s: passed %v, want %v", tc.key, tc.model, c.Record.Passed, tc.pass)
		}
		if got := counter.calls.Load() - before; got != tc.calls || sink.input != tc.start {
			t.Errorf("%s on %s: counted %d times, start input %d; want %d and %d", tc.key, tc.model, got, sink.input,
				tc.calls, tc.start)
		}
	}
}

// tokenizingCounter is the real tokenizer, counting the calls that tokenize a prompt.
type tokenizingCounter struct {
	*tokenizer.Codec
	calls atomic.Int32
}

func (c *tokenizingCounter) CountRequest(r *llm.Request) int {
	c.calls.Add(1)
	return c.Codec.CountRequest(r)
}

// TestServeRefusesOnALowerBound: a key with only an input-token limit sending a prompt far
// larger than the limit (1 MB of letters against 100 tokens a minute), or larger than what is
// left of it, is refused on the prompt's lower bound (bytes over the longest token's) without
// the prompt being tokenized; prompts that may fit are counted exactly.
func TestServeRefusesOnALowerBound(t *testing.T) {
	specs := []auth.Spec{{Name: "a", Hash: auth.HashHex("l0-a"), Limits: limit.Limits{InputTokensPerMinute: 100}}}
	r := newRig(t, map[string]any{"e": &scripted{}}, []rigModel{{name: "m", engines: []string{"e"}}}, rigOptions{keys: specs})
	counter := &tokenizingCounter{Codec: tokenizer.Default()}
	r.p.tokens = counter
	serve := func(text string) (Record, error) {
		c := Call{Request: request("m", text), Sink: &recorder{}, Header: headerWithKey("l0-a")}
		err := r.p.Serve(context.Background(), &c)
		return c.Record, err
	}
	letters := make([]byte, 1<<20)
	for i := range letters {
		letters[i] = byte('a' + (i*7919+i*i/3)%26)
	}
	rec, err := serve(string(letters))
	if !strings.Contains(errText(err), "more than this API key's limit of 100") || !rec.RateLimited {
		t.Fatalf("1 MB prompt: got %v, want the too-big 429", err)
	}
	if n := counter.calls.Load(); n != 0 {
		t.Fatalf("the 1 MB prompt was tokenized (%d calls) to be refused", n)
	}
	if _, err := serve("hello"); err != nil {
		t.Fatalf("a small prompt: %v", err)
	}
	if n := counter.calls.Load(); n != 1 {
		t.Fatalf("a prompt that fits: %d counts, want 1", n)
	}
	// Less than 90 tokens are left: a prompt of at least 90 (and its framing) is refused
	// uncounted, though it would fit an empty allowance.
	_, err = serve(string(letters[:90*counter.MaxTokenBytes()]))
	if !strings.Contains(errText(err), "this request needs about 9") {
		t.Fatalf("a prompt past what is left: got %v, want a 429", err)
	}
	if n := counter.calls.Load(); n != 1 {
		t.Fatalf("a prompt past what is left was tokenized (%d counts, want 1)", n)
	}
}

// TestServeWindowCountsOnlyPastTheBound: a model with a context window counts a prompt only
// when the prompt's upper bound (its bytes and framing) does not prove that it fits; a prompt
// that may not fit is counted exactly, and refused with the sizes or served by what it needs.
func TestServeWindowCountsOnlyPastTheBound(t *testing.T) {
	r := newRig(t, map[string]any{"e": &scripted{}}, []rigModel{{name: "m", engines: []string{"e"}, window: 64}},
		rigOptions{})
	counter := &tokenizingCounter{Codec: tokenizer.Default()}
	r.p.tokens = counter
	serve := func(text string) error {
		c := Call{Request: request("m", text), Sink: &recorder{}, Header: http.Header{}}
		return r.p.Serve(context.Background(), &c)
	}
	if err := serve("hello there"); err != nil {
		t.Fatalf("a short prompt: %v", err)
	}
	if n := counter.calls.Load(); n != 0 {
		t.Fatalf("a prompt whose bytes fit the window was tokenized (%d calls)", n)
	}
	// 100 bytes of one repeated word: more bytes than the window, far fewer tokens.
	if err := serve(strings.Repeat("hello ", 17)); err != nil {
		t.Fatalf("a prompt past the bound that fits: %v", err)
	}
	if n := counter.calls.Load(); n != 1 {
		t.Fatalf("a prompt past the bound: %d counts, want 1", n)
	}
	letters := make([]byte, 400)
	for i := range letters {
		letters[i] = byte('a' + (i*7919+i*i/3)%26)
	}
	err := serve(string(letters))
	if !strings.Contains(errText(err), "prompt is too long") || !strings.Contains(errText(err), "> 64 maximum") {
		t.Fatalf("a prompt longer than the window: got %v, want the 400 stating the sizes", err)
	}
	if n := counter.calls.Load(); n != 2 {
		t.Fatalf("a prompt longer than the window: %d counts, want 2", n)
	}
}
