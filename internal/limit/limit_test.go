package limit

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/fakeclock"
)

// t0 is a whole second, so reset times format exactly.
var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// clock is the injected clock, moved by hand.
type clock = fakeclock.Clock

func newClock() *clock { return fakeclock.New(t0) }

func newLimiter(t testing.TB, c Config, clk *clock) *Limiter {
	t.Helper()
	c.Now = clk.Now
	return New(c)
}

// op is one step of a limiter scenario: advance the clock, then act.
type op struct {
	advance time.Duration
	key     string
	do      string // acquire (default), settle, charge, release
	input   int    // acquire: estimate; settle: actual input
	output  int    // settle: actual output; charge: tokens
	lease   int    // settle, charge, release: index of the lease (in acquire order)

	// for acquire:
	wantErr   string        // substring of the 429 message; "" means admitted
	wantRetry time.Duration // RetryAfter of the refusal
}

func TestLimits(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ops  []op
	}{
		{
			name: "requests per minute",
			cfg:  Config{Keys: map[string]Limits{"a": {RequestsPerMinute: 3}}},
			ops: []op{
				{key: "a"}, {key: "a"}, {key: "a"},
				{key: "a", wantErr: "this API key's limit of 3 requests per minute", wantRetry: 20 * time.Second},
				{advance: 19 * time.Second, key: "a", wantErr: "3 requests per minute", wantRetry: time.Second},
				{advance: time.Second, key: "a"},
				{key: "a", wantErr: "3 requests per minute", wantRetry: 20 * time.Second},
				{advance: time.Minute, key: "a"}, {key: "a"}, {key: "a"},
				{key: "a", wantErr: "3 requests per minute", wantRetry: 20 * time.Second},
			},
		},
		{
			name: "input tokens reserve an estimate",
			cfg:  Config{Keys: map[string]Limits{"a": {InputTokensPerMinute: 1000}}},
			ops: []op{
				{key: "a", input: 600},
				{key: "a", input: 600, wantErr: "1000 input tokens per minute is reached (this request needs about 600)",
					wantRetry: 12 * time.Second},
				{key: "a", input: 400},
				{key: "a", input: 1, wantErr: "1000 input tokens per minute", wantRetry: 60 * time.Millisecond},
				{advance: 60 * time.Millisecond, key: "a", input: 1},
			},
		},
		{
			name: "input tokens settle refunds an overestimate",
			cfg:  Config{Keys: map[string]Limits{"a": {InputTokensPerMinute: 1000}}},
			ops: []op{
				{key: "a", input: 600},
				{do: "settle", lease: 0, input: 100},
				{key: "a", input: 900},
				{key: "a", input: 1, wantErr: "1000 input tokens per minute", wantRetry: 60 * time.Millisecond},
			},
		},
		{
			name: "input tokens settle charges an underestimate",
			cfg:  Config{Keys: map[string]Limits{"a": {InputTokensPerMinute: 1000}}},
			ops: []op{
				{key: "a", input: 100},
				{do: "settle", lease: 0, input: 900},
				{key: "a", input: 100},
				{key: "a", input: 1, wantErr: "1000 input tokens per minute", wantRetry: 60 * time.Millisecond},
			},
		},
		{
			name: "input larger than the limit can never pass",
			cfg:  Config{Keys: map[string]Limits{"a": {InputTokensPerMinute: 1000}}},
			ops: []op{
				{key: "a", input: 1001, wantErr: "this request has about 1001 input tokens, more than this API key's limit of 1000"},
				{key: "a", input: 1000},
			},
		},
		{
			name: "output tokens: a stream crossing the limit finishes in debt",
			cfg:  Config{Keys: map[string]Limits{"a": {OutputTokensPerMinute: 100}}},
			ops: []op{
				{key: "a"},
				{do: "charge", lease: 0, output: 60},
				{key: "a"}, // 40 left: admitted
				{do: "charge", lease: 0, output: 60},
				{do: "charge", lease: 1, output: 30}, // 150 charged: 50 in debt
				// Debt of 50 plus one token to start: 51 × 0.6s.
				{key: "a", wantErr: "100 output tokens per minute", wantRetry: 30600 * time.Millisecond},
				{advance: 30 * time.Second, key: "a", wantErr: "100 output tokens per minute", wantRetry: 600 * time.Millisecond},
				{advance: 600 * time.Millisecond, key: "a"},
			},
		},
		{
			name: "output tokens settle to the engine's count",
			cfg:  Config{Keys: map[string]Limits{"a": {OutputTokensPerMinute: 100}}},
			ops: []op{
				{key: "a"},
				{do: "charge", lease: 0, output: 100}, // counted on the way
				{do: "settle", lease: 0, output: 50},  // the engine says 50
				{key: "a"},
			},
		},
		{
			name: "concurrent requests",
			cfg:  Config{Keys: map[string]Limits{"a": {Concurrent: 2}}},
			ops: []op{
				{key: "a"}, {key: "a"},
				{key: "a", wantErr: "this API key's limit of 2 concurrent requests is reached (2 requests are in flight)",
					wantRetry: time.Second},
				{do: "release", lease: 0},
				{do: "release", lease: 0}, // idempotent
				{key: "a"},
				{key: "a", wantErr: "2 concurrent requests", wantRetry: time.Second},
			},
		},
		{
			name: "global limit shared by keys",
			cfg: Config{
				Global: Limits{RequestsPerMinute: 3},
				Keys:   map[string]Limits{"a": {RequestsPerMinute: 10}, "b": {RequestsPerMinute: 10}},
			},
			ops: []op{
				{key: "a"}, {key: "b"}, {key: "a"},
				{key: "b", wantErr: "the server's limit (shared by all keys) of 3 requests per minute", wantRetry: 20 * time.Second},
				{key: "", wantErr: "the server's limit", wantRetry: 20 * time.Second},
			},
		},
		{
			name: "keys are independent",
			cfg:  Config{Keys: map[string]Limits{"a": {RequestsPerMinute: 1}, "b": {RequestsPerMinute: 1}}},
			ops: []op{
				{key: "a"}, {key: "b"},
				{key: "a", wantErr: "1 requests per minute", wantRetry: time.Minute},
			},
		},
		{
			name: "a refusal takes nothing",
			cfg: Config{
				Global: Limits{InputTokensPerMinute: 50},
				Keys:   map[string]Limits{"a": {RequestsPerMinute: 2, InputTokensPerMinute: 100, Concurrent: 1}},
			},
			ops: []op{
				{key: "a", input: 80, wantErr: "this request has about 80 input tokens, more than the server's limit", wantRetry: -1},
				{key: "a", input: 30},
				{do: "release", lease: 0},
				{key: "a", input: 30, wantErr: "server's limit (shared by all keys) of 50 input tokens per minute is reached",
					wantRetry: 12 * time.Second},
				// Neither refusal used the key's second request of the minute or its one slot.
				{key: "a"},
				{do: "release", lease: 1},
				{key: "a", wantErr: "2 requests per minute", wantRetry: 30 * time.Second},
			},
		},
		{
			name: "anonymous caller gets only global limits",
			cfg:  Config{Global: Limits{RequestsPerMinute: 2}},
			ops: []op{
				{key: ""}, {key: ""},
				{key: "", wantErr: "server's limit", wantRetry: 30 * time.Second},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			l := newLimiter(t, tt.cfg, clk)
			var leases []*Lease
			for i, o := range tt.ops {
				clk.Advance(o.advance)
				switch o.do {
				case "", "acquire":
					ls, err := l.Acquire(context.Background(), o.key, o.input)
					if o.wantErr == "" {
						if err != nil {
							t.Fatalf("op %d: got error %v, want admitted", i, err)
						}
						leases = append(leases, &ls)
						continue
					}
					var e *apierr.Error
					if !errors.As(err, &e) {
						t.Fatalf("op %d: got %v, want a 429 containing %q", i, err, o.wantErr)
					}
					if e.Kind != apierr.RateLimit || !strings.Contains(e.Message, o.wantErr) {
						t.Errorf("op %d: got %v %q, want 429 containing %q", i, e.Kind.Status(), e.Message, o.wantErr)
					}
					if o.wantRetry >= 0 && e.RetryAfter != o.wantRetry {
						t.Errorf("op %d: got retry after %v, want %v", i, e.RetryAfter, o.wantRetry)
					}
				case "settle":
					if err := leases[o.lease].Settle(o.input, o.output); err != nil {
						t.Fatalf("op %d: settle: %v", i, err)
					}
				case "charge":
					if err := leases[o.lease].Charge(o.output); err != nil {
						t.Fatalf("op %d: charge: %v", i, err)
					}
				case "release":
					if err := leases[o.lease].Release(); err != nil {
						t.Fatalf("op %d: release: %v", i, err)
					}
				default:
					t.Fatalf("op %d: unknown op %q", i, o.do)
				}
			}
		})
	}
}

