package route

import (
	"sync"
	"time"
)

// BudgetConfig bounds retries: over the last Window, retries may be at most MinRetries plus
// Ratio of the requests. A retry storm against a failing pool is then capped at a fixed fraction
// of the load instead of multiplying it (the same idea as Envoy's and Finagle's retry budgets).
type BudgetConfig struct {
	// Ratio is the share of requests that may be retried.
	Ratio float64
	// MinRetries is how many retries the window allows whatever the traffic, so a quiet pool can
	// still retry.
	MinRetries int
	// Window is the span counted.
	Window time.Duration
}

// Budget is a retry budget with an injected clock, counted in ten buckets across its window.
// Safe for concurrent use.
type Budget struct {
	c   BudgetConfig
	now func() time.Time

	mu      sync.Mutex
	buckets [windowBuckets]budgetBucket
}

type budgetBucket struct {
	epoch             int64
	requests, retries int
}

// NewBudget returns a budget of c, whose fields are taken as given (internal/config fills in
// routing.retry_budget's defaults), reading the clock now (nil means time.Now).
func NewBudget(c BudgetConfig, now func() time.Time) *Budget {
	if now == nil {
		now = time.Now
	}
	return &Budget{c: c, now: now}
}

// Request counts a first attempt.
func (b *Budget) Request() { b.request(b.now()) }

// Retry reports whether a retry fits the budget, and counts it if it does.
func (b *Budget) Retry() bool { return b.retry(b.now()) }

// request and retry take the time from a caller that has read the clock already (time.Now is a
// third of a Plan's cost on some machines).
func (b *Budget) request(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bucketLocked(now).requests++
}

func (b *Budget) retry(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	cur := b.slot(now)
	requests, retries := 0, 0
	for _, bk := range b.buckets {
		if bk.epoch > cur-windowBuckets && bk.epoch <= cur {
			requests += bk.requests
			retries += bk.retries
		}
	}
	if float64(retries+1) > float64(b.c.MinRetries)+b.c.Ratio*float64(requests) {
		return false
	}
	b.bucketLocked(now).retries++
	return true
}

func (b *Budget) slot(now time.Time) int64 {
	return now.UnixNano() / max(int64(b.c.Window)/windowBuckets, 1)
}

func (b *Budget) bucketLocked(now time.Time) *budgetBucket {
	s := b.slot(now)
	bk := &b.buckets[bucketIndex(s)]
	if bk.epoch != s {
		*bk = budgetBucket{epoch: s}
	}
	return bk
}

// bucketIndex maps a slot number to its bucket, also for times before 1970.
func bucketIndex(s int64) int {
	return int((s%windowBuckets + windowBuckets) % windowBuckets)
}
