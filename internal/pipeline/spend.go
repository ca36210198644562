package pipeline

import (
	"context"
	"time"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/money"
	"github.com/layer0ai/layer0/internal/spend"
)

// Spender prices requests and holds them to budgets (internal/spend's *spend.Spender). Serve
// reserves a request's worst case once its input is counted, before the route plan, and settles
// the reservation to the request's cost when it ends, whatever ended it.
type Spender interface {
	// Budgeted reports whether any budget applies to the key's requests: their input is then
	// counted before they are sent.
	Budgeted(key string) bool
	// Reserve reserves the worst case of a request of key for the resolved name, of input
	// prompt tokens and at most maxTokens output tokens, or refuses it (a 429 naming the
	// budget, or a 503 when the shared ledger cannot answer).
	Reserve(ctx context.Context, key, name string, input, maxTokens int) (*spend.Hold, error)
	// Cost prices a request of model on engine from the usage the engine reported and the time
	// it took; false for a model without a price.
	Cost(model, engine string, u llm.Usage, d time.Duration) (money.Micros, bool)
	// Team is the key's team ("" for none).
	Team(key string) string
	// CostHeader reports whether answers carry their cost in X-Layer0-Cost.
	CostHeader() bool
}

// Spend is the pipeline's Spender, nil when nothing is priced or budgeted.
func (p *Pipeline) Spend() Spender { return p.spend }

// budgeted reports whether the key's requests reserve against budgets.
func (p *Pipeline) budgeted(key string) bool { return p.spend != nil && p.spend.Budgeted(key) }

// reserveSpend reserves the request's worst case against the key's budgets.
func (p *Pipeline) reserveSpend(ctx context.Context, key, name string, req *llm.Request, input int) (*spend.Hold, error) {
	if p.spend == nil {
		return nil, nil
	}
	return p.spend.Reserve(ctx, key, name, input, req.MaxTokens)
}

// settleSpend records what the request cost — the served model's price on the engine that
// served it, applied to the usage the engine reported (the tokens produced and the prompt
// processed, for a stream that ended early) — and settles its reservation to it.
func (p *Pipeline) settleSpend(c *Call, h *spend.Hold) {
	if p.spend == nil {
		return
	}
	rec := &c.Record
	if rec.Served != "" {
		rec.Cost, rec.Priced = p.spend.Cost(rec.Served, rec.Engine, rec.Usage, rec.EngineTime)
	}
	h.Settle(rec.Cost, spend.Tokens(rec.Usage))
}

// isNil reports whether s holds a nil *spend.Spender (a configuration without prices or
// budgets).
func isNil(s Spender) bool {
	sp, ok := s.(*spend.Spender)
	return ok && sp == nil
}
