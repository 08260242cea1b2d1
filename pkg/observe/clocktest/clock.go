// Package clocktest is the fake clock of Sluice's tests: every component
// takes its clock as a func() time.Time, and a test hands it Clock.Now and
// moves time with Advance instead of sleeping.
package clocktest

import (
	"sync"
	"time"
)

// Epoch is where a New clock starts: a fixed, round instant, so that test
// output is the same on every run.
var Epoch = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// Clock is a fake clock, safe for concurrent use. Its time moves only when
// the test says so.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// New returns a clock standing at Epoch.
func New() *Clock { return At(Epoch) }

// At returns a clock standing at t.
func At(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time; pass the method value (c.Now) where a
// component takes a func() time.Time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (backward for a negative d) and
// returns the new time.
func (c *Clock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// Set puts the clock at t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}
