package pipeline

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/auth"
	"github.com/layer0ai/layer0/internal/limit"
	"github.com/layer0ai/layer0/internal/llm"
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
