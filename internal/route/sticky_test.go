package route

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

// place routes one request of session through a plan of tb's model m and returns the replica
// it landed on and the decision.
func place(t *testing.T, tb *Table, session string) (string, Decision) {
	t.Helper()
	plan, err := tb.Plan("m", "key-1", 100)
	if err != nil {
		t.Fatal(err)
	}
	var d Decision
	plan.SetPrompt(nil, &d)
	plan.SetHeader(http.Header{"X-Session-Id": {session}})
	a, err := plan.Next()
	if err != nil {
		t.Fatalf("session %s: %v", session, err)
	}
	plan.Report(nil, time.Millisecond)
	return a.Replica.Name, d
}

// TestStickySpreadsSessions: sessions spread about evenly over the replicas, and a session
// always lands on the same one.
func TestStickySpreadsSessions(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{}, "a", "b", "c", "d")
	tb := newTable(t, Config{Models: []Model{{Name: "m", Replicas: rs}}, Picker: &Sticky{Header: "X-Session-Id"}, Now: clk.Now})
	const sessions = 2000
	counts := map[string]int{}
	for i := range sessions {
		s := "session-" + strconv.Itoa(i)
		r, d := place(t, tb, s)
		if again, _ := place(t, tb, s); again != r {
			t.Fatalf("%s: placed on %s, then on %s", s, r, again)
		}
		if d.Picker != "sticky" || d.Reason != "session" || d.Candidates[d.Chosen].Replica != r || d.Candidates[d.Chosen].Cost != 0 {
			t.Fatalf("%s: decision %+v for %s", s, d, r)
		}
		counts[r]++
	}
	for _, r := range rs {
		// Binomial(2000, 1/4): mean 500, standard deviation 19; 400 is five of them away.
		if n := counts[r.Name]; n < 400 || n > 600 {
			t.Errorf("replica %s got %d of %d sessions: %v", r.Name, n, sessions, counts)
		}
	}
}

// TestStickyEjectionMovesOnlyItsSessions: when a replica is ejected only its sessions move,
// spread over the others, and they come back when it returns.
func TestStickyEjectionMovesOnlyItsSessions(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{Ejection: Ejection{ConsecutiveFailures: 1, BaseTime: time.Minute}}, "a", "b", "c", "d", "e")
	tb := newTable(t, Config{Models: []Model{{Name: "m", Replicas: rs}}, Picker: &Sticky{Header: "X-Session-Id"}, Now: clk.Now})
	const sessions = 1000
	before := make([]string, sessions)
	for i := range before {
		before[i], _ = place(t, tb, strconv.Itoa(i))
	}
	rs[2].Begin()
	rs[2].Report(errServer, 0) // c is ejected
	moved := map[string]int{}
	for i, was := range before {
		now, d := place(t, tb, strconv.Itoa(i))
		switch {
		case was != "c" && now != was:
			t.Fatalf("session %d moved from %s to %s though %s is still in", i, was, now, was)
		case was == "c":
			if now == "c" {
				t.Fatalf("session %d stayed on the ejected replica", i)
			}
			moved[now]++
		}
		if d.NSkipped != 1 || d.Skipped[0] != (Skip{"c", SkipEjected}) {
			t.Fatalf("session %d: skipped %v, want c ejected", i, d.Skipped[:d.NSkipped])
		}
	}
	for _, r := range []string{"a", "b", "d", "e"} {
		if moved[r] == 0 {
			t.Errorf("no session of c moved to %s: %v (they should spread)", r, moved)
		}
	}
	clk.Advance(2 * time.Minute) // the ejection ends
	for i, was := range before {
		if now, _ := place(t, tb, strconv.Itoa(i)); now != was {
			t.Fatalf("after c came back, session %d is on %s, was on %s", i, now, was)
		}
	}
}

// TestStickyGuard: a session's replica with too many requests in flight is passed over for the
// session's next replica in hash order — the same one the session goes to when its own replica
// is out — and below the guard the session stays.
func TestStickyGuard(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{}, "a", "b", "c", "d")
	s := &Sticky{Header: "X-Session-Id"}
	var d Decision
	home := rs[s.PickSession(rs, "user-7", &d)]
	var rest []*Replica
	for _, r := range rs {
		if r != home {
			rest = append(rest, r)
		}
	}
	second := rest[s.PickSession(rest, "user-7", &d)]

	busy(home, 4) // 4 ≤ 2×0+4: stays
	if got := rs[s.PickSession(rs, "user-7", &d)]; got != home || d.Reason != "session" {
		t.Errorf("4 in flight against 0: picked %s (%s), want %s", got.Name, d.Reason, home.Name)
	}
	busy(home, 1) // 5 > 4: over the guard
	got := rs[s.PickSession(rs, "user-7", &d)]
	if got != second || d.Reason != "spread" || d.Candidates[d.Chosen].Cost != 1 {
		t.Errorf("5 in flight against 0: picked %s (%s, rank %v), want %s, spread, rank 1", got.Name, d.Reason, d.Candidates[d.Chosen].Cost, second.Name)
	}
	for _, r := range rest {
		busy(r, 1) // the least loaded has 1: 5 ≤ 2×1+4, the session is back home
	}
	if got := rs[s.PickSession(rs, "user-7", &d)]; got != home || d.Reason != "session" {
		t.Errorf("5 in flight against 1: picked %s (%s), want %s", got.Name, d.Reason, home.Name)
	}
	strict := &Sticky{Header: "X-Session-Id", Guard: Guard{Imbalance: 1, Slack: 1}}
	if got := rs[strict.PickSession(rs, "user-7", &d)]; got != second || d.Reason != "spread" {
		t.Errorf("imbalance 1, slack 1: picked %s (%s), want %s", got.Name, d.Reason, second.Name)
	}
}

