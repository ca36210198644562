package route

import (
	"net/http"
	"testing"

	"github.com/layer0ai/layer0/internal/llm"
)

// lastPicker picks the replica at index at (or an index out of range) and records what it was
// given.
type lastPicker struct {
	at    int
	reqs  []PickRequest
	loads [][]ReplicaLoad
}

func (p *lastPicker) Pick(req *PickRequest, ls []ReplicaLoad) int {
	p.reqs = append(p.reqs, *req)
	p.loads = append(p.loads, append([]ReplicaLoad(nil), ls...))
	if p.at < 0 {
		return len(ls) - 1
	}
	return p.at
}

// An application's picker is given what the plan knows of the request — model, key, header,
// canonical request, input tokens, whether it is a retry — and each candidate's load, busy ones
// marked; its choice is the attempt's replica, and an index out of range falls back to p2c.
func TestAppPicker(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{}, "a", "b", "c")
	rs[0].SetUtilization(0.95) // above the threshold
	pk := &lastPicker{at: -1}
	tb := newTable(t, Config{Now: clk.Now, Models: []Model{{Name: "m", Replicas: rs, Picker: App{P: pk}}}})
	pl, err := tb.Plan("m", "team-a", 42)
	if err != nil {
		t.Fatal(err)
	}
	req := &llm.Request{Model: "m"}
	pl.SetRequest(req)
	pl.SetHeader(http.Header{"X-Tenant": {"gold"}})
	a, err := pl.Next()
	if err != nil {
		t.Fatal(err)
	}
	if a.Replica != rs[2] {
		t.Errorf("attempt on %s, want c (the picker's last candidate)", a.Replica.Name)
	}
	r := pk.reqs[0]
	if r.Model != "m" || r.Key != "team-a" || r.InputTokens != 42 || r.Request != req || r.Header.Get("X-Tenant") != "gold" || r.Retry {
		t.Errorf("the picker was given %+v", r)
	}
	if got := pk.loads[0]; len(got) != 2 || got[0].Name != "b" || got[1].Name != "c" || got[0].Outstanding != 0 {
		t.Errorf("first pick's candidates %+v, want b and c (a is above the threshold)", got)
	}
	pl.Report(errServer, 0)
	if _, err := pl.Next(); err != nil {
		t.Fatal(err)
	}
	if r := pk.reqs[1]; !r.Retry {
		t.Errorf("the retry's pick was not marked a retry: %+v", r)
	}
	if got := pk.loads[1]; len(got) != 1 || got[0].Name != "b" {
		t.Errorf("the retry's candidates %+v, want b alone", got)
	}
	pl.Report(nil, 0)

	// Only the busy replica left: it is offered, marked busy.
	rs[1].SetUtilization(0.95)
	rs[2].SetUtilization(0.95)
	pl, _ = tb.Plan("m", "", 1)
	if _, err := pl.Next(); err != nil {
		t.Fatal(err)
	}
	pl.Report(nil, 0)
	if got := pk.loads[2]; len(got) != 3 || !got[0].Busy || got[0].Utilization != 0.95 {
		t.Errorf("every replica busy: candidates %+v, want all three, busy", got)
	}

	// Out of range: p2c picks instead, among the candidates.
	out := &lastPicker{at: 7}
	tb = newTable(t, Config{Now: clk.Now, Models: []Model{{Name: "m", Replicas: rs[1:], Picker: App{P: out}}}})
	for range 20 {
		pl, _ := tb.Plan("m", "", 1)
		a, err := pl.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a.Replica != rs[1] && a.Replica != rs[2] {
			t.Fatalf("out of range: attempt on %s", a.Replica.Name)
		}
		pl.Report(nil, 0)
	}
	if len(out.reqs) != 20 {
		t.Errorf("the picker was asked %d times, want 20", len(out.reqs))
	}
}
