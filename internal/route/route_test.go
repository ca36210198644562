package route

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/layer0ai/layer0/internal/apierr"
)

// first is a Rand that always draws 0, so P2C compares the first two candidates and, on a tie,
// takes the first: tests then know which replica comes first.
func first(int) int { return 0 }

// step is an Attempt reduced to names, for comparison.
type step struct {
	Replica  string
	Model    string
	Retry    bool
	Fallback string
}

// run drives a plan like the pipeline does: each attempt fails with the next error of errs (nil
// is success), and it returns the steps taken and the final error.
func run(t *testing.T, p *Plan, errs ...error) ([]step, error) {
	t.Helper()
	var steps []step
	for i := 0; i < 100; i++ {
		a, err := p.Next()
		if err != nil {
			return steps, err
		}
		steps = append(steps, step{a.Replica.Name, a.Model, a.Retry, a.Fallback})
		var e error
		if len(steps) <= len(errs) {
			e = errs[len(steps)-1]
		}
		p.Report(e, time.Millisecond)
		if e == nil {
			return steps, nil
		}
	}
	t.Fatal("plan did not end within 100 attempts")
	return nil, nil
}

func fallbackTable(t *testing.T, clk *clock) *Table {
	rs := replicas(clk, Policy{}, "a1", "a2", "b1", "c1", "d1")
	return newTable(t, Config{
		Models: []Model{
			{Name: "A", Replicas: rs[0:2], Fallbacks: []string{"B", "C"}},
			{Name: "B", Replicas: rs[2:3], Fallbacks: []string{"D"}},
			{Name: "C", Replicas: rs[3:4], Fallbacks: []string{"A"}},
			{Name: "D", Replicas: rs[4:5]},
		},
		Picker: P2C{Rand: first},
		Now:    clk.Now,
	})
}