func TestTooBigSaysDoNotRetry(t *testing.T) {
	l := newLimiter(t, Config{Keys: map[string]Limits{"a": {InputTokensPerMinute: 10}}}, newClock())
	_, err := l.Acquire(context.Background(), "a", 11)
	e := apierr.From(err)
	if e.Kind != apierr.RateLimit || e.RetryAfter != 0 {
		t.Fatalf("got %v retry %v, want 429 without retry-after", e.Kind.Status(), e.RetryAfter)
	}
	if got := e.Header.Get("x-should-retry"); got != "false" {
		t.Errorf("got x-should-retry %q, want false", got)
	}
}

func TestUnknownKeyFailsClosed(t *testing.T) {
	l := newLimiter(t, Config{Keys: map[string]Limits{"a": {}}}, newClock())
	_, err := l.Acquire(context.Background(), "b", 0)
	e := apierr.From(err)
	if e == nil || e.Kind != apierr.API || strings.Contains(e.Message, "b") {
		t.Fatalf("got %v, want a 500 that does not name the key", err)
	}
}

func TestNilLimiterAdmitsAll(t *testing.T) {
	var l *Limiter
	ls, err := l.Acquire(context.Background(), "anyone", 1e9)
	if err != nil {
		t.Fatalf("got %v, want nil", err)
	}
	h := http.Header{}
	ls.Header(h)
	l.Header("anyone", h)
	for _, err := range []error{ls.Charge(10), ls.Settle(1, 2), ls.Release()} {
		if err != nil {
			t.Errorf("got %v, want nil", err)
		}
	}
	if len(h) != 0 {
		t.Errorf("got headers %v, want none", h)
	}
}

