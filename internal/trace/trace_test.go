package trace

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/pipeline"
	"github.com/layer0ai/layer0/internal/route"
)

func record(i, status int, model string) *pipeline.Record {
	return &pipeline.Record{RequestID: "req_" + strconv.Itoa(i), Start: time.Unix(int64(i), 0), Model: model,
		Served: model, Status: status}
}

// The ring keeps the last n requests, newest first, and forgets older ones.
func TestRingKeepsTheLastRequests(t *testing.T) {
	r := New(3)
	for i := 1; i <= 5; i++ {
		r.Add(record(i, 200, "m"), "POST", "/v1/messages", time.Duration(i)*time.Millisecond)
	}
	if _, ok := r.Get("req_2"); ok {
		t.Error("req_2 is older than the last 3 but still kept")
	}
	tr, ok := r.Get("req_4")
	if !ok || tr.Times.TotalMs != 4 || tr.Method != "POST" {
		t.Fatalf("req_4: %+v %v", tr, ok)
	}
	var ids []string
	for _, s := range r.List(Filter{}) {
		ids = append(ids, s.ID)
	}
	if got := strings.Join(ids, ","); got != "req_5,req_4,req_3" {
		t.Errorf("list: %s, want req_5,req_4,req_3", got)
	}
}

func TestRingFilters(t *testing.T) {
	r := New(10)
	r.Add(record(1, 200, "a"), "POST", "/v1/messages", 0)
	r.Add(record(2, 529, "b"), "POST", "/v1/messages", 0)
	r.Add(record(3, 503, "a"), "POST", "/v1/messages", 0)
	r.Add(record(4, 200, "a"), "POST", "/v1/messages", 0)
	bob := record(5, 200, "a")
	bob.Key = "bob"
	r.Add(bob, "POST", "/v1/messages", 0)
	for _, tc := range []struct {
		f    Filter
		want string
	}{
		{Filter{Model: "a"}, "req_5,req_4,req_3,req_1"},
		{Filter{Own: true, Key: "bob"}, "req_5"},
		{Filter{Own: true, Key: "alice"}, ""},
		{Filter{Status: "5xx"}, "req_3,req_2"},
		{Filter{Status: "529"}, "req_2"},
		{Filter{Model: "a", Status: "200", Limit: 1}, "req_5"},
		{Filter{Model: "c"}, ""},
	} {
		var ids []string
		for _, s := range r.List(tc.f) {
			ids = append(ids, s.ID)
		}
		if got := strings.Join(ids, ","); got != tc.want {
			t.Errorf("%+v: %s, want %s", tc.f, got, tc.want)
		}
	}
	for s, want := range map[string]bool{"5xx": true, "404": true, "6xx": false, "99": false, "x": false, "": false} {
		if ValidStatus(s) != want {
			t.Errorf("ValidStatus(%q) = %v", s, !want)
		}
	}
}

// A nil ring keeps nothing and lists nothing.
func TestNilRing(t *testing.T) {
	var r *Ring
	if New(0) != nil {
		t.Fatal("New(0) keeps traces")
	}
	r.Add(record(1, 200, "m"), "GET", "/", 0)
	if _, ok := r.Get("req_1"); ok || len(r.List(Filter{})) != 0 || r.Len() != 0 {
		t.Error("a nil ring returned a trace")
	}
}

