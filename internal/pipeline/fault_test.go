package pipeline

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/route"
	"github.com/layer0ai/layer0/internal/upstream/fake"
)

func engineErr(status int, msg string) error {
	return &apierr.Error{Kind: apierr.KindForStatus(status), Message: msg}
}

// fallbackStream is what the client sees when the fallback model "backup" serves the default
// answer, once: one start, one block, three deltas, the stop.
var fallbackStream = []string{"start backup-up", "block 0", "text one", "flush", "text  two", "flush",
	"text  three", "flush", "block_stop 0", "stop 3"}

// TestServeFaults runs a primary engine that fails in every way an engine can, with a healthy
// fallback model behind it, and checks which replica served, the fallback reasons counted, and
// the exact stream the client saw: a failed attempt leaves no trace before content, and nothing
// is resent after it.
func TestServeFaults(t *testing.T) {
	tests := []struct {
		name      string
		primary   *scripted
		collect   bool // a non-streamed call (the client's sink is a Collector)
		wantEng   string
		wantFalls []string
		wantLog   []string // the streamed client's view; nil for collected calls
		wantText  string   // the collected answer
		wantErr   int      // the status of the error Serve returns; 0 for success
		wantCalls int32    // calls to the primary
	}{
		{name: "429 before any event", primary: &scripted{err: engineErr(429, "slow down")},
			wantEng: "b", wantFalls: []string{route.ReasonRateLimit}, wantLog: fallbackStream, wantCalls: 1},
		{name: "529 overloaded", primary: &scripted{err: engineErr(529, "overloaded")},
			wantEng: "b", wantFalls: []string{route.ReasonOverloaded}, wantLog: fallbackStream, wantCalls: 1},
		{name: "500", primary: &scripted{err: engineErr(500, "boom")},
			wantEng: "b", wantFalls: []string{route.ReasonServerError}, wantLog: fallbackStream, wantCalls: 1},
		{name: "out of memory", primary: &scripted{err: engineErr(500, "CUDA out of memory. Tried to allocate 2.00 GiB")},
			wantEng: "b", wantFalls: []string{route.ReasonOOM}, wantLog: fallbackStream, wantCalls: 1},
		{name: "context overflow from the engine", primary: &scripted{err: engineErr(400, "This model's maximum context length is 4096 tokens")},
			wantEng: "b", wantFalls: []string{route.ReasonContextLength}, wantLog: fallbackStream, wantCalls: 1},
		{name: "error inside a 200 stream before any content", primary: &scripted{prelude: true, err: engineErr(500, "engine failed")},
			wantEng: "b", wantFalls: []string{route.ReasonServerError}, wantLog: fallbackStream, wantCalls: 1},
		{name: "hang until the first-byte timeout", primary: &scripted{hang: true},
			wantEng: "b", wantFalls: []string{route.ReasonTimeout}, wantLog: fallbackStream, wantCalls: 1},
		{name: "break mid-stream after content: no retry, nothing resent", primary: &scripted{after: 2, err: engineErr(500, "fell over")},
			wantEng: "a", wantErr: 502, wantCalls: 1,
			wantLog: []string{"start primary-up", "block 0", "text one", "flush", "text  two", "flush"}},
		{name: "break mid-stream, not streamed: retried", primary: &scripted{after: 2, err: engineErr(500, "fell over")}, collect: true,
			wantEng: "b", wantFalls: []string{route.ReasonServerError}, wantText: "one two three", wantCalls: 1},
		{name: "client error: not retried", primary: &scripted{err: engineErr(400, "messages: bad")},
			wantEng: "a", wantErr: 400, wantCalls: 1},
		{name: "healthy primary", primary: &scripted{},
			wantEng: "a", wantCalls: 1, wantLog: []string{"start primary-up", "block 0", "text one", "flush", "text  two",
				"flush", "text  three", "flush", "block_stop 0", "stop 3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fb := &scripted{}
			r := newRig(t, map[string]any{"a": tt.primary, "b": fb},
				[]rigModel{{name: "primary", engines: []string{"a"}, fallbacks: []string{"backup"}}, {name: "backup", engines: []string{"b"}}},
				rigOptions{firstByte: 20 * time.Millisecond})
			var sink llm.Sink
			rec, col := &recorder{}, &llm.Collector{}
			sink = rec
			if tt.collect {
				sink = col
			}
			c, err := r.serve(request("primary", "hello there"), "", sink)
			if tt.wantErr != 0 {
				if got := apierr.From(err).Status(); got != tt.wantErr {
					t.Fatalf("got error %v (status %d), want status %d", err, got, tt.wantErr)
				}
			} else if err != nil {
				t.Fatalf("got error %v, want success", err)
			}
			if got := c.Record.Engine; got != tt.wantEng {
				t.Errorf("engine: got %q, want %q", got, tt.wantEng)
			}
			if diff := cmp.Diff(tt.wantFalls, c.Record.Fallbacks); diff != "" {
				t.Errorf("fallbacks (-want +got):\n%s", diff)
			}
			if got, want := c.Record.Attempts, 1+len(tt.wantFalls); got != want {
				t.Errorf("attempts: got %d, want %d", got, want)
			}
			if got := tt.primary.calls.Load(); got != tt.wantCalls {
				t.Errorf("primary calls: got %d, want %d", got, tt.wantCalls)
			}
			if tt.collect {
				if len(col.Response.Content) != 1 || col.Response.Content[0].Text != tt.wantText {
					t.Errorf("collected: got %+v, want one block %q", col.Response.Content, tt.wantText)
				}
				return
			}
			if diff := cmp.Diff(tt.wantLog, rec.log); diff != "" {
				t.Errorf("client stream (-want +got):\n%s", diff)
			}
		})
	}
}