func TestHeader(t *testing.T) {
	clk := newClock()
	l := newLimiter(t, Config{
		Global: Limits{RequestsPerMinute: 1000, OutputTokensPerMinute: 100},
		Keys:   map[string]Limits{"a": {RequestsPerMinute: 60, InputTokensPerMinute: 10000}},
	}, clk)
	ls, err := l.Acquire(context.Background(), "a", 2500)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(500 * time.Millisecond)
	if err := ls.Charge(10); err != nil {
		t.Fatal(err)
	}
	got := http.Header{}
	ls.Header(got)
	want := http.Header{
		// The key's 60/min is tighter than the global 1000/min: 1 used, refilled by half a unit.
		"Anthropic-Ratelimit-Requests-Limit":     {"60"},
		"Anthropic-Ratelimit-Requests-Remaining": {"59"},
		"Anthropic-Ratelimit-Requests-Reset":     {"2025-06-01T12:00:01Z"},
		"X-Ratelimit-Limit-Requests":             {"60"},
		"X-Ratelimit-Remaining-Requests":         {"59"},
		"X-Ratelimit-Reset-Requests":             {"500ms"},
		// 2500 of 10000 taken at t0 (15s of refill), half a second ago.
		"Anthropic-Ratelimit-Input-Tokens-Limit":     {"10000"},
		"Anthropic-Ratelimit-Input-Tokens-Remaining": {"7583"},
		"Anthropic-Ratelimit-Input-Tokens-Reset":     {"2025-06-01T12:00:15Z"},
		"X-Ratelimit-Limit-Tokens":                   {"10000"},
		"X-Ratelimit-Remaining-Tokens":               {"7583"},
		"X-Ratelimit-Reset-Tokens":                   {"15s"},
		// Only the global scope limits output: 10 charged just now, 6s to refill.
		"Anthropic-Ratelimit-Output-Tokens-Limit":     {"100"},
		"Anthropic-Ratelimit-Output-Tokens-Remaining": {"90"},
		"Anthropic-Ratelimit-Output-Tokens-Reset":     {"2025-06-01T12:00:07Z"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("headers (-want +got):\n%s", diff)
	}

	// A 429 carries the same headers, describing the state after the refusal.
	l2 := newLimiter(t, Config{Keys: map[string]Limits{"a": {OutputTokensPerMinute: 10}}}, newClock())
	ls2, _ := l2.Acquire(context.Background(), "a", 0)
	_ = ls2.Charge(20)
	_, err = l2.Acquire(context.Background(), "a", 0)
	e := apierr.From(err)
	want = http.Header{
		"Anthropic-Ratelimit-Output-Tokens-Limit":     {"10"},
		"Anthropic-Ratelimit-Output-Tokens-Remaining": {"0"},
		"Anthropic-Ratelimit-Output-Tokens-Reset":     {"2025-06-01T12:02:00Z"},
		"X-Ratelimit-Limit-Tokens":                    {"10"},
		"X-Ratelimit-Remaining-Tokens":                {"0"},
		"X-Ratelimit-Reset-Tokens":                    {"2m0s"},
	}
	if diff := cmp.Diff(want, e.Header); diff != "" {
		t.Errorf("429 headers (-want +got):\n%s", diff)
	}
	if e.RetryAfter != 66*time.Second {
		t.Errorf("got retry after %v, want 66s", e.RetryAfter)
	}

	// Unknown names and unlimited keys set nothing.
	h := http.Header{}
	l2.Header("nobody", h)
	newLimiter(t, Config{}, newClock()).Header("", h)
	if len(h) != 0 {
		t.Errorf("got %v, want no headers", h)
	}
}

func TestAdopt(t *testing.T) {
	clk := newClock()
	ctx := context.Background()
	store := NewMemory()
	old := newLimiter(t, Config{Store: store, Keys: map[string]Limits{
		"same":    {RequestsPerMinute: 1, Concurrent: 1},
		"changed": {RequestsPerMinute: 1, Concurrent: 1},
		"gone":    {RequestsPerMinute: 1},
	}}, clk)
	held := map[string]Lease{}
	for _, k := range []string{"same", "changed", "gone"} {
		ls, err := old.Acquire(ctx, k, 0)
		if err != nil {
			t.Fatal(err)
		}
		held[k] = ls
	}
	// The new limiter has its own store: adoption, not a shared store, carries the state.
	nl := newLimiter(t, Config{Keys: map[string]Limits{
		"same":    {RequestsPerMinute: 1, Concurrent: 1},
		"changed": {RequestsPerMinute: 2, Concurrent: 1},
		"new":     {RequestsPerMinute: 1},
	}}, clk)
	nl.Adopt(old)
	nl.Adopt(nil)

	tests := []struct {
		key     string
		wantErr string
	}{
		{"same", "1 concurrent requests"}, // the old request is still in flight
		{"new", ""},
	}
	for _, tt := range tests {
		_, err := nl.Acquire(ctx, tt.key, 0)
		if got := errText(err); !strings.Contains(got, tt.wantErr) || (tt.wantErr == "") != (err == nil) {
			t.Errorf("%s: got %q, want %q", tt.key, got, tt.wantErr)
		}
	}
	// Releasing on the old limiter frees the slot the new one sees; the request count is kept.
	ls := held["same"]
	_ = ls.Release()
	if _, err := nl.Acquire(ctx, "same", 0); !strings.Contains(errText(err), "1 requests per minute") {
		t.Errorf("same after release: got %v, want the requests-per-minute refusal", err)
	}
	// The changed rate starts afresh (2 allowed) but the concurrency slot is still shared.
	ls = held["changed"]
	_ = ls.Release()
	for i, want := range []string{"", "", "2 requests per minute"} {
		l, err := nl.Acquire(ctx, "changed", 0)
		if got := errText(err); !strings.Contains(got, want) || (want == "") != (err == nil) {
			t.Errorf("changed #%d: got %q, want %q", i, got, want)
		}
		_ = l.Release()
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// failStore fails every call, as a network store might.
type failStore struct{}

type failCell struct{}

var errDown = errors.New("store down")

func (failStore) Rate(string) RateCell { return failCell{} }
func (failStore) Gauge(string) Gauge   { return failCell{} }
func (failCell) Take(context.Context, time.Time, Rate, int64) (Status, bool, error) {
	return Status{}, false, errDown
}
func (failCell) Add(context.Context, time.Time, Rate, int64) (Status, error) {
	return Status{}, errDown
}
func (failCell) Peek(context.Context, time.Time, Rate) (Status, error) { return Status{}, errDown }
func (failCell) Inc(context.Context, int64) (int64, bool, error)       { return 0, false, errDown }
func (failCell) Dec(context.Context) error                             { return errDown }
func (failCell) Value(context.Context) (int64, error)                  { return 0, errDown }

func TestStoreFailureFailsClosed(t *testing.T) {
	for _, lim := range []Limits{{RequestsPerMinute: 1}, {InputTokensPerMinute: 1}, {OutputTokensPerMinute: 1}, {Concurrent: 1}} {
		l := newLimiter(t, Config{Store: failStore{}, Keys: map[string]Limits{"a": lim}}, newClock())
		_, err := l.Acquire(context.Background(), "a", 1)
		e := apierr.From(err)
		if e == nil || e.Kind != apierr.Unavailable || !errors.Is(err, errDown) {
			t.Errorf("%+v: got %v, want 503 wrapping the store error", lim, err)
		}
	}
	// A lease on a failing store reports the failure instead of swallowing it.
	l := newLimiter(t, Config{Store: failStore{}, Keys: map[string]Limits{"a": {OutputTokensPerMinute: 1}}}, newClock())
	ls := Lease{l: l, key: l.keys["a"], held: true}
	if err := ls.Charge(1); !errors.Is(err, errDown) {
		t.Errorf("charge: got %v, want the store error", err)
	}
}

func TestConcurrentAcquire(t *testing.T) {
	const (
		workers = 8
		each    = 50
		rpm     = 123
	)
	l := newLimiter(t, Config{
		Global: Limits{Concurrent: 5},
		Keys:   map[string]Limits{"a": {RequestsPerMinute: rpm, InputTokensPerMinute: 1e6, OutputTokensPerMinute: 1e6}},
	}, newClock())
	var admitted, inFlight, peak atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				ls, err := l.Acquire(context.Background(), "a", 10)
				if err != nil {
					continue
				}
				admitted.Add(1)
				n := inFlight.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				_ = ls.Charge(3)
				_ = ls.Settle(5, 3)
				inFlight.Add(-1)
				_ = ls.Release()
			}
		}()
	}
	wg.Wait()
	// With the clock stopped, exactly rpm requests fit unless the concurrency cap refused some
	// (then fewer), never more.
	if got := admitted.Load(); got > rpm || got == 0 {
		t.Errorf("got %d admitted, want 1..%d", got, rpm)
	}
	if got := peak.Load(); got > 5 {
		t.Errorf("got %d in flight at once, want at most 5", got)
	}
	if v, _ := l.global.conc.cell.Value(context.Background()); v != 0 {
		t.Errorf("got %d concurrency slots held after all releases, want 0", v)
	}
}

