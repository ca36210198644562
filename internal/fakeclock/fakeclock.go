// Package fakeclock is the injected clock of the tests: time that moves only when a test says
// so, safe for the goroutines of the code under test. Packages take a func() time.Time; tests
// pass (*Clock).Now.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a manual clock. Use New; it is safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a clock standing at t.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
