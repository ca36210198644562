package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/config"
	"github.com/layer0ai/layer0/internal/engine"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/tokenizer"
)

var (
	_ engine.Engine  = (*Engine)(nil)
	_ engine.Counter = (*Engine)(nil)
)

func newEngine(t testing.TB, cfg config.Sim) *Engine {
	t.Helper()
	e, err := New(cfg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

func userReq(text string) *llm.Request {
	return &llm.Request{Model: "sim-1", MaxTokens: 1000, Messages: []llm.Message{
		{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: text}}}}}
}

// recorder is a Sink that keeps a copy of every event, counts flushes, checks the event order
// llm.EventKind documents, and can block or fail on a chosen event.
type recorder struct {
	t       testing.TB
	events  []llm.Event
	flushes int
	coll    llm.Collector
	// onSend, when set, runs before each event is recorded; its error is returned by Send.
	onSend func(ev *llm.Event) error
}

func (r *recorder) Send(ev *llm.Event) error {
	if r.onSend != nil {
		if err := r.onSend(ev); err != nil {
			return err
		}
	}
	if ev.Kind == llm.EventTextDelta || ev.Kind == llm.EventToolDelta {
		if ev.Text == "" {
			r.t.Errorf("event %d: empty delta", len(r.events))
		}
		if !utf8.ValidString(ev.Text) {
			r.t.Errorf("event %d: delta %q is not valid UTF-8", len(r.events), ev.Text)
		}
	}
	r.events = append(r.events, *ev)
	return r.coll.Send(ev)
}

func (r *recorder) Flush() error { r.flushes++; return nil }

// checkOrder checks Start, then per block BlockStart, deltas of the block's kind, BlockStop
// with indexes from 0, then Stop.
func (r *recorder) checkOrder() {
	r.t.Helper()
	ev := r.events
	if len(ev) < 2 || ev[0].Kind != llm.EventStart || ev[len(ev)-1].Kind != llm.EventStop {
		r.t.Fatalf("events do not run from Start to Stop: %v", kinds(ev))
	}
	block, open := -1, false
	for i, e := range ev[1 : len(ev)-1] {
		switch e.Kind {
		case llm.EventBlockStart:
			if open || e.Index != block+1 {
				r.t.Fatalf("event %d: BlockStart %d after block %d (open %v): %v", i+1, e.Index, block, open, kinds(ev))
			}
			block, open = e.Index, true
		case llm.EventTextDelta, llm.EventToolDelta:
			want := llm.EventTextDelta
			if r.coll.Response.Content[block].Type == llm.BlockToolUse {
				want = llm.EventToolDelta
			}
			if !open || e.Index != block || e.Kind != want {
				r.t.Fatalf("event %d: delta kind %d for block %d outside it or of the wrong kind", i+1, e.Kind, e.Index)
			}
		case llm.EventBlockStop:
			if !open || e.Index != block {
				r.t.Fatalf("event %d: BlockStop %d while block %d open %v", i+1, e.Index, block, open)
			}
			open = false
		default:
			r.t.Fatalf("event %d: unexpected kind %d inside the message", i+1, e.Kind)
		}
	}
	if open {
		r.t.Fatalf("block %d never stopped", block)
	}
}

func kinds(ev []llm.Event) []llm.EventKind {
	out := make([]llm.EventKind, len(ev))
	for i, e := range ev {
		out[i] = e.Kind
	}
	return out
}

// generate runs one request to completion and checks the stream's shape.
func generate(t testing.TB, e *Engine, req *llm.Request) (*recorder, error) {
	t.Helper()
	rec := &recorder{t: t}
	err := e.Generate(context.Background(), req, rec)
	if err == nil {
		rec.checkOrder()
	}
	return rec, err
}

func mustGenerate(t testing.TB, e *Engine, req *llm.Request) *llm.Response {
	t.Helper()
	rec, err := generate(t, e, req)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return &rec.coll.Response
}

func textOf(r *llm.Response) string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