// TestReserveRefusalUndoesAdmit checks the two stages together: a request whose tokens do not
// fit gives back the request and the slot Admit took, so the limits stay exact.
func TestReserveRefusalUndoesAdmit(t *testing.T) {
	clk := newClock()
	l := newLimiter(t, Config{
		Global: Limits{Concurrent: 1},
		Keys:   map[string]Limits{"a": {RequestsPerMinute: 2, InputTokensPerMinute: 1000, Concurrent: 1}},
	}, clk)
	ctx := context.Background()
	admit := func(step string) *Lease {
		t.Helper()
		ls, err := l.Admit(ctx, "a")
		if err != nil {
			t.Fatalf("%s: Admit: %v", step, err)
		}
		return &ls
	}
	ls := admit("too big")
	if err := ls.Reserve(ctx, 1001); !strings.Contains(errText(err), "more than this API key's limit of 1000") {
		t.Fatalf("Reserve(1001) = %v, want the too-big 429", err)
	}
	if err := ls.Release(); err != nil {
		t.Fatalf("Release after a refused Reserve: %v", err)
	}
	ls = admit("first") // the slot and the request came back
	if err := ls.Reserve(ctx, 600); err != nil {
		t.Fatalf("Reserve(600): %v", err)
	}
	_ = ls.Release()
	ls = admit("over the tokens")
	if err := ls.Reserve(ctx, 600); !strings.Contains(errText(err), "this request needs about 600") {
		t.Fatalf("Reserve(600) with 400 left = %v, want a 429", err)
	}
	ls = admit("second")
	if err := ls.Reserve(ctx, 400); err != nil {
		t.Fatalf("Reserve(400): %v", err)
	}
	_ = ls.Release()
	if _, err := l.Admit(ctx, "a"); !strings.Contains(errText(err), "2 requests per minute") {
		t.Errorf("third Admit = %v, want the requests-per-minute 429", err)
	}
	for _, g := range []Gauge{l.keys["a"].conc.cell, l.global.conc.cell} {
		if v, _ := g.Value(ctx); v != 0 {
			t.Errorf("got %d concurrency slots held after all releases, want 0", v)
		}
	}
}

