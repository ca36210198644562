package spend

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/layer0ai/layer0/internal/config"
)

// FromConfig builds the Spender of a configuration on ledger, or returns nil when the
// configuration prices nothing and has no budget (requests then cost nothing, and nothing is
// reserved).
func FromConfig(cfg *config.Config, ledger Ledger) (*Spender, error) {
	if !Configured(cfg) {
		return nil, nil
	}
	loc, err := time.LoadLocation(cfg.Spend.TimeZone)
	if err != nil {
		return nil, fmt.Errorf("spend: time zone: %w", err)
	}
	c := Config{Keys: map[string][]Budget{}, Teams: map[string][]Budget{}, TeamOf: map[string]string{},
		Reach: map[string][]string{}, MaxTime: map[string]time.Duration{}, DefaultMaxTokens: cfg.Spend.DefaultMaxTokens,
		Currency: cfg.Spend.Currency, Header: cfg.Spend.Header, Ledger: ledger}
	models := map[string]ModelPrice{}
	for id, mp := range cfg.Prices {
		m := ModelPrice{Price: price(mp.Price), Engines: map[string]Price{}}
		for e, p := range mp.Engines {
			m.Engines[e] = price(p)
		}
		models[id] = m
	}
	c.Prices = NewPrices(models)
	c.Global = budgets(ScopeGlobal, "", cfg.Spend.Budgets, loc)
	for name, t := range cfg.Teams {
		c.Teams[name] = budgets(ScopeTeam, name, t.Budgets, loc)
	}
	for _, k := range cfg.Keys {
		c.KeyNames = append(c.KeyNames, k.Name)
		c.Keys[k.Name] = budgets(ScopeKey, k.Name, k.Budgets, loc)
		if k.Team != "" {
			c.TeamOf[k.Name] = k.Team
		}
	}
	for id, m := range cfg.Models {
		var longest time.Duration
		for _, e := range m.Engines {
			longest = max(longest, cfg.Engines[e].Timeouts.Total)
		}
		c.MaxTime[id] = longest
		c.Reach[id] = reach(cfg, id, nil)
	}
	for name, s := range cfg.Splits {
		var all []string
		for _, t := range s.Targets {
			all = reach(cfg, t.Model, all)
		}
		c.Reach[name] = all
	}
	for alias, target := range cfg.Aliases {
		c.Reach[alias] = c.Reach[target]
	}
	return New(c), nil
}

// Configured reports whether cfg prices any model or sets any budget.
func Configured(cfg *config.Config) bool {
	if len(cfg.Prices) > 0 || len(cfg.Spend.Budgets) > 0 {
		return true
	}
	for _, t := range cfg.Teams {
		if len(t.Budgets) > 0 {
			return true
		}
	}
	for _, k := range cfg.Keys {
		if len(k.Budgets) > 0 {
			return true
		}
	}
	return false
}

// reach appends model and its fallbacks, transitively, each once, to seen.
func reach(cfg *config.Config, model string, seen []string) []string {
	for _, s := range seen {
		if s == model {
			return seen
		}
	}
	seen = append(seen, model)
	for _, f := range cfg.Models[model].Fallback {
		seen = reach(cfg, f, seen)
	}
	return seen
}

func price(p config.Price) Price {
	out := Price{Input: p.Input, Output: p.Output, CacheWrite: p.Input, CacheRead: p.Input, GPUSecond: p.GPUSecond}
	if p.CacheWrite != nil {
		out.CacheWrite = *p.CacheWrite
	}
	if p.CacheRead != nil {
		out.CacheRead = *p.CacheRead
	}
	return out
}

func budgets(scope Scope, owner string, bs []config.Budget, loc *time.Location) []Budget {
	out := make([]Budget, 0, len(bs))
	for _, b := range bs {
		nb := Budget{Scope: scope, Owner: owner, Limit: int64(b.Amount), Period: b.Period, Window: b.Window, Location: loc}
		if b.Tokens > 0 {
			nb.Tokens, nb.Limit = true, b.Tokens
		}
		out = append(out, nb)
	}
	return out
}

// Shared is the shared store a configuration's ledger uses: the rate limits' connection to Redis
// and its circuit. The zero value is no shared store (the ledger is in memory).
type Shared struct {
	Circuit Circuit
}

// NewLedger returns the ledger of a configuration whose store is st: on sh's Redis, sharing its
// connection and circuit, or in memory when sh has none. A reload that keeps the store keeps
// the ledger (its counters, reservations and lease); Close it once no configuration uses it.
func NewLedger(sh Shared, st config.Store, logger *slog.Logger) (Ledger, error) {
	if sh.Circuit == nil {
		return NewMemory(), nil
	}
	return NewRedis(RedisConfig{Circuit: sh.Circuit, Deny: st.OnError == config.OnErrorDeny, LeaseTTL: st.LeaseTTL, Logger: logger})
}

// Close closes l when it is a Redis ledger (its lease is no longer renewed).
func Close(l Ledger) {
	if r, ok := l.(*Redis); ok {
		_ = r.Close()
	}
}