// The trace renders every decision the record holds, one line each.
func TestTraceLines(t *testing.T) {
	rec := record(1, 200, "chat")
	rec.Key, rec.Served, rec.Engine, rec.Attempts = "k", "backup", "b1", 2
	rec.Directives = pipeline.DirTruncate
	rec.Context = pipeline.ContextRecord{Truncated: true, Before: 900, After: 500, TurnsDropped: 2}
	rec.Pick.Picker, rec.Pick.Reason, rec.Pick.PromptTokens, rec.Pick.N, rec.Pick.Chosen = "prefix", "cache", 533, 2, 1
	rec.Pick.Candidates[0].Replica, rec.Pick.Candidates[1].Replica, rec.Pick.Candidates[1].Cached = "sim-1", "sim-2", 512
	rec.Pick.NSkipped, rec.Pick.Skipped[0] = 1, route.Skip{Replica: "sim-3", Reason: route.SkipEjected}
	rec.Tries[0] = pipeline.Try{Model: "chat", Replica: "p1", Took: time.Millisecond, Err: errors.New("overloaded")}
	rec.Tries[0].Verdict.Ejected = 30 * time.Second
	rec.Tries[1] = pipeline.Try{Model: "backup", Replica: "b1", Fallback: "overloaded", At: 1500 * time.Microsecond, Took: 2 * time.Millisecond}
	rec.EngineTime, rec.TTFT = 3*time.Millisecond, 2*time.Millisecond
	r := New(1)
	r.Add(rec, "POST", "/v1/messages", 4*time.Millisecond)
	tr, _ := r.Get("req_1")
	got := strings.Join(tr.Lines(), "\n")
	for _, want := range []string{
		"[DEBUG] directives: applied truncate",
		"[DEBUG] context: cut 900 → 500 input tokens (2 turns dropped)",
		"[DEBUG] route: skipped sim-3 (ejected)\n[DEBUG] route: picked sim-2 (cache 512/533 tokens; reason: cache)",
		"[DEBUG] attempt 1: chat on p1 at +0.000ms, 1.000ms, failed: overloaded\n" +
			"[DEBUG] ejection: p1 ejected for 30s at +1.000ms\n" +
			"[DEBUG] fallback: chat → backup (reason: overloaded) at +1.500ms\n" +
			"[DEBUG] attempt 2: backup on b1 (fallback: overloaded) at +1.500ms, 2.000ms, served\n" +
			"[DEBUG] served: backup by b1; first token at +2.000ms, done at +4.000ms",
		"[DEBUG] times: total 4.000ms, engine 3.000ms, ttft 2.000ms, overhead 1.000ms",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("lines lack %q:\n%s", want, got)
		}
	}
}

// A request that found its primary's replica out says which and why on its fallback line.
func TestTraceLinesLeft(t *testing.T) {
	rec := record(1, 200, "chat")
	rec.Served, rec.Engine, rec.Attempts = "backup", "b1", 1
	rec.Tries[0] = pipeline.Try{Model: "backup", Replica: "b1", Fallback: "unavailable", At: time.Millisecond,
		Left: route.Skip{Replica: "p1", Reason: route.SkipEjected}, Took: time.Millisecond}
	tr := FromRecord(rec, "POST", "/v1/messages", 3*time.Millisecond)
	if a := tr.Attempts[0]; a.Left == nil || *a.Left != (Skipped{Replica: "p1", Reason: "ejected"}) {
		t.Errorf("attempt: %+v", a)
	}
	got := strings.Join(tr.Lines(), "\n")
	want := "[DEBUG] fallback: chat → backup (reason: unavailable: p1 ejected) at +1.000ms\n" +
		"[DEBUG] attempt 1: backup on b1 (fallback: unavailable) at +1.000ms, 1.000ms, served"
	if !strings.Contains(got, want) {
		t.Errorf("lines lack %q:\n%s", want, got)
	}
}

// A sticky pick's lines give each candidate's rank for the session, not cached tokens.
func TestTraceLinesSticky(t *testing.T) {
	rec := record(1, 200, "chat")
	rec.Engine, rec.Attempts = "b", 1
	rec.Pick.Picker, rec.Pick.Reason, rec.Pick.N, rec.Pick.Chosen = "sticky", "spread", 2, 1
	rec.Pick.Candidates[0] = route.Candidate{Replica: "a", Outstanding: 9}
	rec.Pick.Candidates[1] = route.Candidate{Replica: "b", Outstanding: 1, Cost: 1}
	r := New(1)
	r.Add(rec, "POST", "/v1/messages", time.Millisecond)
	tr, _ := r.Get("req_1")
	got := strings.Join(tr.Lines(), "\n")
	for _, want := range []string{
		"[DEBUG] route: candidate a: rank 0 for the session, 9 in flight, utilization 0.00",
		"[DEBUG] route: candidate b: rank 1 for the session, 1 in flight, utilization 0.00",
		"[DEBUG] route: picked b (sticky; reason: spread)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("lines lack %q:\n%s", want, got)
		}
	}
}

// Adding to the ring copies the record and allocates nothing.
func TestAddDoesNotAllocate(t *testing.T) {
	r := New(16)
	rec := record(1, 200, "m")
	if n := testing.AllocsPerRun(100, func() { r.Add(rec, "POST", "/v1/messages", time.Millisecond) }); n != 0 {
		t.Errorf("Add: %v allocations, want 0", n)
	}
	var off *Ring
	if n := testing.AllocsPerRun(100, func() { off.Add(rec, "POST", "/v1/messages", time.Millisecond) }); n != 0 {
		t.Errorf("Add on a nil ring: %v allocations, want 0", n)
	}
}