// TestStickySession: the header names the session; without it, the API key's name when
// FallbackKey is set, or no session, which is placed by load.
func TestStickySession(t *testing.T) {
	h := http.Header{"X-Session-Id": {"conv-42"}}
	for _, tc := range []struct {
		s    Sticky
		h    http.Header
		want string
	}{
		{Sticky{Header: "X-Session-Id", FallbackKey: true}, h, "conv-42"},
		{Sticky{Header: "X-Session-Id", FallbackKey: true}, http.Header{}, "alice"},
		{Sticky{Header: "X-Session-Id", FallbackKey: true}, http.Header{"X-Session-Id": {""}}, "alice"},
		{Sticky{Header: "X-Session-Id"}, nil, ""},
		{Sticky{Header: "X-Conversation"}, h, ""},
		{Sticky{FallbackKey: true}, h, "alice"},
	} {
		if got := tc.s.Session(tc.h, "alice"); got != tc.want {
			t.Errorf("%+v on %v: session %q, want %q", tc.s, tc.h, got, tc.want)
		}
	}

	clk := newClock()
	rs := replicas(clk, Policy{}, "a", "b", "c")
	busy(rs[0], 3)
	busy(rs[2], 2)
	s := &Sticky{Fallback: P2C{Rand: first}} // compares a and b: b is less loaded
	var d Decision
	if i := s.PickSession(rs, "", &d); i != 1 || d.Reason != "load" || d.N != 3 || d.Candidates[0].Outstanding != 3 {
		t.Errorf("no session: picked %d, decision %+v; want b by load", i, d)
	}
}

func TestStickyAllocs(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{}, "a", "b", "c", "d", "e", "f", "g", "h")
	s := &Sticky{Header: "X-Session-Id", FallbackKey: true}
	h := http.Header{"X-Session-Id": {"a-session-of-some-length"}}
	var d Decision
	if allocs := testing.AllocsPerRun(100, func() { s.PickSession(rs, s.Session(h, "k"), &d) }); allocs != 0 {
		t.Errorf("got %v allocs, want 0", allocs)
	}
}

// BenchmarkStickyPick: one pick over 8 replicas, the session read from the headers.
func BenchmarkStickyPick(b *testing.B) {
	rs := make([]*Replica, 8)
	for i := range rs {
		rs[i] = NewReplica("replica-"+strconv.Itoa(i), nil, withPolicy(Policy{}))
	}
	s := &Sticky{Header: "X-Session-Id", FallbackKey: true}
	h := http.Header{"X-Session-Id": {"0b6f1c3e-5d1a-4f0e-9a51-7d2c7e0f4a11"}}
	var d Decision
	b.ReportAllocs()
	for b.Loop() {
		s.PickSession(rs, s.Session(h, "k"), &d)
	}
}

// TestLoadWeigherUtilization: a picker that weighs load itself keeps a replica above the
// utilisation threshold in the choice while another of the model is below it, and a model
// whose replicas are all above it still yields to a fallback model below it.
func TestLoadWeigherUtilization(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{}, "p0", "p1", "f0")
	tb := newTable(t, Config{Models: []Model{
		{Name: "primary", Replicas: rs[:2], Fallbacks: []string{"fallback"}},
		{Name: "fallback", Replicas: rs[2:]},
	}, Picker: &Sticky{FallbackKey: true}, Now: clk.Now})
	// A key whose home is p0, the replica made hot below.
	key := ""
	var d Decision
	for i := 0; key == ""; i++ {
		if k := "key-" + strconv.Itoa(i); (&Sticky{}).PickSession(rs[:2], k, &d) == 0 {
			key = k
		}
	}
	attempt := func() step {
		t.Helper()
		p, _ := tb.Plan("primary", key, 1)
		p.SetPrompt(nil, &d)
		got, err := run(t, p, nil)
		if err != nil || len(got) != 1 {
			t.Fatalf("%v %v", got, err)
		}
		return got[0]
	}
	rs[0].SetUtilization(0.95)
	if got := attempt(); got != (step{"p0", "primary", false, ""}) {
		t.Errorf("home above the threshold, p1 below: got %+v, want the home p0", got)
	}
	rs[1].SetUtilization(0.9)
	if got := attempt(); got != (step{"f0", "fallback", false, ReasonUtilization}) {
		t.Errorf("both above the threshold: got %+v, want the fallback", got)
	}
}

// TestStickyConcurrentLoads: picks while the loads move under them always return a candidate.
func TestStickyConcurrentLoads(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{}, "a", "b", "c", "d")
	s := &Sticky{Header: "X-Session-Id", Guard: Guard{Imbalance: 1, Slack: 1}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 20000 {
			r := rs[i%len(rs)]
			r.Begin()
			r.Report(nil, 0)
		}
	}()
	var d Decision
	for i := 0; ; i++ {
		if k := s.PickSession(rs, "s"+strconv.Itoa(i%7), &d); k < 0 || k >= len(rs) {
			t.Fatalf("picked %d of %d", k, len(rs))
		}
		select {
		case <-done:
			return
		default:
		}
	}
}
