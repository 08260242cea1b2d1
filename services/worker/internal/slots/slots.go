// Package slots is the worker's backpressure: a fixed number of job slots
// taken without ever blocking. A worker takes a slot before it answers
// "accepted" and gives it back exactly once when the handler is done; when
// no slot is free it answers "busy" at once instead of waiting or queueing.
package slots

import "sync/atomic"

// Admit is the backpressure decision: whether one more job may start when
// inFlight jobs already run under limit. A limit of 0 (or less) means no
// limit.
func Admit(inFlight, limit int) bool {
	return limit <= 0 || inFlight < limit
}

// Slots is a non-blocking counting semaphore. The zero value is not usable;
// build one with New. It is safe for concurrent use.
type Slots struct {
	limit int
	used  atomic.Int64
}

// New returns slots for limit concurrent jobs; 0 means no limit.
// A negative limit is treated as 0.
func New(limit int) *Slots {
	if limit < 0 {
		limit = 0
	}
	return &Slots{limit: limit}
}

// TryAcquire takes a slot if one is free and reports whether it did. It
// never waits.
func (s *Slots) TryAcquire() bool {
	for {
		n := s.used.Load()
		if !Admit(int(n), s.limit) {
			return false
		}
		if s.used.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Release gives back a slot taken by TryAcquire. Releasing more slots than
// were taken is a bug in the caller and panics.
func (s *Slots) Release() {
	if s.used.Add(-1) < 0 {
		panic("slots: release without a matching acquire")
	}
}

// InFlight returns the number of slots in use.
func (s *Slots) InFlight() int { return int(s.used.Load()) }

// Capacity returns the limit; 0 means no limit.
func (s *Slots) Capacity() int { return s.limit }
