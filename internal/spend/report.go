package spend

import (
	"context"
	"strconv"
	"time"

	"github.com/layer0ai/layer0/internal/money"
)

// Report is what each key and team spent and has left: every budget's counter as the ledger
// holds it (shared by every replica on Redis), and this process's own totals since it started.
type Report struct {
	Currency string        `json:"currency"`
	Global   []BudgetState `json:"global,omitempty"`
	Teams    []ScopeReport `json:"teams,omitempty"`
	Keys     []ScopeReport `json:"keys"`
}

// ScopeReport is one key's or team's spending.
type ScopeReport struct {
	Name string `json:"name"`
	// Team is a key's team.
	Team string `json:"team,omitempty"`
	// Cost, Tokens and Requests are this replica's totals since it started (a key's only).
	Cost     string        `json:"cost,omitempty"`
	Tokens   int64         `json:"tokens,omitempty"`
	Requests int64         `json:"requests,omitempty"`
	Budgets  []BudgetState `json:"budgets,omitempty"`
}

// BudgetState is one budget at an instant. Amounts are decimals of the currency for a budget in
// money, token counts for one in tokens.
type BudgetState struct {
	Budget   string    `json:"budget"`
	Unit     string    `json:"unit"` // "money" or "tokens"
	Limit    string    `json:"limit"`
	Spent    string    `json:"spent"`
	Reserved string    `json:"reserved"`
	Left     string    `json:"left"`
	Period   string    `json:"period,omitempty"`
	Window   string    `json:"window,omitempty"`
	Resets   time.Time `json:"resets"`
}

// Report reads every budget's counter (one round trip on Redis) and this process's totals.
func (s *Spender) Report(ctx context.Context) (Report, error) {
	r := Report{Currency: "USD", Keys: []ScopeReport{}}
	if s == nil {
		return r, nil
	}
	r.Currency = s.c.Currency
	now := s.c.Now()
	var all []*Budget
	all = append(all, s.global...)
	for _, t := range sortedNames(s.teams) {
		all = append(all, s.teams[t]...)
	}
	for _, k := range s.c.KeyNames {
		all = append(all, s.keys[k]...)
	}
	cells := make([]cell, len(all))
	for i, b := range all {
		cells[i] = b.cellAt(now)
	}
	var uses []Use
	if len(cells) > 0 {
		var err error
		if uses, err = s.c.Ledger.used(ctx, cells); err != nil {
			return r, err
		}
	}
	states := map[*Budget]BudgetState{}
	for i, b := range all {
		states[b] = s.state(b, cells[i], uses[i])
	}
	list := func(bs []*Budget) []BudgetState {
		var out []BudgetState
		for _, b := range bs {
			out = append(out, states[b])
		}
		return out
	}
	r.Global = list(s.global)
	for _, t := range sortedNames(s.teams) {
		r.Teams = append(r.Teams, ScopeReport{Name: t, Budgets: list(s.teams[t])})
	}
	for _, k := range s.c.KeyNames {
		sr := ScopeReport{Name: k, Team: s.c.TeamOf[k], Budgets: list(s.keys[k]), Cost: money.Micros(0).String()}
		if v, ok := s.totals.Load(k); ok {
			t := v.(*total)
			t.mu.Lock()
			sr.Cost, sr.Tokens, sr.Requests = t.cost.String(), t.tokens, t.requests
			t.mu.Unlock()
		}
		r.Keys = append(r.Keys, sr)
	}
	return r, nil
}

func (s *Spender) state(b *Budget, c cell, u Use) BudgetState {
	f := func(n int64) string {
		if b.Tokens {
			return strconv.FormatInt(n, 10)
		}
		return money.Micros(n).String()
	}
	st := BudgetState{Budget: b.ID(), Unit: "money", Limit: f(b.Limit), Spent: f(u.Spent), Reserved: f(u.Reserved),
		Left: f(max(b.Limit-u.Spent-u.Reserved, 0)), Period: b.Period, Resets: c.reset.UTC()}
	if b.Tokens {
		st.Unit = "tokens"
	}
	if b.Period == "" {
		st.Window = b.Window.String()
	}
	return st
}