func TestDeterministic(t *testing.T) {
	e := newEngine(t, config.Sim{})
	a := mustGenerate(t, e, userReq("Tell me about rivers."))
	b := mustGenerate(t, newEngine(t, config.Sim{}), userReq("Tell me about rivers."))
	if diff := cmp.Diff(textOf(a), textOf(b)); diff != "" {
		t.Errorf("same prompt, different answers (-first +second):\n%s", diff)
	}
	c := mustGenerate(t, e, userReq("Tell me about mountains."))
	if textOf(a) == textOf(c) {
		t.Errorf("different prompts gave the same answer %q", textOf(a))
	}
	if a.Model != "sim-1" {
		t.Errorf("Model = %q, want the request's %q", a.Model, "sim-1")
	}
}

// TestLoremTokensAreExact checks that the output token count is the tokenizer's count of the
// text, and that answers have their documented natural lengths, over many prompts.
func TestLoremTokensAreExact(t *testing.T) {
	e := newEngine(t, config.Sim{KVCacheTokens: 16})
	tok := tokenizer.Default()
	for i := range 200 {
		resp := mustGenerate(t, e, userReq(fmt.Sprintf("prompt number %d", i)))
		text := textOf(resp)
		if got, want := resp.Usage.OutputTokens, tok.Count(text); got != want {
			t.Fatalf("prompt %d: OutputTokens = %d, but the text %q has %d tokens", i, got, text, want)
		}
		if n := resp.Usage.OutputTokens; n < minAnswer || n > minAnswer+spanAnswer+40 {
			t.Errorf("prompt %d: natural length %d tokens, want about %d to %d", i, n, minAnswer, minAnswer+spanAnswer)
		}
		if resp.Stop != llm.StopEndTurn || !strings.HasSuffix(text, ".") {
			t.Errorf("prompt %d: stop %v, text ends %q; want end_turn after a full stop", i, resp.Stop, text[max(0, len(text)-5):])
		}
	}
}

func TestUsageAddsUp(t *testing.T) {
	e := newEngine(t, config.Sim{})
	req := userReq("How many tokens is this?")
	n, err := e.CountTokens(req)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		resp := mustGenerate(t, e, req)
		u := resp.Usage
		if got := u.InputTokens + u.CacheReadInputTokens + u.CacheCreationInputTokens; got != n {
			t.Errorf("request %d: input %d + cache read %d + creation %d = %d, want CountTokens %d",
				i, u.InputTokens, u.CacheReadInputTokens, u.CacheCreationInputTokens, got, n)
		}
	}
}

func TestStartAndStopUsage(t *testing.T) {
	e := newEngine(t, config.Sim{})
	rec, err := generate(t, e, userReq("usage please"))
	if err != nil {
		t.Fatal(err)
	}
	start, stop := rec.events[0], rec.events[len(rec.events)-1]
	if start.Usage.OutputTokens != 0 || start.Usage.InputTokens == 0 {
		t.Errorf("Start usage = %+v, want input counted and no output yet", start.Usage)
	}
	if stop.Usage.InputTokens != start.Usage.InputTokens || stop.Usage.OutputTokens == 0 {
		t.Errorf("Stop usage = %+v, want Start's input %d and the output", stop.Usage, start.Usage.InputTokens)
	}
}

