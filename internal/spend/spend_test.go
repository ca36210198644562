package spend

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/money"
)

// testPrice is $3 input, $15 output, $3.75 cache write and $0.30 cache read per million tokens.
var testPrice = Price{Input: 3_000_000, Output: 15_000_000, CacheWrite: 3_750_000, CacheRead: 300_000}

func TestCost(t *testing.T) {
	u := llm.Usage{InputTokens: 1000, OutputTokens: 200, CacheCreationInputTokens: 400, CacheReadInputTokens: 10_000}
	// 1000×3 + 200×15 + 400×3.75 + 10000×0.30 = 3000 + 3000 + 1500 + 3000 = 10,500 micro-units.
	if got := testPrice.Cost(u, 0); got != 10_500 {
		t.Errorf("cost = %d; want 10500", got)
	}
	gpu := Price{GPUSecond: 800} // 0.0008 a second
	if got := gpu.Cost(u, 2500*time.Millisecond); got != 2000 {
		t.Errorf("GPU-second cost = %d; want 2000", got)
	}
	tab := NewPrices(map[string]ModelPrice{"m": {Price: testPrice, Engines: map[string]Price{"cheap": {Input: 1_000_000, Output: 1_000_000}}}})
	if got, ok := tab.Cost("m", "cheap", llm.Usage{InputTokens: 1_000_000}, 0); !ok || got != 1_000_000 {
		t.Errorf("engine testPrice: %d %v; want 1000000", got, ok)
	}
	if _, ok := tab.Cost("other", "", u, 0); ok {
		t.Errorf("an unpriced model has a testPrice")
	}
	// The worst case: every prompt token at the dearest input testPrice (cache write here), all
	// of max_tokens at the output testPrice, on the dearest engine.
	if got := tab.worst("m", 1000, 100, 0); got != 3750+1500 {
		t.Errorf("worst = %d; want 5250", got)
	}
}

func TestPeriods(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip("no time zone data")
	}
	now := time.Date(2026, 12, 3, 2, 0, 0, 0, time.UTC) // Wednesday 21:00 on the 2nd in New York
	for _, c := range []struct {
		period     string
		start, end string
	}{
		{Day, "2026-12-02", "2026-12-03T00:00:00-05:00"},
		{Week, "2026-11-30", "2026-12-07T00:00:00-05:00"},
		{Month, "2026-12-01", "2027-01-01T00:00:00-05:00"},
	} {
		b := Budget{Scope: ScopeGlobal, Limit: 1, Period: c.period, Location: ny}
		b.init()
		cl := b.cellAt(now)
		if want := b.ID() + "@" + c.start; cl.id != want {
			t.Errorf("%s: cell %q; want %q", c.period, cl.id, want)
		}
		if got := cl.reset.Format(time.RFC3339); got != c.end {
			t.Errorf("%s: resets %s; want %s", c.period, got, c.end)
		}
	}
}

func newSpender(l Ledger, global ...Budget) *Spender {
	return New(Config{Prices: NewPrices(map[string]ModelPrice{"m": {Price: testPrice}}), Global: global,
		Teams: map[string][]Budget{"t": {{Tokens: true, Limit: 1 << 40, Window: time.Hour}}}, TeamOf: map[string]string{"k": "t"},
		KeyNames: []string{"k"}, Ledger: l})
}

// TestReserveNoOverspend: 100 requests at once against a budget of 10 requests' worst case:
// exactly 10 hold at a time, every other one is refused with the budget's 429, and what was
// spent never passes the budget.
func TestReserveNoOverspend(t *testing.T) {
	testNoOverspend(t, NewMemory())
}

func testNoOverspend(t *testing.T, l Ledger) {
	worst := testPrice.worst(100, 100, 0) // 100 prompt tokens, max_tokens 100
	budget := Budget{Scope: ScopeGlobal, Limit: int64(10 * worst), Period: Day}
	s := newSpender(l, budget)
	var wg sync.WaitGroup
	var ok, refused atomic.Int64
	start := make(chan struct{})
	for range 100 {
		wg.Go(func() {
			<-start
			h, err := s.Reserve(context.Background(), "k", "m", 100, 100)
			var e *apierr.Error
			switch {
			case err == nil:
				ok.Add(1)
				time.Sleep(20 * time.Millisecond)
				h.Settle(worst, 200) // the worst case, spent whole
			case errors.As(err, &e) && e.Kind == apierr.RateLimit && e.Code == "BUDGET_EXCEEDED":
				refused.Add(1)
			default:
				t.Errorf("reserve: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if ok.Load() != 10 || refused.Load() != 90 {
		t.Errorf("served %d, refused %d; want 10 and 90", ok.Load(), refused.Load())
	}
	rep, err := s.Report(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	g := rep.Global[0]
	if want := money.Micros(budget.Limit).String(); g.Spent != want || g.Reserved != "0.000000" || g.Left != "0.000000" {
		t.Errorf("global budget after: %+v; want spent %s, nothing reserved or left", g, want)
	}
	if rep.Keys[0].Requests != 10 || rep.Teams[0].Budgets[0].Spent != "2000" {
		t.Errorf("report: key %+v, team %+v", rep.Keys[0], rep.Teams[0])
	}
}

// TestSettleReturnsTheRest: a request that costs less than its worst case gives the rest back.
func TestSettleReturnsTheRest(t *testing.T) {
	worst := testPrice.worst(100, 100, 0)
	s := newSpender(NewMemory(), Budget{Scope: ScopeGlobal, Limit: int64(2 * worst), Window: time.Hour})
	h1, err := s.Reserve(context.Background(), "k", "m", 100, 100)
	if err != nil {
		t.Fatal(err)
	}
	h1.Settle(worst/4, 10)
	for i := range 2 { // the first's unspent three quarters came back: two more fit only after it
		h, err := s.Reserve(context.Background(), "k", "m", 100, 100)
		if i == 1 {
			if err == nil {
				t.Fatalf("a third worst case fit in a budget of two")
			}
			e := apierr.From(err)
			if e.Status() != 429 || e.RetryAfter <= 0 || e.Header.Get("X-Layer0-Budget") == "" {
				t.Errorf("refusal: %+v", e)
			}
			break
		}
		if err != nil {
			t.Fatalf("reserve %d: %v", i, err)
		}
		defer h.Settle(0, 0)
	}
}

// TestTooBig: a worst case larger than the whole budget can never fit: not to be retried.
func TestTooBig(t *testing.T) {
	s := newSpender(NewMemory(), Budget{Scope: ScopeGlobal, Limit: 10, Period: Month})
	_, err := s.Reserve(context.Background(), "k", "m", 100, 100)
	if e := apierr.From(err); e.Status() != 429 || e.Header.Get("X-Should-Retry") != "false" {
		t.Errorf("too big: %v", err)
	}
}
