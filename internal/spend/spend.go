// Package spend prices every request and holds keys, teams and the whole gateway to budgets.
//
// A request's cost is its model's price on the engine that served it (Prices) applied to the
// usage that engine reported — input, output, cache-write and cache-read tokens at their own
// prices, or the engine's time at a price per second — in integer micro-units of the currency
// (internal/money), so sums never drift.
//
// Budgets limit what a key, a team (the keys naming it) or every request together may spend, in
// money or tokens, per calendar day, week or month in a configured time zone, or over a rolling
// window. Before a request is sent its worst case — every prompt token at the dearest input
// price and max_tokens at the output price, on the dearest model and engine that may serve it —
// is reserved against every budget it falls under at once, all or none; when it ends, the
// reservation is settled to the actual cost and the rest returned. A request whose worst case
// does not fit gets a 429 naming the budget and when it resets. The counters are a Ledger: one
// process's memory, or Redis shared by every replica (one Lua script per operation, reservations
// under a per-replica lease so a crashed replica's expire, each replica spending at most its
// share of what was left while Redis is unreachable).
package spend

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/money"
)

// Config is what a Spender is built from.
type Config struct {
	// Prices is the price table; nil prices nothing (every request costs 0).
	Prices *Prices
	// Global, Keys (by key name) and Teams (by team name) are the budgets of each scope.
	Global []Budget
	Keys   map[string][]Budget
	Teams  map[string][]Budget
	// KeyNames are every configured key's name, for the report.
	KeyNames []string
	// TeamOf maps a key's name to its team's ("" for none).
	TeamOf map[string]string
	// Reach maps each name clients may ask for to the models that may serve it (its split's arms
	// and fallback chains), for the worst case. A name missing is served by itself.
	Reach map[string][]string
	// MaxTime maps a model to the longest one of its engines may take serving a request
	// (timeouts.total), for the worst case of a price by engine time.
	MaxTime map[string]time.Duration
	// DefaultMaxTokens is the output reserved for a request that sets no max_tokens.
	DefaultMaxTokens int
	// Currency names the money in messages. Default "USD".
	Currency string
	// Header sends each answer's cost in X-Layer0-Cost.
	Header bool
	// Ledger keeps the counters. Default: a new Memory.
	Ledger Ledger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Spender prices requests and enforces budgets. Immutable after New; safe for concurrent use.
type Spender struct {
	c       Config
	global  []*Budget
	keys    map[string][]*Budget
	teams   map[string][]*Budget
	totals  sync.Map // key name → *total: this process's spending since it started
	tokened bool     // some budget counts tokens
}

type total struct {
	mu       sync.Mutex
	cost     money.Micros
	tokens   int64
	requests int64
}

// New builds a Spender.
func New(c Config) *Spender {
	if c.Ledger == nil {
		c.Ledger = NewMemory()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Currency == "" {
		c.Currency = "USD"
	}
	s := &Spender{c: c, keys: map[string][]*Budget{}, teams: map[string][]*Budget{}}
	s.global = s.resolve(c.Global)
	for k, bs := range c.Keys {
		s.keys[k] = s.resolve(bs)
	}
	for t, bs := range c.Teams {
		s.teams[t] = s.resolve(bs)
	}
	return s
}

func (s *Spender) resolve(bs []Budget) []*Budget {
	out := make([]*Budget, len(bs))
	for i := range bs {
		b := bs[i]
		b.init()
		s.tokened = s.tokened || b.Tokens
		out[i] = &b
	}
	return out
}

// Team returns the team of the key named key ("" for none).
func (s *Spender) Team(key string) string {
	if s == nil {
		return ""
	}
	return s.c.TeamOf[key]
}

// Budgeted reports whether any budget applies to the key's requests: they then need their input
// counted before they are sent, for the reservation.
func (s *Spender) Budgeted(key string) bool {
	if s == nil {
		return false
	}
	return len(s.global) > 0 || len(s.keys[key]) > 0 || len(s.teams[s.c.TeamOf[key]]) > 0
}

// Cost is what a request of model served by engine cost, for usage u and engine time d; false
// when the model has no price.
func (s *Spender) Cost(model, engine string, u llm.Usage, d time.Duration) (money.Micros, bool) {
	if s == nil {
		return 0, false
	}
	return s.c.Prices.Cost(model, engine, u, d)
}

// CostHeader reports whether answers carry their cost in X-Layer0-Cost.
func (s *Spender) CostHeader() bool { return s != nil && s.c.Header }

// Currency names the money.
func (s *Spender) Currency() string { return s.c.Currency }

// budgetsOf lists every budget a key's requests fall under: the key's, its team's, the global.
func (s *Spender) budgetsOf(key string) []*Budget {
	var out []*Budget
	out = append(out, s.keys[key]...)
	out = append(out, s.teams[s.c.TeamOf[key]]...)
	return append(out, s.global...)
}

// Hold is a request's reservation against its budgets, until Settle.
type Hold struct {
	s   *Spender
	key string
	id  uint64
	cs  []charge
}

// Reserve reserves the worst case of a request of key for name (as resolved), of input prompt
// tokens and at most maxTokens output tokens (0: the default), against every budget of the key,
// its team and the global scope, all or none. It refuses with a 429 *apierr.Error naming the
// budget that does not fit, or a 503 when the shared ledger cannot answer. The Hold is never nil
// without an error; Settle it when the request ends.
func (s *Spender) Reserve(ctx context.Context, key, name string, input, maxTokens int) (*Hold, error) {
	h := &Hold{s: s, key: key}
	bs := s.budgetsOf(key)
	if len(bs) == 0 {
		return h, nil
	}
	if maxTokens <= 0 {
		maxTokens = s.c.DefaultMaxTokens
	}
	worst := s.worst(name, input, maxTokens)
	now := s.c.Now()
	h.cs = make([]charge, len(bs))
	for i, b := range bs {
		amount := int64(worst)
		if b.Tokens {
			amount = int64(input) + int64(maxTokens)
		}
		h.cs[i] = charge{c: b.cellAt(now), amount: amount}
	}
	id, refused, use, err := s.c.Ledger.reserve(ctx, h.cs)
	if err != nil {
		return nil, unavailable(err)
	}
	if refused >= 0 {
		return nil, s.refuse(h.cs[refused], use, now)
	}
	h.id = id
	return h, nil
}

// worst is the dearest a request can cost on any model that may serve name.
func (s *Spender) worst(name string, input, maxTokens int) money.Micros {
	models, ok := s.c.Reach[name]
	if !ok {
		models = []string{name}
	}
	var w money.Micros
	for _, m := range models {
		w = max(w, s.c.Prices.worst(m, input, maxTokens, s.c.MaxTime[m]))
	}
	return w
}

// Settle ends the hold: the request cost cost and used tokens (input, cache and output); each
// budget's reservation is replaced by what was used, the rest returned. Call it once; a nil
// Hold is a no-op.
func (h *Hold) Settle(cost money.Micros, tokens int64) {
	if h == nil || h.s == nil {
		return
	}
	h.s.count(h.key, cost, tokens)
	if len(h.cs) == 0 {
		return
	}
	actual := make([]int64, len(h.cs))
	for i, ch := range h.cs {
		actual[i] = int64(cost)
		if ch.c.b.Tokens {
			actual[i] = tokens
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h.s.c.Ledger.settle(ctx, h.id, h.cs, actual)
	h.cs = nil
}

// Tokens is what a budget in tokens counts of u: input, cache writes and reads, and output.
func Tokens(u llm.Usage) int64 {
	return int64(u.InputTokens) + int64(u.OutputTokens) + int64(u.CacheCreationInputTokens) + int64(u.CacheReadInputTokens)
}

func (s *Spender) count(key string, cost money.Micros, tokens int64) {
	v, ok := s.totals.Load(key)
	if !ok {
		v, _ = s.totals.LoadOrStore(key, &total{})
	}
	t := v.(*total)
	t.mu.Lock()
	t.cost += cost
	t.tokens += tokens
	t.requests++
	t.mu.Unlock()
}

// refuse answers a request whose worst case does not fit ch's budget, which holds use.
func (s *Spender) refuse(ch charge, use Use, now time.Time) *apierr.Error {
	b := ch.c.b
	left := max(b.Limit-use.Spent-use.Reserved, 0)
	amount := func(n int64) string {
		if b.Tokens {
			return strconv.FormatInt(n, 10) + " tokens"
		}
		return money.Micros(n).String() + " " + s.c.Currency
	}
	retry := max(ch.c.reset.Sub(now), time.Second)
	msg := fmt.Sprintf("budget exceeded: %s has %s left (%s reserved by requests in flight); this request may cost up to %s",
		b.Describe(s.c.Currency), amount(left), amount(use.Reserved), amount(ch.amount))
	h := http.Header{}
	h.Set("X-Layer0-Budget", b.ID())
	if ch.amount > b.Limit {
		msg += ", more than the whole budget: lower max_tokens or the prompt"
		h.Set("X-Should-Retry", "false")
		return &apierr.Error{Kind: apierr.RateLimit, Code: "BUDGET_EXCEEDED", Limit: "insufficient_quota", Message: msg, Header: h}
	}
	if b.Period != "" {
		msg += "; it resets at " + ch.c.reset.Format(time.RFC3339)
	} else {
		msg += "; spending leaves the window from " + ch.c.reset.Format(time.RFC3339) + " on"
	}
	h.Set("X-Layer0-Budget-Reset", ch.c.reset.UTC().Format(time.RFC3339))
	if retry > time.Minute {
		// The official SDKs retry a 429 by themselves; a budget that resets this late is not
		// worth their retries.
		h.Set("X-Should-Retry", "false")
	}
	return &apierr.Error{Kind: apierr.RateLimit, Code: "BUDGET_EXCEEDED", Limit: "insufficient_quota", Message: msg,
		RetryAfter: retry, Header: h}
}

// unavailable answers a request the shared ledger could not reserve for: 503, to be retried.
func unavailable(err error) *apierr.Error {
	return &apierr.Error{Kind: apierr.Unavailable, Message: "budget ledger unavailable", RetryAfter: time.Second,
		Cause: fmt.Errorf("spend: ledger: %w", err)}
}

// sortedNames returns m's keys in order.
func sortedNames[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
