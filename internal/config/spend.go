package config

import (
	"fmt"
	"time"

	"github.com/layer0ai/layer0/internal/money"
)

// Price is what a model's tokens cost, in money per million tokens (money.Micros: exact
// micro-units of the currency), or what a self-hosted engine's time costs per second.
type Price struct {
	// Input is the price of a million input tokens not read from the prompt cache.
	Input money.Micros `yaml:"input"`
	// Output is the price of a million output tokens.
	Output money.Micros `yaml:"output"`
	// CacheWrite is the price of a million input tokens written to the prompt cache. Default:
	// Input.
	CacheWrite *money.Micros `yaml:"cache_write"`
	// CacheRead is the price of a million input tokens read from the prompt cache. Default:
	// Input.
	CacheRead *money.Micros `yaml:"cache_read"`
	// GPUSecond, when set, prices the request by the engine's time serving it instead: that time
	// in seconds × this. The token prices are then not used.
	GPUSecond money.Micros `yaml:"gpu_second"`
}

// ModelPrice is one model's price, and the prices of its engines that cost otherwise.
type ModelPrice struct {
	Price `yaml:",inline"`
	// Engines overrides the price for requests a given engine (replica) served. Default none.
	Engines map[string]Price `yaml:"engines"`
}

// Budget is one limit on what a scope (a key, a team, every request) may spend: money or tokens,
// per calendar period or over a rolling window.
type Budget struct {
	// Amount is the money the scope may spend. One of Amount and Tokens is required.
	Amount money.Micros `yaml:"amount"`
	// Tokens is the tokens (input, cache reads and writes, output) the scope may use.
	Tokens int64 `yaml:"tokens"`
	// Period is day, week (from Monday) or month, in spend.time_zone. One of Period and Window is
	// required.
	Period string `yaml:"period"`
	// Window is a rolling window's length (1h, 24h), at least a minute.
	Window time.Duration `yaml:"window"`
}

// Team is a group of keys (keys[].team) whose spending is counted together.
type Team struct {
	// Budgets limit what the team's keys spend together. Default none.
	Budgets []Budget `yaml:"budgets"`
}

// Spend configures what requests cost and the global budgets (docs/spend.md).
type Spend struct {
	// TimeZone is the IANA zone in which days, weeks and months begin. Default UTC.
	TimeZone string `yaml:"time_zone"`
	// Header sends each answer's cost in X-Layer0-Cost. Default false.
	Header bool `yaml:"header"`
	// Currency names the money in messages and the spend report. Default USD.
	Currency string `yaml:"currency"`
	// DefaultMaxTokens is the output a request that sets no max_tokens is reserved for.
	// Default 4096.
	DefaultMaxTokens int `yaml:"default_max_tokens"`
	// Budgets limit what all requests spend together (across every replica on a shared store).
	Budgets []Budget `yaml:"budgets"`
}

// Budget periods.
const (
	PeriodDay   = "day"
	PeriodWeek  = "week"
	PeriodMonth = "month"
)

// Spend defaults.
const (
	DefaultSpendCurrency  = "USD"
	DefaultSpendMaxTokens = 4096
)

func (s *Spend) setDefaults() {
	setDefault(&s.TimeZone, "UTC")
	setDefault(&s.Currency, DefaultSpendCurrency)
	setDefault(&s.DefaultMaxTokens, DefaultSpendMaxTokens)
}

// validateSpend checks prices, teams and every budget.
func (c *Config) validateSpend(errs *Errors) {
	if _, err := time.LoadLocation(c.Spend.TimeZone); err != nil {
		errs.add("spend.time_zone", "%v", err)
	}
	notNegative(errs, "spend.default_max_tokens", c.Spend.DefaultMaxTokens)
	validateBudgets("spend.budgets", c.Spend.Budgets, errs)
	for _, name := range sortedKeys(c.Teams) {
		if name == "" {
			errs.add("teams", "a team needs a name")
		}
		validateBudgets("teams."+name+".budgets", c.Teams[name].Budgets, errs)
	}
	for i, k := range c.Keys {
		p := fmt.Sprintf("keys[%d]", i)
		if k.Team != "" {
			if _, ok := c.Teams[k.Team]; !ok {
				errs.add(p+".team", "unknown team %q (declare it under teams)", k.Team)
			}
		}
		validateBudgets(p+".budgets", k.Budgets, errs)
	}
	for _, id := range sortedKeys(c.Prices) {
		p := "prices." + id
		if _, ok := c.Models[id]; !ok {
			errs.add(p, "unknown model %q", id)
		}
		mp := c.Prices[id]
		mp.Price.validate(p, errs)
		for _, e := range sortedKeys(mp.Engines) {
			if _, ok := c.Engines[e]; !ok {
				errs.add(p+".engines."+e, "unknown engine %q", e)
			}
			mp.Engines[e].validate(p+".engines."+e, errs)
		}
	}
}

func (p Price) validate(path string, errs *Errors) {
	for _, v := range []struct {
		name string
		m    money.Micros
	}{{"input", p.Input}, {"output", p.Output}, {"gpu_second", p.GPUSecond}} {
		notNegative(errs, path+"."+v.name, v.m)
	}
	for _, v := range []struct {
		name string
		m    *money.Micros
	}{{"cache_write", p.CacheWrite}, {"cache_read", p.CacheRead}} {
		if v.m != nil && *v.m < 0 {
			errs.add(path+"."+v.name, "must not be negative")
		}
	}
}

func validateBudgets(path string, bs []Budget, errs *Errors) {
	for i, b := range bs {
		p := fmt.Sprintf("%s[%d]", path, i)
		if (b.Amount != 0) == (b.Tokens != 0) {
			errs.add(p, "give one of amount and tokens")
		}
		if b.Amount < 0 || b.Tokens < 0 {
			errs.add(p, "must not be negative")
		}
		switch {
		case b.Period != "" && b.Window != 0:
			errs.add(p, "give one of period and window")
		case b.Period == "" && b.Window == 0:
			errs.add(p, "give a period (day, week, month) or a window")
		case b.Period != "" && b.Period != PeriodDay && b.Period != PeriodWeek && b.Period != PeriodMonth:
			errs.add(p+".period", "%q: want day, week or month", b.Period)
		case b.Period == "" && b.Window < time.Minute:
			errs.add(p+".window", "at least 1m")
		}
	}
}