func TestStopReasons(t *testing.T) {
	natural := mustGenerate(t, newEngine(t, config.Sim{}), userReq("stop reasons"))
	full := textOf(natural)
	words := strings.Fields(full)
	tool := llm.Tool{Name: "lookup", InputSchema: []byte(`{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}`)}
	tests := []struct {
		name    string
		mutate  func(r *llm.Request)
		stop    llm.StopReason
		seq     string
		outputs int // want this many output tokens; -1: the natural count
	}{
		{"end_turn", func(r *llm.Request) {}, llm.StopEndTurn, "", -1},
		{"max_tokens", func(r *llm.Request) { r.MaxTokens = 5 }, llm.StopMaxTokens, "", 5},
		{"max_tokens equal to the natural length", func(r *llm.Request) { r.MaxTokens = natural.Usage.OutputTokens }, llm.StopEndTurn, "", -1},
		{"stop_sequence", func(r *llm.Request) { r.StopSequences = []string{"zzz", words[3]} }, llm.StopSequence, words[3], 0},
		{"tool_use", func(r *llm.Request) {
			r.Tools = []llm.Tool{tool}
			r.ToolChoice = llm.ToolChoice{Type: llm.ToolAny}
		}, llm.StopToolUse, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := userReq("stop reasons")
			tt.mutate(req)
			resp := mustGenerate(t, newEngine(t, config.Sim{}), req)
			if resp.Stop != tt.stop || resp.StopSequence != tt.seq {
				t.Errorf("stop = %v %q, want %v %q", resp.Stop, resp.StopSequence, tt.stop, tt.seq)
			}
			want := tt.outputs
			if want == -1 {
				want = natural.Usage.OutputTokens
			}
			if want > 0 && resp.Usage.OutputTokens != want {
				t.Errorf("OutputTokens = %d, want %d", resp.Usage.OutputTokens, want)
			}
		})
	}
}

func TestMaxTokensCutsText(t *testing.T) {
	e := newEngine(t, config.Sim{})
	full := textOf(mustGenerate(t, e, userReq("cut me")))
	tok := tokenizer.Default()
	ids := tok.Encode(nil, full)
	for _, n := range []int{1, 2, 7, len(ids) - 1} {
		req := userReq("cut me")
		req.MaxTokens = n
		resp := mustGenerate(t, e, req)
		if got, want := textOf(resp), string(tok.Decode(nil, ids[:n])); got != want {
			t.Errorf("max_tokens %d: text %q, want %q", n, got, want)
		}
		if resp.Stop != llm.StopMaxTokens || resp.Usage.OutputTokens != n {
			t.Errorf("max_tokens %d: stop %v with %d tokens", n, resp.Stop, resp.Usage.OutputTokens)
		}
	}
}

// TestStopSequenceAcrossDeltas picks stop sequences that start inside one token and end inside
// a later one, and checks that the text stops right before them, with no delta leaking past.
func TestStopSequenceAcrossDeltas(t *testing.T) {
	e := newEngine(t, config.Sim{})
	rec, err := generate(t, e, userReq("boundaries"))
	if err != nil {
		t.Fatal(err)
	}
	var deltas []string
	for _, ev := range rec.events {
		if ev.Kind == llm.EventTextDelta {
			deltas = append(deltas, ev.Text)
		}
	}
	full := strings.Join(deltas, "")
	for k := 2; k < min(len(deltas)-2, 12); k++ {
		d0, d1 := deltas[k], deltas[k+1]
		if len(d0) < 2 || len(d1) < 2 {
			continue
		}
		seq := d0[len(d0)-2:] + d1[:2] // spans the boundary between deltas k and k+1
		at := strings.Index(full, seq)
		req := userReq("boundaries")
		req.StopSequences = []string{seq}
		r2, err := generate(t, e, req)
		if err != nil {
			t.Fatal(err)
		}
		resp := r2.coll.Response
		if got, want := textOf(&resp), full[:at]; got != want {
			t.Errorf("stop %q: text %q, want %q", seq, got, want)
		}
		if resp.Stop != llm.StopSequence || resp.StopSequence != seq {
			t.Errorf("stop %q: got %v %q", seq, resp.Stop, resp.StopSequence)
		}
		// Lorem deltas are one token each: the sequence completes with delta k+1.
		end := at + len(seq)
		tokens, off := 0, 0
		for _, d := range deltas {
			tokens++
			off += len(d)
			if off >= end {
				break
			}
		}
		if resp.Usage.OutputTokens != tokens {
			t.Errorf("stop %q: OutputTokens = %d, want %d (through the completing token)", seq, resp.Usage.OutputTokens, tokens)
		}
	}
}