// TestServeAllFail returns the last engine's error after the whole chain failed, as a clean
// error before any byte.
func TestServeAllFail(t *testing.T) {
	a, b := &scripted{err: engineErr(529, "first")}, &scripted{prelude: true, err: engineErr(529, "second")}
	r := newRig(t, map[string]any{"a": a, "b": b},
		[]rigModel{{name: "primary", engines: []string{"a"}, fallbacks: []string{"backup"}}, {name: "backup", engines: []string{"b"}}},
		rigOptions{})
	rec := &recorder{}
	c, err := r.serve(request("primary", "hi"), "", rec)
	e := apierr.From(err)
	if e.Status() != 529 || e.Message != "second" {
		t.Errorf("got %d %q, want 529 \"second\"", e.Status(), e.Message)
	}
	if len(rec.log) != 0 {
		t.Errorf("client saw %v, want nothing", rec.log)
	}
	if diff := cmp.Diff([]string{route.ReasonOverloaded}, c.Record.Fallbacks); diff != "" {
		t.Errorf("fallbacks (-want +got):\n%s", diff)
	}
}

// TestServeRetryOtherReplica retries on the model's other replica before any fallback.
func TestServeRetryOtherReplica(t *testing.T) {
	a1, a2, b := &scripted{err: engineErr(503, "busy")}, &scripted{}, &scripted{}
	r := newRig(t, map[string]any{"a1": a1, "a2": a2, "b": b},
		[]rigModel{{name: "primary", engines: []string{"a1", "a2"}, fallbacks: []string{"backup"}}, {name: "backup", engines: []string{"b"}}},
		rigOptions{})
	for i := range 4 {
		c, err := r.serve(request("primary", "hi"), "", &recorder{})
		if err != nil {
			t.Fatal(err)
		}
		if c.Record.Engine != "a2" || len(c.Record.Fallbacks) != 0 || c.Record.Served != "primary" {
			t.Errorf("request %d: served by %s (%s) with fallbacks %v, want a2 (primary) without", i,
				c.Record.Engine, c.Record.Served, c.Record.Fallbacks)
		}
	}
	if b.calls.Load() != 0 {
		t.Errorf("fallback called %d times, want 0", b.calls.Load())
	}
}

