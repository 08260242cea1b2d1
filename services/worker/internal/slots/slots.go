// Package slots is the worker's backpressure: a fixed number of job slots
// taken without ever blocking. A worker takes a slot before it answers
// "accepted" and gives it back exactly once when the handler is done; when
// no slot is free it answers "busy" at once instead of waiting or queueing.
package slots

import "sync"

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
	mu    sync.Mutex
	used  int
	// changes counts every acquire and release, so that a reading of the
	// load can be ordered against another (see Load).
	changes uint64
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if !Admit(s.used, s.limit) {
		return false
	}
	s.used++
	s.changes++
	return true
}

// Release gives back a slot taken by TryAcquire. Releasing more slots than
// were taken is a bug in the caller and panics.
func (s *Slots) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used == 0 {
		panic("slots: release without a matching acquire")
	}
	s.used--
	s.changes++
}

// InFlight returns the number of slots in use.
func (s *Slots) InFlight() int {
	n, _ := s.Load()
	return n
}

// Load returns the number of slots in use and how many acquires and
// releases led to it, read together: of two readings, the one with more
// changes is the newer.
func (s *Slots) Load() (inFlight int, changes uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used, s.changes
}

// Capacity returns the limit; 0 means no limit.
func (s *Slots) Capacity() int { return s.limit }