func TestStopSequenceChoice(t *testing.T) {
	e := newEngine(t, config.Sim{Mode: "echo"})
	tests := []struct {
		name  string
		text  string
		stops []string
		want  string
		seq   string
	}{
		{"earliest completion wins over earliest start", "alpha beta gamma delta", []string{"beta gamma delta", "gamma"}, "alpha beta ", "gamma"},
		{"same token: listed order", "one two three", []string{"two", "tw"}, "one ", "two"},
		{"at the very start", "stop here", []string{"stop"}, "", "stop"},
		{"not found", "nothing to see", []string{"absent"}, "nothing to see", ""},
		{"empty sequences ignored", "abc", []string{""}, "abc", ""},
		{"multi-byte text", "café au lait ☕ ok", []string{"☕"}, "café au lait ", "☕"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := userReq(tt.text)
			req.StopSequences = tt.stops
			resp := mustGenerate(t, e, req)
			if got := textOf(resp); got != tt.want || resp.StopSequence != tt.seq {
				t.Errorf("text %q stop %q, want %q stop %q", got, resp.StopSequence, tt.want, tt.seq)
			}
		})
	}
}

func TestEcho(t *testing.T) {
	e := newEngine(t, config.Sim{Mode: "echo"})
	tok := tokenizer.Default()
	tests := []struct {
		name string
		req  *llm.Request
		want string
	}{
		{"plain", userReq("Repeat after me: hello."), "Repeat after me: hello."},
		{"non-Latin and emoji", userReq("日本語のテキスト 🙂👍🏽 é"), "日本語のテキスト 🙂👍🏽 é"},
		{"last user message", &llm.Request{Messages: []llm.Message{
			{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "first"}}},
			{Role: llm.RoleAssistant, Content: []llm.Block{{Type: llm.BlockText, Text: "reply"}}},
			{Role: llm.RoleUser, Content: []llm.Block{{Type: llm.BlockText, Text: "second"}, {Type: llm.BlockText, Text: "part"}}},
		}}, "second\n\npart"},
		{"empty", &llm.Request{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := mustGenerate(t, e, tt.req)
			if got := textOf(resp); got != tt.want {
				t.Errorf("text %q, want %q", got, tt.want)
			}
			if got, want := resp.Usage.OutputTokens, tok.Count(tt.want); got != want {
				t.Errorf("OutputTokens = %d, want %d", got, want)
			}
		})
	}
}

// TestEchoMaxTokensInsideCharacter cuts an answer at every token count: no delta may carry half
// a character, and the text is always a prefix of the full echo.
func TestEchoMaxTokensInsideCharacter(t *testing.T) {
	e := newEngine(t, config.Sim{Mode: "echo"})
	const text = "🙂👍🏽日本語"
	n := tokenizer.Default().Count(text)
	for m := 1; m < n; m++ {
		req := userReq(text)
		req.MaxTokens = m
		resp := mustGenerate(t, e, req) // the recorder checks each delta is valid UTF-8
		if got := textOf(resp); !strings.HasPrefix(text, got) {
			t.Errorf("max_tokens %d: %q is not a prefix of %q", m, got, text)
		}
		if resp.Usage.OutputTokens != m || resp.Stop != llm.StopMaxTokens {
			t.Errorf("max_tokens %d: %d tokens, stop %v", m, resp.Usage.OutputTokens, resp.Stop)
		}
	}
}