func TestFallbackOrder(t *testing.T) {
	tests := []struct {
		name    string
		errs    []error
		want    []step
		wantErr error
	}{
		{
			name: "success first time",
			errs: []error{nil},
			want: []step{{"a1", "A", false, ""}},
		},
		{
			name: "retry on the other replica, then success",
			errs: []error{errServer, nil},
			want: []step{{"a1", "A", false, ""}, {"a2", "A", true, ""}},
		},
		{
			name: "whole chain, depth first, each model once",
			errs: []error{errOverloaded, errOverloaded, errOverloaded, errOverloaded, errOverloaded},
			want: []step{
				{"a1", "A", false, ""},
				{"a2", "A", true, ""},
				{"b1", "B", false, ReasonOverloaded},
				{"d1", "D", false, ReasonOverloaded},
				{"c1", "C", false, ReasonOverloaded},
			},
			wantErr: errOverloaded,
		},
		{
			name: "the reason is the failure that moved the request",
			errs: []error{errRateLimit, errServer, nil},
			want: []step{
				{"a1", "A", false, ""},
				{"a2", "A", true, ""},
				{"b1", "B", false, ReasonServerError},
			},
		},
		{
			name:    "a client error is not retried",
			errs:    []error{errInvalid},
			want:    []step{{"a1", "A", false, ""}},
			wantErr: errInvalid,
		},
		{
			name:    "a cancellation is not retried",
			errs:    []error{context.Canceled},
			want:    []step{{"a1", "A", false, ""}},
			wantErr: context.Canceled,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			p, err := fallbackTable(t, clk).Plan("A", "k", 10)
			if err != nil {
				t.Fatal(err)
			}
			got, err := run(t, p, tt.errs...)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("attempts (-want +got):\n%s", diff)
			}
			if err != tt.wantErr {
				t.Errorf("got error %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestContextLength(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{}, "s1", "s2", "same1", "big1", "huge1")
	tb := newTable(t, Config{
		Models: []Model{
			{Name: "small", ContextWindow: 4096, Replicas: rs[0:2], Fallbacks: []string{"same", "big"}},
			{Name: "same", ContextWindow: 4096, Replicas: rs[2:3]},
			{Name: "big", ContextWindow: 32000, Replicas: rs[3:4], Fallbacks: []string{"huge"}},
			{Name: "huge", Replicas: rs[4:5]}, // unknown window: never skipped for length
		},
		Picker: P2C{Rand: first},
		Now:    clk.Now,
	})
	tests := []struct {
		name  string
		model string
		input int
		errs  []error
		want  []step
	}{
		{"fits", "small", 4096, []error{nil}, []step{{"s1", "small", false, ""}}},
		{"too long for the primary goes to a pool that fits", "small", 5000, []error{nil},
			[]step{{"big1", "big", false, ReasonContextLength}}},
		{"the engine counts more: skip every model no larger", "small", 4000, []error{errContext, nil},
			[]step{{"s1", "small", false, ""}, {"big1", "big", false, ReasonContextLength}}},
		{"the context error of an Anthropic engine", "big", 100, []error{
			apierr.New(apierr.InvalidRequest, "prompt is too long: 40000 tokens > 32000 maximum"), nil},
			[]step{{"big1", "big", false, ""}, {"huge1", "huge", false, ReasonContextLength}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := tb.Plan(tt.model, "", tt.input)
			if err != nil {
				t.Fatal(err)
			}
			got, err := run(t, p, tt.errs...)
			if err != nil {
				t.Fatalf("got %v, want success", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("attempts (-want +got):\n%s", diff)
			}
		})
	}

	// Fits: within every window of the chain, fallbacks included, or not at all.
	for _, tt := range []struct {
		model string
		n     int
		want  bool
	}{{"small", 4096, true}, {"small", 4097, false}, {"big", 32000, true}, {"big", 32001, false},
		{"huge", 1 << 30, true}, {"nope", 1, false}} {
		if got := tb.Fits(tt.model, tt.n); got != tt.want {
			t.Errorf("Fits(%q, %d) = %v, want %v", tt.model, tt.n, got, tt.want)
		}
	}

	// Nothing fits: a clear 400 naming the sizes.
	tb2 := newTable(t, Config{Models: []Model{
		{Name: "small", ContextWindow: 4096, Replicas: rs[0:1], Fallbacks: []string{"big"}},
		{Name: "big", ContextWindow: 32000, Replicas: rs[3:4]},
	}})
	_, err := tb2.Plan("small", "", 40000)
	e := apierr.From(err)
	if e == nil || e.Kind != apierr.InvalidRequest || e.Param != "messages" || e.Message != "prompt is too long: 40000 tokens > 32000 maximum" {
		t.Errorf("got %#v, want a 400 on messages saying 40000 > 32000", err)
	}
}

func TestPlanErrors(t *testing.T) {
	clk := newClock()
	tb := fallbackTable(t, clk)
	_, err := tb.Plan("nope", "", 1)
	if e := apierr.From(err); e == nil || e.Kind != apierr.NotFound || e.Param != "model" || e.Message != `model: "nope" not found` {
		t.Errorf("unknown model: got %#v, want a 404 naming it", err)
	}

	p, _ := tb.Plan("A", "", 1)
	if _, err := p.Next(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Next(); err == nil || !strings.Contains(errors.Unwrap(err).Error(), "Next before Report") {
		t.Errorf("Next before Report: got %v, want an internal error", err)
	}
	p.Report(nil, time.Millisecond)
	p.Report(nil, time.Millisecond) // a second Report is ignored
	if _, err := p.Next(); err == nil || !strings.Contains(errors.Unwrap(err).Error(), "after a success") {
		t.Errorf("Next after success: got %v, want an internal error", err)
	}
	for _, r := range tb.Replicas() {
		if n := r.Outstanding(); n != 0 {
			t.Errorf("%s: got %d outstanding, want 0", r.Name, n)
		}
	}
}

func TestUnavailable(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{Ejection: Ejection{ConsecutiveFailures: 1, BaseTime: 10 * time.Second}}, "r1")
	tb := newTable(t, Config{Models: []Model{{Name: "m", Replicas: rs}}, Now: clk.Now})

	p, _ := tb.Plan("m", "", 1)
	if _, err := run(t, p, errServer); err != errServer {
		t.Fatalf("got %v, want the engine's error when nothing is left", err)
	}
	p, _ = tb.Plan("m", "", 1)
	_, err := p.Next()
	e := apierr.From(err)
	if e == nil || e.Kind != apierr.Unavailable || e.RetryAfter != 10*time.Second {
		t.Fatalf("got %#v, want a 503 with retry-after 10s", err)
	}
	clk.Advance(10 * time.Second)
	p, _ = tb.Plan("m", "", 1)
	if _, err := run(t, p, nil); err != nil {
		t.Errorf("after the ejection: got %v, want success", err)
	}
}

func TestUtilization(t *testing.T) {
	tests := []struct {
		name      string
		primary   []float64
		fallback  []float64 // nil: no fallback model
		threshold float64
		want      step
	}{
		{"the cool replica of the pool", []float64{0.9, 0.5}, nil, 0, step{"p1", "primary", false, ""}},
		{"all hot and nothing else: still served", []float64{0.9, 0.95}, nil, 0, step{"p0", "primary", false, ""}},
		{"all hot: a cool fallback serves", []float64{0.9, 0.95}, []float64{0.1}, 0, step{"f0", "fallback", false, ReasonUtilization}},
		{"everything hot: the primary serves", []float64{0.9}, []float64{0.99}, 0, step{"p0", "primary", false, ""}},
		{"at the threshold is not above it", []float64{0.85}, []float64{0.1}, 0, step{"p0", "primary", false, ""}},
		{"a threshold of 1 never skips", []float64{0.99}, []float64{0.1}, 1, step{"p0", "primary", false, ""}},
		{"a lower threshold", []float64{0.6}, []float64{0.1}, 0.5, step{"f0", "fallback", false, ReasonUtilization}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			var models []Model
			build := func(name string, us []float64) Model {
				m := Model{Name: name}
				for i, u := range us {
					r := replicas(clk, Policy{}, fmt.Sprintf("%c%d", name[0], i))[0]
					r.SetUtilization(u)
					m.Replicas = append(m.Replicas, r)
				}
				return m
			}
			primary := build("primary", tt.primary)
			if tt.fallback != nil {
				primary.Fallbacks = []string{"fallback"}
				models = append(models, build("fallback", tt.fallback))
			}
			models = append(models, primary)
			tb := newTable(t, Config{Models: models, UtilizationThreshold: tt.threshold, Picker: P2C{Rand: first}, Now: clk.Now})
			p, _ := tb.Plan("primary", "", 1)
			got, err := run(t, p, nil)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]step{tt.want}, got); diff != "" {
				t.Errorf("attempts (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSkipUnavailableReplica(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{Ejection: Ejection{ConsecutiveFailures: 1}}, "p0", "f0")
	tb := newTable(t, Config{Models: []Model{
		{Name: "primary", Replicas: rs[:1], Fallbacks: []string{"fallback"}},
		{Name: "fallback", Replicas: rs[1:]},
	}, Now: clk.Now})
	rs[0].Begin()
	rs[0].Report(errServer, 0) // ejected
	p, _ := tb.Plan("primary", "", 1)
	got, _ := run(t, p, nil)
	if diff := cmp.Diff([]step{{"f0", "fallback", false, ReasonUnavailable}}, got); diff != "" {
		t.Errorf("attempts (-want +got):\n%s", diff)
	}
}

func TestRetryBudgetInPlan(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{Ejection: Ejection{ConsecutiveFailures: -1}}, "a1", "a2", "f1")
	tb := newTable(t, Config{
		Models: []Model{
			{Name: "A", Replicas: rs[:2], Fallbacks: []string{"F"}},
			{Name: "F", Replicas: rs[2:]},
		},
		Budget: BudgetConfig{MinRetries: 2, Ratio: 0.01},
		Picker: P2C{Rand: first},
		Now:    clk.Now,
	})
	for i := range 3 {
		p, _ := tb.Plan("A", "", 1)
		got, _ := run(t, p, errServer, nil)
		want := []step{{"a1", "A", false, ""}, {"a2", "A", true, ""}}
		if i == 2 { // two retries spent: the third failure goes down the chain instead
			want[1] = step{"f1", "F", false, ReasonServerError}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("request %d: attempts (-want +got):\n%s", i, diff)
		}
	}
}

func TestResolve(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{}, "r")
	tb := newTable(t, Config{
		Models: []Model{
			{Name: "claude-3-5-sonnet-20240620", Replicas: rs},
			{Name: "a-b", Replicas: rs},
			{Name: "ab", Replicas: rs},
			{Name: "v1", Replicas: rs, Upstream: "org/model-v1"},
			{Name: "v2", Replicas: rs},
		},
		Splits:  []Split{{Name: "ab-test", Targets: []Target{{"v1", 1}, {"v2", 1}}}},
		Aliases: map[string]string{"latest": "ab-test", "sonnet": "claude-3-5-sonnet-20240620"},
	})
	tests := []struct {
		ask, want string
		ok        bool
	}{
		{"claude-3-5-sonnet-20240620", "claude-3-5-sonnet-20240620", true},
		{"claude35sonnet20240620", "claude-3-5-sonnet-20240620", true}, // the binary protocol's spelling
		{"Claude-3.5-Sonnet-20240620", "claude-3-5-sonnet-20240620", true},
		{"sonnet", "sonnet", true},
		{"latest", "latest", true},
		{"a-b", "a-b", true},
		{"ab", "ab", true},
		{"A-B", "", false}, // "a-b" and "ab" fold alike: only exact matches
		{"missing", "", false},
		{strings.Repeat("x", 200), "", false},
	}
	for _, tt := range tests {
		got, ok := tb.Resolve(tt.ask)
		if got != tt.want || ok != tt.ok {
			t.Errorf("Resolve(%q): got (%q, %v), want (%q, %v)", tt.ask, got, ok, tt.want, tt.ok)
		}
	}
	wantNames := []string{"a-b", "ab", "ab-test", "claude-3-5-sonnet-20240620", "latest", "sonnet", "v1", "v2"}
	if diff := cmp.Diff(wantNames, tb.Names()); diff != "" {
		t.Errorf("Names (-want +got):\n%s", diff)
	}
	if got := len(tb.Replicas()); got != 1 {
		t.Errorf("got %d replicas, want the shared one once", got)
	}
	// An alias of a model plans that model; the upstream name goes to the engine.
	p, _ := tb.Plan("sonnet", "", 1)
	if p.Name() != "sonnet" || p.Model() != "claude-3-5-sonnet-20240620" {
		t.Errorf("got name %q model %q, want sonnet / claude-3-5-sonnet-20240620", p.Name(), p.Model())
	}
	p, _ = newTable(t, Config{Models: []Model{{Name: "v1", Replicas: rs, Upstream: "org/model-v1"}}}).Plan("v1", "", 1)
	if a, _ := p.Next(); a.Upstream != "org/model-v1" || a.Model != "v1" {
		t.Errorf("got upstream %q model %q, want org/model-v1 / v1", a.Upstream, a.Model)
	}
	p.Report(nil, 0)
}

func TestSplit(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{}, "r")
	cfg := Config{
		Models: []Model{{Name: "v1", Replicas: rs}, {Name: "v2", Replicas: rs}},
		Splits: []Split{
			{Name: "random", Targets: []Target{{"v1", 1}, {"v2", 3}}},
			{Name: "sticky", Targets: []Target{{"v1", 1}, {"v2", 3}}, Sticky: true},
		},
		Rand: rand.New(rand.NewPCG(1, 2)).IntN,
	}
	tb := newTable(t, cfg)
	share := func(name string, key func(i int) string) float64 {
		const n = 4000
		v1 := 0
		for i := range n {
			p, err := tb.Plan(name, key(i), 1)
			if err != nil {
				t.Fatal(err)
			}
			if p.Model() == "v1" {
				v1++
			}
		}
		return float64(v1) / n
	}
	// Weights 1:3 give v1 a quarter, within a tolerance of several standard deviations (0.007).
	if got := share("random", func(int) string { return "k" }); got < 0.22 || got > 0.28 {
		t.Errorf("random split: got %.3f to v1, want 0.25 ± 0.03", got)
	}
	if got := share("sticky", func(i int) string { return fmt.Sprintf("key-%d", i) }); got < 0.22 || got > 0.28 {
		t.Errorf("sticky split over many keys: got %.3f to v1, want 0.25 ± 0.03", got)
	}
	// One key always lands on one arm, and the arm is a function of the key alone.
	for _, key := range []string{"alice", "bob", "carol", ""} {
		p, _ := tb.Plan("sticky", key, 1)
		arm := p.Model()
		for range 50 {
			if p, _ := tb.Plan("sticky", key, 1); p.Model() != arm {
				t.Fatalf("key %q: got %s, then %s; want one arm", key, arm, p.Model())
			}
		}
		if p, _ := newTable(t, cfg).Plan("sticky", key, 1); p.Model() != arm {
			t.Errorf("key %q: got %s in another table, want %s", key, p.Model(), arm)
		}
	}
}

// TestNewValidates checks what New checks itself (the rest is config.Validate's): names
// non-empty and used once, no nil replica, and a fallback chain a Plan can track.
func TestNewValidates(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{}, "r")
	_, err := New(Config{
		Models: []Model{
			{Name: "", Replicas: rs},
			{Name: "ok", Replicas: rs},
			{Name: "ok", Replicas: rs},
			{Name: "nil", Replicas: []*Replica{rs[0], nil}},
		},
		Splits:  []Split{{Name: "s", Targets: []Target{{"ok", 1}}}},
		Aliases: map[string]string{"ok": "s"},
	})
	if err == nil {
		t.Fatal("got nil, want errors")
	}
	want := []string{
		"route: model with an empty name",
		`route: model "ok": the name is already used`,
		`route: model "nil": replica 1 is nil`,
		`route: alias "ok": the name is already used`,
	}
	if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
}

func TestTableCheck(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{Health: Health{UnhealthyThreshold: 1}}, "good", "bad", "none")
	var mu sync.Mutex
	deadlines := 0
	probe := func(fail bool) func(context.Context) error {
		return func(ctx context.Context) error {
			if _, ok := ctx.Deadline(); ok {
				mu.Lock()
				deadlines++
				mu.Unlock()
			}
			if fail {
				return errors.New("connection refused")
			}
			return nil
		}
	}
	rs[0].Probe, rs[1].Probe = probe(false), probe(true)
	tb := newTable(t, Config{Models: []Model{{Name: "m", Replicas: rs}}, Now: clk.Now})
	err := tb.Check(context.Background())
	if err == nil || err.Error() != "route: health check of bad: connection refused" {
		t.Errorf("got %v, want only bad's failure", err)
	}
	if deadlines != 2 {
		t.Errorf("got %d probes with a deadline, want 2", deadlines)
	}
	if !rs[1].Status().Down || rs[0].Status().Down || rs[2].Status().Down {
		t.Errorf("got down = %v %v %v, want only bad down", rs[0].Status().Down, rs[1].Status().Down, rs[2].Status().Down)
	}
}

// TestConcurrentPlans runs many plans at once with failures mixed in; every attempt must be
// reported, so no replica is left with outstanding requests.
func TestConcurrentPlans(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{}, "a1", "a2", "a3", "b1", "b2")
	tb := newTable(t, Config{
		Models: []Model{
			{Name: "A", Replicas: rs[:3], Fallbacks: []string{"B"}},
			{Name: "B", Replicas: rs[3:]},
		},
		Splits: []Split{{Name: "S", Targets: []Target{{"A", 1}, {"B", 1}}, Sticky: true}},
		Now:    clk.Now,
	})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				p, err := tb.Plan([]string{"A", "S"}[i%2], fmt.Sprint(w), 1)
				if err != nil {
					t.Error(err)
					return
				}
				for n := 0; n < 10; n++ {
					a, err := p.Next()
					if err != nil {
						break
					}
					if a.Replica.Outstanding() < 1 {
						t.Error("attempt not counted outstanding")
					}
					var e error
					if (i+n+w)%3 == 0 {
						e = errOverloaded
					}
					p.Report(e, time.Millisecond)
					if e == nil {
						break
					}
				}
				if i%50 == 0 {
					clk.Advance(time.Second)
					_ = rs[i%len(rs)].Status()
				}
			}
		}()
	}
	wg.Wait()
	for _, r := range rs {
		if n := r.Outstanding(); n != 0 {
			t.Errorf("%s: got %d outstanding, want 0", r.Name, n)
		}
	}
}