// TestAdmitRefusesSpentTokens checks that a key in output-token debt is refused before its
// request is counted, without using a request of its minute.
func TestAdmitRefusesSpentTokens(t *testing.T) {
	clk := newClock()
	l := newLimiter(t, Config{Keys: map[string]Limits{"a": {RequestsPerMinute: 2, OutputTokensPerMinute: 100}}}, clk)
	ctx := context.Background()
	ls, err := l.Acquire(ctx, "a", 0)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	_ = ls.Charge(100)
	_ = ls.Release()
	_, err = l.Admit(ctx, "a")
	var e *apierr.Error
	if !errors.As(err, &e) || e.Kind != apierr.RateLimit || !strings.Contains(e.Message, "100 output tokens per minute") {
		t.Fatalf("Admit with no output tokens left = %v, want a 429 on output tokens", err)
	}
	if got := e.Header.Get("Anthropic-Ratelimit-Output-Tokens-Remaining"); e.RetryAfter != 600*time.Millisecond || got != "0" {
		t.Errorf("got retry after %v and %q output tokens remaining, want 600ms and \"0\"", e.RetryAfter, got)
	}
	clk.Advance(600 * time.Millisecond)
	if _, err := l.Admit(ctx, "a"); err != nil {
		t.Errorf("Admit after the refill: %v (the refused Admit must not have used a request)", err)
	}
}