func TestContextWindow(t *testing.T) {
	e := newEngine(t, config.Sim{ContextWindow: 40})
	_, err := generate(t, e, userReq(strings.Repeat("many words here ", 20)))
	var ae *apierr.Error
	if !errors.As(err, &ae) || ae.Kind != apierr.InvalidRequest || ae.Code != "context_length_exceeded" {
		t.Fatalf("long prompt: err = %v, want a 400 context_length_exceeded", err)
	}
	req := userReq("short")
	req.MaxTokens = 0 // no max_tokens: the window bounds the answer
	resp := mustGenerate(t, e, req)
	n, _ := e.CountTokens(req)
	if got, want := resp.Usage.OutputTokens, 40-n; got != want || resp.Stop != llm.StopMaxTokens {
		t.Errorf("OutputTokens = %d stop %v, want %d max_tokens (the rest of the window)", got, resp.Stop, want)
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		name    string
		cfg     config.Sim
		wantErr string
		check   func(c config.Sim) string
	}{
		{"zero gets defaults", config.Sim{}, "", func(c config.Sim) string {
			if c.MaxConcurrency != 256 || c.MaxQueue != 1024 || c.KVCacheTokens != 262144 ||
				c.BlockTokens != 16 || c.ContextWindow != 200000 || c.Mode != "lorem" ||
				c.Fail.Message != "simulated failure" || c.TTFT != 0 {
				return fmt.Sprintf("%+v", c)
			}
			return ""
		}},
		{"realistic preset", config.Sim{Preset: "realistic", InterTokenLatency: time.Millisecond}, "", func(c config.Sim) string {
			if c.TTFT != 150*time.Millisecond || c.PrefillPerToken != 50*time.Microsecond || c.InterTokenLatency != time.Millisecond {
				return fmt.Sprintf("%+v", c)
			}
			return ""
		}},
		{"unknown mode", config.Sim{Mode: "poetry"}, `sim: sim.mode: unknown mode "poetry"`, nil},
		{"unknown preset", config.Sim{Preset: "slow"}, `sim: sim.preset: unknown preset "slow"`, nil},
		{"negative delay", config.Sim{TTFT: -1}, "sim: sim.ttft: must not be negative", nil},
		{"negative size", config.Sim{MaxQueue: -1}, "sim: sim.max_queue: must not be negative", nil},
		{"bad fail status", config.Sim{Fail: config.SimFail{Status: 200}}, "sim: sim.fail.status: must be an HTTP error status", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := New(tt.cfg, nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New: err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if msg := tt.check(e.cfg); msg != "" {
				t.Errorf("config after New: %s", msg)
			}
			if !e.Simulated() {
				t.Error("Simulated() = false")
			}
		})
	}
}

func TestFailStatus(t *testing.T) {
	tests := []struct {
		status int
		kind   apierr.Kind
		retry  time.Duration
	}{
		{429, apierr.RateLimit, time.Second},
		{529, apierr.Overloaded, time.Second},
		{500, apierr.BadGateway, 0},
		{400, apierr.InvalidRequest, 0},
		{503, apierr.Overloaded, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			e := newEngine(t, config.Sim{Fail: config.SimFail{Status: tt.status, Message: "boom"}})
			rec := &recorder{t: t}
			err := e.Generate(context.Background(), userReq("hi"), rec)
			var ae *apierr.Error
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v, want *apierr.Error", err)
			}
			if ae.Kind != tt.kind || ae.RetryAfter != tt.retry || ae.Message != "boom" {
				t.Errorf("got kind %v retry %v message %q, want %v %v %q", ae.Kind, ae.RetryAfter, ae.Message, tt.kind, tt.retry, "boom")
			}
			if len(rec.events) != 0 {
				t.Errorf("%d events sent before the failure, want none", len(rec.events))
			}
		})
	}
}

func TestFailAfterTokens(t *testing.T) {
	e := newEngine(t, config.Sim{Fail: config.SimFail{AfterTokens: 3}})
	rec := &recorder{t: t}
	err := e.Generate(context.Background(), userReq("fail midway"), rec)
	var ae *apierr.Error
	if !errors.As(err, &ae) || ae.Kind != apierr.API || ae.Message != "simulated failure" {
		t.Fatalf("err = %v, want an api_error %q", err, "simulated failure")
	}
	deltas := 0
	for _, ev := range rec.events {
		if ev.Kind == llm.EventTextDelta {
			deltas++
		}
		if ev.Kind == llm.EventStop {
			t.Error("Stop sent before the injected failure")
		}
	}
	if deltas != 3 {
		t.Errorf("%d deltas before the failure, want 3", deltas)
	}
	if rec.flushes == 0 {
		t.Error("the tokens before the failure were not flushed")
	}
}

