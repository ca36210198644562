package spend

import (
	"math"
	"time"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/money"
)

// Price is what a model's tokens cost on one engine: money per million tokens of each kind, or,
// when GPUSecond is set, money per second of the engine's time serving the request.
type Price struct {
	Input      money.Micros // per million input tokens not read from or written to the prompt cache
	Output     money.Micros // per million output tokens
	CacheWrite money.Micros // per million input tokens written to the prompt cache
	CacheRead  money.Micros // per million input tokens read from the prompt cache
	GPUSecond  money.Micros // per second of engine time; when set, the token prices are not used
}

// Cost is what u cost at p, served in d of engine time: each kind of token times its price,
// summed and divided by a million once, rounded up to the micro-unit.
func (p Price) Cost(u llm.Usage, d time.Duration) money.Micros {
	if p.GPUSecond > 0 {
		return money.MulDivUp(d.Nanoseconds(), p.GPUSecond, int64(time.Second))
	}
	var sum money.Micros
	for _, t := range [4]struct {
		n int
		p money.Micros
	}{{u.InputTokens, p.Input}, {u.OutputTokens, p.Output}, {u.CacheCreationInputTokens, p.CacheWrite},
		{u.CacheReadInputTokens, p.CacheRead}} {
		sum = satAdd(sum, satMul(int64(max(t.n, 0)), t.p))
	}
	return money.MulDivUp(int64(sum), 1, 1_000_000)
}

// worst is the most a request of prompt input tokens and at most maxOut output tokens can cost
// at p: every input token at the dearest input price, every output token produced, or, priced by
// time, the longest the engine may take (maxTime).
func (p Price) worst(prompt, maxOut int, maxTime time.Duration) money.Micros {
	if p.GPUSecond > 0 {
		return money.MulDivUp(maxTime.Nanoseconds(), p.GPUSecond, int64(time.Second))
	}
	in := max(p.Input, p.CacheWrite, p.CacheRead)
	return money.MulDivUp(int64(satAdd(satMul(int64(max(prompt, 0)), in), satMul(int64(max(maxOut, 0)), p.Output))), 1, 1_000_000)
}

// ModelPrice is one model's price and the engines whose price differs.
type ModelPrice struct {
	Price   Price
	Engines map[string]Price
}

// Prices is the price table: by model id, and by engine within a model. Immutable.
type Prices struct {
	models map[string]ModelPrice
}

// NewPrices returns the table of models.
func NewPrices(models map[string]ModelPrice) *Prices { return &Prices{models: models} }

// For returns the price of model served by engine, and whether the table prices the model.
func (t *Prices) For(model, engine string) (Price, bool) {
	if t == nil {
		return Price{}, false
	}
	m, ok := t.models[model]
	if !ok {
		return Price{}, false
	}
	if p, ok := m.Engines[engine]; ok {
		return p, true
	}
	return m.Price, true
}

// Cost is what a request cost: model's price on engine applied to the usage the engine reported
// and the engine time d. It reports false for a model the table does not price (cost 0).
func (t *Prices) Cost(model, engine string, u llm.Usage, d time.Duration) (money.Micros, bool) {
	p, ok := t.For(model, engine)
	if !ok {
		return 0, false
	}
	return p.Cost(u, d), true
}

// worst is the dearest a request may cost on model, whichever of its engines serves it.
// maxTime is the longest one of its engines may take (their timeouts.total), for a price by time.
func (t *Prices) worst(model string, prompt, maxOut int, maxTime time.Duration) money.Micros {
	m, ok := t.models[model]
	if !ok {
		return 0
	}
	w := m.Price.worst(prompt, maxOut, maxTime)
	for _, p := range m.Engines {
		w = max(w, p.worst(prompt, maxOut, maxTime))
	}
	return w
}

func satMul(n int64, p money.Micros) money.Micros {
	if n == 0 || p == 0 {
		return 0
	}
	if n > math.MaxInt64/int64(p) {
		return math.MaxInt64
	}
	return money.Micros(n) * p
}

func satAdd(a, b money.Micros) money.Micros {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
