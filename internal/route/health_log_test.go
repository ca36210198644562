package route

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
)

// A request that no replica can take because every one is marked down by health checks — no
// ejection or breaker says when one is back — still gets a retry-after: the recheck interval.
func TestUnavailableWhileDownRetriesAfterRecheck(t *testing.T) {
	clk := newClock()
	rs := replicas(clk, Policy{Health: Health{UnhealthyThreshold: 1}}, "r1", "r2")
	for _, r := range rs {
		r.Probe = func(context.Context) error { return errors.New("503") }
		_ = r.Check(context.Background())
	}
	tb := newTable(t, Config{Models: []Model{{Name: "m", Replicas: rs}}, Now: clk.Now, RecheckAfter: 7 * time.Second})
	p, _ := tb.Plan("m", "", 1)
	_, err := p.Next()
	if e := apierr.From(err); e == nil || e.Kind != apierr.Unavailable || e.RetryAfter != 7*time.Second {
		t.Fatalf("got %#v, want a 503 with retry-after 7s", err)
	}
	if got := rs[0].Unavailable(); got != SkipDown {
		t.Errorf("Unavailable: %q, want %q", got, SkipDown)
	}
}

// Every change of a replica's health is one JSON log line: ejected and back, breaker opened and
// closed, marked down and up.
func TestHealthChangesLogged(t *testing.T) {
	var buf bytes.Buffer
	clk := newClock()
	r := replicas(clk, Policy{Logger: slog.New(slog.NewJSONHandler(&buf, nil)),
		Ejection: Ejection{ConsecutiveFailures: 2, BaseTime: 5 * time.Second},
		Breaker:  Breaker{MinRequests: 2, FailureRatio: 0.5, OpenTime: time.Second, HalfOpenProbes: 1},
		Health:   Health{UnhealthyThreshold: 1, HealthyThreshold: 1}}, "r")[0]
	for range 2 {
		if r.Begin() {
			r.Report(errServer, time.Millisecond)
		}
	}
	clk.Advance(6 * time.Second) // past the ejection and the open time
	if got := r.Unavailable(); got != "" {
		t.Fatalf("after the ejection: %q, want available (half-open)", got)
	}
	if !r.Begin() {
		t.Fatal("the half-open probe was refused")
	}
	r.Report(nil, time.Millisecond)
	fail := true
	r.Probe = func(context.Context) error {
		if fail {
			return errors.New("connection refused")
		}
		return nil
	}
	_ = r.Check(context.Background())
	_ = r.Check(context.Background()) // still down: no second line
	fail = false
	_ = r.Check(context.Background())

	var msgs []string
	for line := range strings.Lines(buf.String()) {
		var rec struct{ Msg, Engine string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec.Engine != "r" {
			t.Fatalf("log line %q: %v, want JSON naming the engine", line, err)
		}
		msgs = append(msgs, rec.Msg)
	}
	want := []string{"replica breaker opened", "replica ejected", "replica back from ejection", "replica breaker closed",
		"replica marked down by health checks", "replica marked up by health checks"}
	if strings.Join(msgs, "|") != strings.Join(want, "|") {
		t.Errorf("log:\n%s\nwant the messages %q in order", buf.String(), want)
	}
}