func TestFailHang(t *testing.T) {
	e := newEngine(t, config.Sim{Fail: config.SimFail{Hang: true}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	rec := &recorder{t: t}
	err := e.Generate(ctx, userReq("hang"), rec)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the context's deadline", err)
	}
	if len(rec.events) != 0 {
		t.Errorf("%d events from a hanging engine, want none", len(rec.events))
	}
	if s := e.Stats(); s.Running != 0 {
		t.Errorf("Running = %d after the hang ended, want 0", s.Running)
	}
}

func TestFailFirstRequests(t *testing.T) {
	e := newEngine(t, config.Sim{Fail: config.SimFail{Status: 529, FirstRequests: 2}})
	for i, wantErr := range []bool{true, true, false, false} {
		_, err := generate(t, e, userReq("retry me"))
		if (err != nil) != wantErr {
			t.Errorf("request %d: err = %v, want failure %v", i+1, err, wantErr)
		}
	}
}

func TestFlushes(t *testing.T) {
	tests := []struct {
		name string
		cfg  config.Sim
		want func(tokens int) int
	}{
		{"zero delays: one flush at the end", config.Sim{}, func(int) int { return 1 }},
		{"ttft and latency: before each wait and at the end", config.Sim{TTFT: time.Microsecond, InterTokenLatency: time.Microsecond},
			func(n int) int { return 1 + (n - 1) + 1 }},
		{"latency only", config.Sim{InterTokenLatency: time.Microsecond}, func(n int) int { return (n - 1) + 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := userReq("flush")
			req.MaxTokens = 8
			rec, err := generate(t, newEngine(t, tt.cfg), req)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := rec.flushes, tt.want(8); got != want {
				t.Errorf("flushes = %d, want %d", got, want)
			}
		})
	}
}

// TestPrefillDelay checks that the first token waits at least for the prefill of the uncached
// prompt tokens, and that a repeated prompt is uncached only past its last full block.
func TestPrefillDelay(t *testing.T) {
	const per = 200 * time.Microsecond
	e := newEngine(t, config.Sim{PrefillPerToken: per, BlockTokens: 4})
	req := userReq(strings.Repeat("a fairly long prompt with many tokens in it ", 12))
	n, _ := e.CountTokens(req)
	first := func() (time.Duration, llm.Usage) {
		var t0 time.Time
		var ttft time.Duration
		rec := &recorder{t: t, onSend: func(ev *llm.Event) error {
			switch ev.Kind {
			case llm.EventStart:
				t0 = time.Now()
			case llm.EventTextDelta:
				if ttft == 0 {
					ttft = time.Since(t0)
				}
			}
			return nil
		}}
		req.MaxTokens = 1
		if err := e.Generate(context.Background(), req, rec); err != nil {
			t.Fatal(err)
		}
		return ttft, rec.coll.Response.Usage
	}
	cold, u1 := first()
	_, u2 := first()
	cached := min(n/4*4, n-1) // at least one token is always computed
	if u1.InputTokens != n || u2.InputTokens != n-cached || u2.CacheReadInputTokens != cached {
		t.Errorf("cold usage %+v, warm usage %+v; want %d input cold, %d cached warm", u1, u2, n, cached)
	}
	if min := time.Duration(n) * per; cold < min {
		t.Errorf("cold first token after %v, want at least %v (%d tokens × %v)", cold, min, n, per)
	}
}

func TestCancelMidStream(t *testing.T) {
	e := newEngine(t, config.Sim{InterTokenLatency: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := &recorder{t: t, onSend: func(ev *llm.Event) error {
		if ev.Kind == llm.EventTextDelta {
			cancel()
		}
		return nil
	}}
	done := make(chan error, 1)
	go func() { done <- e.Generate(ctx, userReq("cancel me"), rec) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Generate did not return within 5s of the cancel")
	}
	if s := e.Stats(); s.Running != 0 || s.KVCacheUsage != 0 {
		t.Errorf("after cancel: %+v, want nothing running or held", s)
	}
}

func TestCancelWithoutDelays(t *testing.T) {
	e := newEngine(t, config.Sim{})
	ctx, cancel := context.WithCancel(context.Background())
	sent := 0
	rec := &recorder{t: t, onSend: func(ev *llm.Event) error {
		if ev.Kind == llm.EventTextDelta {
			sent++
			if sent == 2 {
				cancel()
			}
		}
		return nil
	}}
	err := e.Generate(ctx, userReq("cancel fast"), rec)
	if !errors.Is(err, context.Canceled) || sent != 2 {
		t.Errorf("err = %v after %d deltas, want context.Canceled right after the 2nd", err, sent)
	}
}

func TestSinkError(t *testing.T) {
	e := newEngine(t, config.Sim{})
	gone := errors.New("client gone")
	rec := &recorder{t: t, onSend: func(ev *llm.Event) error {
		if ev.Kind == llm.EventTextDelta {
			return gone
		}
		return nil
	}}
	if err := e.Generate(context.Background(), userReq("x"), rec); !errors.Is(err, gone) {
		t.Errorf("err = %v, want the sink's error", err)
	}
}

func TestConcurrent(t *testing.T) {
	e := newEngine(t, config.Sim{MaxConcurrency: 4, MaxQueue: 64, KVCacheTokens: 256, BlockTokens: 4})
	want := make([]string, 8)
	for i := range want {
		want[i] = textOf(mustGenerate(t, newEngine(t, config.Sim{}), userReq(fmt.Sprintf("concurrent %d", i))))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16*20)
	for g := range 16 {
		wg.Go(func() {
			for i := range 20 {
				k := (g + i) % len(want)
				var c llm.Collector
				if err := e.Generate(context.Background(), userReq(fmt.Sprintf("concurrent %d", k)), &c); err != nil {
					errs <- err
					return
				}
				if got := textOf(&c.Response); got != want[k] {
					errs <- fmt.Errorf("prompt %d: %q, want %q", k, got, want[k])
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if s := e.Stats(); s.Running != 0 || s.Waiting != 0 || s.KVCacheUsage != 0 {
		t.Errorf("after the load: %+v, want idle", s)
	}
}

// discard is a Sink that drops everything, for benchmarks.
type discard struct{}

func (discard) Send(*llm.Event) error { return nil }
func (discard) Flush() error          { return nil }

func shortRequest() *llm.Request {
	r := userReq("What is the capital of France? Answer in one short paragraph.")
	r.System = []llm.Block{{Type: llm.BlockText, Text: "You are a helpful assistant."}}
	r.MaxTokens = 20
	return r
}

func TestGenerateAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	e := newEngine(t, config.Sim{})
	req := shortRequest()
	ctx := context.Background()
	if err := e.Generate(ctx, req, discard{}); err != nil {
		t.Fatal(err)
	}
	n := testing.AllocsPerRun(100, func() {
		if err := e.Generate(ctx, req, discard{}); err != nil {
			t.Fatal(err)
		}
	})
	if n > 2 {
		t.Errorf("Generate allocates %v times for a short prompt and 20 tokens, want at most 2", n)
	}
}

func BenchmarkGenerate(b *testing.B) {
	e := newEngine(b, config.Sim{})
	req := shortRequest()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := e.Generate(ctx, req, discard{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGenerateCollect is the non-streaming path: the answer assembled by an llm.Collector.
func BenchmarkGenerateCollect(b *testing.B) {
	e := newEngine(b, config.Sim{})
	req := shortRequest()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		var c llm.Collector
		if err := e.Generate(ctx, req, &c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGenerateParallel(b *testing.B) {
	e := newEngine(b, config.Sim{})
	req := shortRequest()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := e.Generate(context.Background(), req, discard{}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