func BenchmarkAdd(b *testing.B) {
	rec := record(1, 200, "m")
	rec.Pick.N = 8
	for _, n := range []int{0, 1000} {
		r := New(n)
		b.Run("requests="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r.Add(rec, "POST", "/v1/messages", time.Millisecond)
			}
		})
	}
}

// A pick for a hot prefix names its spreading, in the lines and in the JSON.
func TestTraceLinesHotPrefix(t *testing.T) {
	rec := record(1, 200, "chat")
	rec.Engine, rec.Attempts = "b", 1
	rec.Pick.Picker, rec.Pick.Reason, rec.Pick.Spread, rec.Pick.PromptTokens = "prefix", "hot", 2, 1025
	rec.Pick.N, rec.Pick.Chosen = 2, 1
	rec.Pick.Candidates[0] = route.Candidate{Replica: "a", Cached: 1024, Outstanding: 9}
	rec.Pick.Candidates[1] = route.Candidate{Replica: "b", Cached: 1024, Outstanding: 3}
	tr := FromRecord(rec, "POST", "/v1/messages", time.Millisecond)
	if tr.Route == nil || tr.Route.Spread != 2 {
		t.Fatalf("route %+v, want spread 2", tr.Route)
	}
	got := strings.Join(tr.Lines(), "\n")
	if want := "[DEBUG] route: picked b (cache 1024/1025 tokens; reason: hot; prefix hot: spread to 2 replicas)"; !strings.Contains(got, want) {
		t.Errorf("lines lack %q:\n%s", want, got)
	}
}

// Own shows a prefix pick as the request's key may read it: only its own cached tokens, the
// costs as if only those were cached, the prediction from them, and "cost" for "cache"; or,
// when its own were not counted, nothing cached and no prediction. The trace as built is the
// operator's, untouched.
func TestTraceOwn(t *testing.T) {
	pick := func(owned bool) *pipeline.Record {
		rec := record(1, 200, "chat")
		rec.Engine, rec.Attempts = "b", 1
		rec.Usage.InputTokens, rec.Usage.CacheReadInputTokens = 10, 90
		rec.Pick = route.Decision{Picker: "prefix", Reason: "cache", PromptTokens: 100, N: 2, Chosen: 1, Owned: owned}
		rec.Pick.Candidates[0] = route.Candidate{Replica: "a", Cached: 0, Own: 0, Cost: 100}
		rec.Pick.Candidates[1] = route.Candidate{Replica: "b", Cached: 96, Own: 32, Cost: 4}
		rec.Prediction = pipeline.Prediction{Checked: true, Predicted: 96, Engine: 90}
		return rec
	}
	full := FromRecord(pick(true), "POST", "/v1/messages", time.Millisecond)
	if c := full.Route.Candidates[1]; c.Cached != 96 || c.Cost != 4 || full.Route.Reason != "cache" || full.Route.CacheScope != "" || full.Route.Prediction.Predicted != 96 {
		t.Errorf("operator's trace: %+v %+v", full.Route, c)
	}
	own := FromRecord(pick(true), "POST", "/v1/messages", time.Millisecond)
	own.Own()
	r := own.Route
	if c := r.Candidates[1]; c.Cached != 32 || c.Cost != 68 || r.Reason != "cost" || r.CacheScope != ScopeOwn || r.Prediction == nil || r.Prediction.Predicted != 32 {
		t.Errorf("own trace: %+v %+v %+v", r, c, r.Prediction)
	}
	if got := strings.Join(own.Lines(), "\n"); !strings.Contains(got, "candidate b: cached 32/100 tokens") || !strings.Contains(got, "cached tokens shown: own") {
		t.Errorf("own lines:\n%s", got)
	}
	withheld := FromRecord(pick(false), "POST", "/v1/messages", time.Millisecond)
	withheld.Own()
	r = withheld.Route
	if c := r.Candidates[1]; c.Cached != 0 || c.Cost != 100 || r.CacheScope != ScopeWithheld || r.Prediction != nil {
		t.Errorf("withheld trace: %+v %+v", r, c)
	}
}