func TestAcquireAllocs(t *testing.T) {
	l := newLimiter(t, Config{
		Global: Limits{RequestsPerMinute: 1e9, Concurrent: 1e6},
		Keys:   map[string]Limits{"a": {RequestsPerMinute: 1e9, InputTokensPerMinute: 1e12, OutputTokensPerMinute: 1e12, Concurrent: 100}},
	}, newClock())
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		ls, err := l.Acquire(ctx, "a", 100)
		if err != nil {
			t.Fatal(err)
		}
		_ = ls.Charge(10)
		_ = ls.Settle(90, 12)
		_ = ls.Release()
	})
	if allocs != 0 {
		t.Errorf("got %v allocs per admitted request, want 0", allocs)
	}
}

func TestGCRAArithmetic(t *testing.T) {
	r := Rate{Limit: 60, Period: time.Minute}
	sec := int64(time.Second)
	tests := []struct {
		name     string
		tat, now int64
		cost     int64
		wantTAT  int64
		wantOK   bool
		wantWait time.Duration
	}{
		{"idle bucket takes a full burst", 0, 100 * sec, 60, 160 * sec, true, 0},
		{"one over the burst waits one interval", 160 * sec, 100 * sec, 1, 160 * sec, false, time.Second},
		{"cost above the limit never fits", 0, 100 * sec, 61, 0, false, -1},
		{"partly refilled", 150 * sec, 100 * sec, 10, 160 * sec, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next, ok, wait := gcraTake(tt.tat, tt.now, r, tt.cost)
			if next != tt.wantTAT || ok != tt.wantOK || wait != tt.wantWait {
				t.Errorf("got (%d, %v, %v), want (%d, %v, %v)", next, ok, wait, tt.wantTAT, tt.wantOK, tt.wantWait)
			}
		})
	}
	// A refund never leaves a cell fuller than full.
	if got := gcraAdd(110*sec, 100*sec, r, -30); got != 100*sec {
		t.Errorf("refund beyond full: got TAT %d, want now (%d)", got, 100*sec)
	}
	if got := gcraAdd(0, 100*sec, r, 5); got != 105*sec {
		t.Errorf("add to idle: got TAT %d, want %d", got, 105*sec)
	}
	// Huge limits and costs saturate instead of overflowing.
	if got := mulDiv(math.MaxInt64, math.MaxInt64, 1); got != math.MaxInt64 {
		t.Errorf("mulDiv overflow: got %d, want MaxInt64", got)
	}
	if got := mulDiv(1e12, int64(time.Minute), 1e12); got != int64(time.Minute) {
		t.Errorf("mulDiv: got %d, want %d", got, int64(time.Minute))
	}
	if got := satAdd(math.MaxInt64-1, 10); got != math.MaxInt64 {
		t.Errorf("satAdd: got %d, want MaxInt64", got)
	}
}