// TestServeEjectionSendsStraightToFallback checks that after enough faults the primary is
// ejected: requests then go to the fallback without calling it, counted as "unavailable".
func TestServeEjectionSendsStraightToFallback(t *testing.T) {
	a, b := &scripted{err: engineErr(529, "full")}, &scripted{}
	r := newRig(t, map[string]any{"a": a, "b": b},
		[]rigModel{{name: "primary", engines: []string{"a"}, fallbacks: []string{"backup"}}, {name: "backup", engines: []string{"b"}}},
		rigOptions{})
	for range 5 {
		if _, err := r.serve(request("primary", "hi"), "", &recorder{}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := r.serve(request("primary", "hi"), "", &recorder{})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.calls.Load(); got != 5 {
		t.Errorf("primary calls: got %d, want 5 (then ejected)", got)
	}
	if diff := cmp.Diff([]string{route.ReasonUnavailable}, c.Record.Fallbacks); diff != "" {
		t.Errorf("fallbacks (-want +got):\n%s", diff)
	}
	r.clock.Advance(31 * time.Second) // the ejection ends
	a.err = nil
	c, err = r.serve(request("primary", "hi"), "", &recorder{})
	if err != nil || c.Record.Engine != "a" {
		t.Errorf("after the ejection: served by %q (%v), want a", c.Record.Engine, err)
	}
}

func TestServeUtilizationSkip(t *testing.T) {
	a, b := &scripted{}, &scripted{}
	r := newRig(t, map[string]any{"a": a, "b": b},
		[]rigModel{{name: "m", engines: []string{"a", "b"}}}, rigOptions{})
	r.reps["a"].SetUtilization(0.95)
	for range 6 {
		c, err := r.serve(request("m", "hi"), "", &recorder{})
		if err != nil {
			t.Fatal(err)
		}
		if c.Record.Engine != "b" {
			t.Errorf("served by %s, want b (a is above the threshold)", c.Record.Engine)
		}
	}
	// When every replica is above the threshold, one still serves.
	r.reps["b"].SetUtilization(0.99)
	if _, err := r.serve(request("m", "hi"), "", &recorder{}); err != nil {
		t.Errorf("all busy: got %v, want served anyway", err)
	}

	// Down a fallback chain: a busy primary is skipped for an idle fallback, counted.
	p, f := &scripted{}, &scripted{}
	r = newRig(t, map[string]any{"p": p, "f": f},
		[]rigModel{{name: "primary", engines: []string{"p"}, fallbacks: []string{"backup"}}, {name: "backup", engines: []string{"f"}}},
		rigOptions{})
	r.reps["p"].SetUtilization(0.9)
	c, err := r.serve(request("primary", "hi"), "", &recorder{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Record.Engine != "f" || !cmp.Equal(c.Record.Fallbacks, []string{route.ReasonUtilization}) {
		t.Errorf("got %s with %v, want f with [utilization]", c.Record.Engine, c.Record.Fallbacks)
	}
}

func TestServeContextRouting(t *testing.T) {
	small, big := &scripted{}, &scripted{}
	r := newRig(t, map[string]any{"small": small, "big": big},
		[]rigModel{{name: "s", engines: []string{"small"}, window: 5, fallbacks: []string{"b"}}, {name: "b", engines: []string{"big"}, window: 20}},
		rigOptions{})
	tests := []struct {
		text     string
		wantEng  string
		wantFall []string
		wantErr  int
	}{
		{"fits", "small", nil, 0},
		{"a b c d e f g h", "big", []string{route.ReasonContextLength}, 0},
		{"a b c d e f g h i j k l m n o p q r s t u v w", "", nil, 400},
	}
	for _, tt := range tests {
		c, err := r.serve(request("s", tt.text), "", &recorder{})
		if tt.wantErr != 0 {
			e := apierr.From(err)
			if e.Status() != tt.wantErr || e.Code != "context_length_exceeded" {
				t.Errorf("%q: got %v, want %d context_length_exceeded", tt.text, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tt.text, err)
		}
		if c.Record.Engine != tt.wantEng || !cmp.Equal(c.Record.Fallbacks, tt.wantFall) {
			t.Errorf("%q: got %s %v, want %s %v", tt.text, c.Record.Engine, c.Record.Fallbacks, tt.wantEng, tt.wantFall)
		}
	}
}

func TestServeSplitSticky(t *testing.T) {
	a, b := &scripted{}, &scripted{}
	r := newRig(t, map[string]any{"a": a, "b": b},
		[]rigModel{{name: "v1", engines: []string{"a"}}, {name: "v2", engines: []string{"b"}}},
		rigOptions{
			keys:    keySpecs{{"k1", "l0-one"}, {"k2", "l0-two"}, {"k3", "l0-three"}, {"k4", "l0-four"}}.specs(),
			splits:  []route.Split{{Name: "chat", Targets: []route.Target{{Model: "v1", Weight: 1}, {Model: "v2", Weight: 1}}, Sticky: true}},
			aliases: map[string]string{"latest": "chat"},
		})
	arms := map[string]bool{}
	for _, key := range []string{"l0-one", "l0-two", "l0-three", "l0-four"} {
		var first string
		for i := range 5 {
			c, err := r.serve(request("latest", "hi"), key, &recorder{})
			if err != nil {
				t.Fatal(err)
			}
			if c.Record.Model != "latest" {
				t.Errorf("model: got %q, want the alias as asked", c.Record.Model)
			}
			if i == 0 {
				first = c.Record.Served
			} else if c.Record.Served != first {
				t.Errorf("key %s: request %d served by %s, want %s (sticky)", key, i, c.Record.Served, first)
			}
		}
		arms[first] = true
	}
	if len(arms) != 2 {
		t.Errorf("4 keys landed on arms %v, want both arms used", arms)
	}
}

func TestServeForward(t *testing.T) {
	body := `data: {"choices":[{"delta":{"content":"hi"}}]}` + "\n\ndata: [DONE]\n\n"
	tests := []struct {
		name     string
		primary  *forwarder
		wantOut  string
		wantEng  string
		wantErr  bool
		wantPass bool
	}{
		{"passes through", &forwarder{format: llm.FormatOpenAI, body: "A" + body}, "A" + body, "a", false, true},
		{"fails before writing: falls back", &forwarder{scripted: scripted{err: engineErr(529, "full")}, format: llm.FormatOpenAI},
			"B" + body, "b", false, true},
		{"fails after writing: the stream is cut, no retry", &forwarder{scripted: scripted{err: engineErr(500, "cut")},
			format: llm.FormatOpenAI, body: "A" + body, cutAt: 10}, "A" + body[:9], "a", true, true},
		{"another format: events, not bytes", &forwarder{format: llm.FormatAnthropic, body: "A" + body}, "", "a", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fb := &forwarder{format: llm.FormatOpenAI, body: "B" + body}
			r := newRig(t, map[string]any{"a": tt.primary, "b": fb},
				[]rigModel{{name: "primary", engines: []string{"a"}, fallbacks: []string{"backup"}}, {name: "backup", engines: []string{"b"}}},
				rigOptions{})
			var out bytes.Buffer
			req := request("primary", "hi")
			req.Format = llm.FormatOpenAI
			c := &Call{Request: req, Sink: &recorder{}, Key: Anonymous(), Forward: &Forward{Body: []byte(`{}`), Out: fake.Writer(&out)}}
			err := r.p.Serve(t.Context(), c)
			if (err != nil) != tt.wantErr {
				t.Fatalf("got error %v, want error %v", err, tt.wantErr)
			}
			if got := out.String(); got != tt.wantOut {
				t.Errorf("client bytes: got %q, want %q", got, tt.wantOut)
			}
			if c.Record.Engine != tt.wantEng || c.Record.Passed != tt.wantPass {
				t.Errorf("got engine %s passed %v, want %s %v", c.Record.Engine, c.Record.Passed, tt.wantEng, tt.wantPass)
			}
			if got, _ := tt.primary.received.Load().(string); got != "primary-up" {
				t.Errorf("engine model: got %q, want primary-up", got)
			}
		})
	}
}

func TestPick(t *testing.T) {
	a, b := &scripted{}, &scripted{}
	r := newRig(t, map[string]any{"a": a, "b": b},
		[]rigModel{{name: "primary", engines: []string{"a"}, fallbacks: []string{"backup"}}, {name: "backup", engines: []string{"b"}}},
		rigOptions{keys: keySpecs{{"k", "l0-k"}}.specs()})
	key, err := r.p.Admit(headerWithKey("l0-k"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.p.Pick(key, "primary")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Picked{Name: "primary", Model: "primary", Engine: "a", URL: "http://a.example:8000"}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if o := r.reps["a"].Outstanding(); o != 0 {
		t.Errorf("outstanding after a pick: got %d, want 0", o)
	}
	r.reps["a"].SetUtilization(1)
	got, err = r.p.Pick(key, "primary")
	if err != nil || got.Engine != "b" {
		t.Errorf("busy primary: got %+v %v, want the fallback b", got, err)
	}
	if _, err := r.p.Pick(key, "nope"); apierr.From(err).Status() != 404 {
		t.Errorf("unknown model: got %v, want 404", err)
	}
	if a.calls.Load()+b.calls.Load() != 0 {
		t.Error("a pick called an engine")
	}
}
