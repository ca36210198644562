package spend

import (
	"fmt"
	"strconv"
	"time"

	"github.com/layer0ai/layer0/internal/money"
)

// Scope says whose spending a budget limits.
type Scope string

// Scopes of a budget.
const (
	ScopeKey    Scope = "key"
	ScopeTeam   Scope = "team"
	ScopeGlobal Scope = "global"
)

// Periods of a calendar budget.
const (
	Day   = "day"
	Week  = "week"
	Month = "month"
)

// windowBuckets is how many buckets a rolling window is counted in: spending leaves the window
// one bucket (window ÷ windowBuckets) at a time.
const windowBuckets = 60

// Budget is one limit on a scope's spending: Limit micro-units of money, or Limit tokens when
// Tokens is set, per calendar Period (in Location) or over a rolling Window.
type Budget struct {
	Scope Scope
	// Owner is the key's or team's name; "" for the global scope.
	Owner  string
	Tokens bool
	Limit  int64
	// Period is Day, Week (from Monday) or Month; "" for a rolling Window.
	Period   string
	Window   time.Duration
	Location *time.Location

	id string
}

func (b *Budget) init() {
	unit := "money"
	if b.Tokens {
		unit = "tokens"
	}
	span := b.Period
	if span == "" {
		span = "window/" + b.Window.String()
	}
	owner := ""
	if b.Scope != ScopeGlobal {
		owner = "/" + strconv.Quote(b.Owner)
	}
	// A changed limit or span starts afresh, as a changed rate limit does.
	b.id = fmt.Sprintf("%s%s/%s/%d/%s", b.Scope, owner, unit, b.Limit, span)
	if b.Location == nil {
		b.Location = time.UTC
	}
}

// ID names the budget: its scope, owner, unit, limit and span.
func (b *Budget) ID() string { return b.id }

// Describe says the budget in a client's words: "this API key's budget of 5.000000 USD per day".
func (b *Budget) Describe(currency string) string {
	whose := "the server's budget (shared by all keys)"
	switch b.Scope {
	case ScopeKey:
		whose = "this API key's budget"
	case ScopeTeam:
		whose = "the budget of team " + strconv.Quote(b.Owner)
	}
	what := money.Micros(b.Limit).String() + " " + currency
	if b.Tokens {
		what = strconv.FormatInt(b.Limit, 10) + " tokens"
	}
	if b.Period != "" {
		return whose + " of " + what + " per " + b.Period
	}
	return whose + " of " + what + " per rolling " + b.Window.String()
}

// cell is where a budget counts at an instant: the calendar period it is in, or the window's
// current bucket.
type cell struct {
	b *Budget
	// id names the counter: the budget's id, and for a calendar budget the period's first day.
	id string
	// bucket is the rolling window's current bucket (Unix time ÷ the bucket width); 0 for a
	// calendar budget.
	bucket int64
	// reset is when the counter is empty again: the next period's start, or, for a window, when
	// the current oldest bucket leaves it (a lower bound: spending leaves bucket by bucket).
	reset time.Time
	// ttl is how long the counter must be kept from now.
	ttl time.Duration
}

// width is a rolling window's bucket width, at least a second.
func (b *Budget) width() time.Duration {
	return max(b.Window/windowBuckets, time.Second)
}

// cellAt returns the counter the budget uses at now.
func (b *Budget) cellAt(now time.Time) cell {
	if b.Period == "" {
		w := b.width()
		n := now.UnixNano() / int64(w)
		return cell{b: b, id: b.id, bucket: n, reset: time.Unix(0, (n+1)*int64(w)), ttl: b.Window + w}
	}
	start, next := b.bounds(now)
	return cell{b: b, id: b.id + "@" + start.Format("2006-01-02"), reset: next, ttl: next.Sub(now) + time.Hour}
}

// bounds returns the calendar period holding now: its start and the next one's, in the
// budget's time zone.
func (b *Budget) bounds(now time.Time) (start, next time.Time) {
	t := now.In(b.Location)
	y, m, d := t.Date()
	switch b.Period {
	case Month:
		start = time.Date(y, m, 1, 0, 0, 0, 0, b.Location)
		return start, start.AddDate(0, 1, 0)
	case Week:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		start = time.Date(y, m, d-back, 0, 0, 0, 0, b.Location)
		return start, start.AddDate(0, 0, 7)
	}
	start = time.Date(y, m, d, 0, 0, 0, 0, b.Location)
	return start, start.AddDate(0, 0, 1)
}

// inWindow reports whether bucket k is still in the window of a budget whose current bucket is
// now.
func inWindow(k, now int64) bool { return k > now-windowBuckets }