func BenchmarkAcquire(b *testing.B) {
	l := New(Config{
		Global: Limits{RequestsPerMinute: 1e12, Concurrent: 1e9},
		Keys:   map[string]Limits{"a": {RequestsPerMinute: 1e12, InputTokensPerMinute: 1e15, OutputTokensPerMinute: 1e15, Concurrent: 1e9}},
	})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		ls, err := l.Acquire(ctx, "a", 100)
		if err != nil {
			b.Fatal(err)
		}
		_ = ls.Settle(90, 10)
		_ = ls.Release()
	}
}

func BenchmarkAcquireParallel(b *testing.B) {
	l := New(Config{
		Global: Limits{RequestsPerMinute: 1e12, Concurrent: 1e9},
		Keys:   map[string]Limits{"a": {RequestsPerMinute: 1e12, InputTokensPerMinute: 1e15, Concurrent: 1e9}},
	})
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ls, err := l.Acquire(ctx, "a", 100)
			if err != nil {
				b.Fatal(err)
			}
			_ = ls.Release()
		}
	})
}

// A 429 from the output-token limit describes that limit in OpenAI's tokens headers too (which
// describe input tokens otherwise): no "tokens remaining" and "reset 0s" beside a retry-after.
func TestOutputRefusalHeadersDescribeOutput(t *testing.T) {
	clk := newClock()
	l := newLimiter(t, Config{Keys: map[string]Limits{"a": {InputTokensPerMinute: 2000, OutputTokensPerMinute: 100}}}, clk)
	ctx := context.Background()
	ls, err := l.Acquire(ctx, "a", 0)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	_ = ls.Charge(150) // in debt: 50 tokens over
	_ = ls.Release()
	_, err = l.Admit(ctx, "a")
	var e *apierr.Error
	if !errors.As(err, &e) || e.Kind != apierr.RateLimit {
		t.Fatalf("Admit with output tokens spent = %v, want a 429", err)
	}
	reset, perr := time.ParseDuration(e.Header.Get("X-Ratelimit-Reset-Tokens"))
	if got := e.Header.Get("X-Ratelimit-Remaining-Tokens"); got != "0" || perr != nil || reset < e.RetryAfter {
		t.Errorf("x-ratelimit-remaining-tokens %q, x-ratelimit-reset-tokens %q, retry after %v; want 0 and a reset no earlier than the retry",
			got, e.Header.Get("X-Ratelimit-Reset-Tokens"), e.RetryAfter)
	}
	if got := e.Header.Get("X-Ratelimit-Limit-Tokens"); got != "100" {
		t.Errorf("x-ratelimit-limit-tokens %q, want the output limit 100", got)
	}
	// An answer that is not refused keeps describing input tokens.
	clk.Advance(time.Minute)
	ls, err = l.Acquire(ctx, "a", 10)
	if err != nil {
		t.Fatalf("Acquire after the refill: %v", err)
	}
	h := http.Header{}
	ls.Header(h)
	_ = ls.Release()
	if got := h.Get("X-Ratelimit-Limit-Tokens"); got != "2000" {
		t.Errorf("x-ratelimit-limit-tokens on an answer %q, want the input limit 2000", got)
	}
}