func TestPlanAllocs(t *testing.T) {
	clk := newClock()
	tb := newTable(t, Config{Models: []Model{{Name: "m", Replicas: replicas(clk, Policy{}, "r1", "r2", "r3", "r4")}}, Now: clk.Now})
	allocs := testing.AllocsPerRun(100, func() {
		p, err := tb.Plan("m", "key", 100)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Next(); err != nil {
			t.Fatal(err)
		}
		p.Report(nil, time.Millisecond)
	})
	if allocs > 1 {
		t.Errorf("got %v allocs per routed request, want at most 1 (the Plan)", allocs)
	}
}

func BenchmarkPlan(b *testing.B) {
	rs := make([]*Replica, 8)
	for i := range rs {
		rs[i] = NewReplica(fmt.Sprint(i), nil, withPolicy(Policy{}))
	}
	tb, err := New(withDefaults(Config{Models: []Model{{Name: "m", Replicas: rs}}}))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		p, err := tb.Plan("m", "key", 100)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.Next(); err != nil {
			b.Fatal(err)
		}
		p.Report(nil, time.Millisecond)
	}
}

// A request whose primary's only replica is ejected goes to the fallback, and the attempt says
// which replica of the primary was out and why; an attempt that moved after a failure, or that
// landed on the primary, names none.
func TestAttemptLeft(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{Ejection: Ejection{ConsecutiveFailures: 1, BaseTime: 10 * time.Second}}, "p1", "b1")
	tb := newTable(t, Config{
		Models: []Model{
			{Name: "P", Replicas: rs[0:1], Fallbacks: []string{"B"}},
			{Name: "B", Replicas: rs[1:2]},
		},
		Picker: P2C{Rand: first},
		Now:    clk.Now,
	})
	p, err := tb.Plan("P", "k", 10)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []Attempt{{Model: "P"}, {Model: "B", Fallback: ReasonOverloaded}} {
		a, err := p.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a.Model != want.Model || a.Fallback != want.Fallback || a.Left != (Skip{}) {
			t.Errorf("attempt %d: %s, fallback %q, left %+v; want %s, %q and none", i+1, a.Model, a.Fallback, a.Left, want.Model, want.Fallback)
		}
		if i == 0 {
			p.Report(errOverloaded, time.Millisecond) // ejects p1
		} else {
			p.Report(nil, time.Millisecond)
		}
	}

	p, err = tb.Plan("P", "k", 10)
	if err != nil {
		t.Fatal(err)
	}
	a, err := p.Next()
	if err != nil {
		t.Fatal(err)
	}
	if a.Model != "B" || a.Fallback != ReasonUnavailable || a.Left != (Skip{Replica: "p1", Reason: SkipEjected}) {
		t.Errorf("with p1 ejected: %s, fallback %q, left %+v; want B, unavailable, p1 ejected", a.Model, a.Fallback, a.Left)
	}
	p.Report(nil, time.Millisecond)
}