// TestFitsRefusesOnALowerBound: a lower bound on the input past the limit, or past what is left
// of it, is refused as Reserve would refuse it, giving back what Admit took; one that fits takes
// nothing.
func TestFitsRefusesOnALowerBound(t *testing.T) {
	clk := newClock()
	l := newLimiter(t, Config{
		Keys: map[string]Limits{"a": {RequestsPerMinute: 3, InputTokensPerMinute: 1000, Concurrent: 1}},
	}, clk)
	ctx := context.Background()
	ls, err := l.Admit(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := ls.Fits(ctx, 5000); !strings.Contains(errText(err), "more than this API key's limit of 1000") {
		t.Fatalf("Fits(5000) = %v, want the too-big 429", err)
	}
	if ls, err = l.Admit(ctx, "a"); err != nil { // the request and the slot came back
		t.Fatalf("Admit after a refused Fits: %v", err)
	}
	if err := ls.Fits(ctx, 700); err != nil {
		t.Fatalf("Fits(700) = %v", err)
	}
	if err := ls.Reserve(ctx, 700); err != nil { // Fits took nothing
		t.Fatalf("Reserve(700) after Fits: %v", err)
	}
	_ = ls.Release()
	if ls, err = l.Admit(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := ls.Fits(ctx, 301); !strings.Contains(errText(err), "this request needs about 301") {
		t.Fatalf("Fits(301) with 300 left = %v, want a 429", err)
	}
	if _, err := l.Admit(ctx, "a"); err != nil {
		t.Fatalf("Admit after a refused Fits: %v", err)
	}
}
