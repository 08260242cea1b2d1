// Package dispatch turns due messages into running jobs: it claims a
// pending job in the store, offers it to workers in stable order until one
// accepts, and otherwise keeps it pending with a later next_dispatch_at
// until the dispatch deadline, when it fails with a capacity: error.
package dispatch

import (
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Action is what to do with a due message for a job in a given state.
type Action int

// Actions.
const (
	// Drop acknowledges the message: the job is gone, finished or running.
	Drop Action = iota + 1
	// Wait redelivers the message after Plan.Delay.
	Wait
	// FailCapacity fails the job: its dispatch deadline passed.
	FailCapacity
	// Offer claims the job and offers it to workers.
	Offer
)

// Plan is the decision for one due message.
type Plan struct {
	Action Action
	Delay  time.Duration
}

// earlyTolerance lets a message that arrives a little before the job's
// next_dispatch_at proceed instead of waiting a few milliseconds.
const earlyTolerance = 25 * time.Millisecond

// Decide is the pure part of handling a due message.
func Decide(j contracts.Job, now time.Time) Plan {
	if j.State != contracts.StatePending {
		return Plan{Action: Drop}
	}
	if !j.DispatchDeadline.IsZero() && !now.Before(j.DispatchDeadline) {
		return Plan{Action: FailCapacity}
	}
	if j.NextDispatchAt != nil && j.NextDispatchAt.Sub(now) > earlyTolerance {
		return Plan{Action: Wait, Delay: j.NextDispatchAt.Sub(now)}
	}
	if j.ClaimUntil != nil && j.ClaimUntil.After(now) {
		return Plan{Action: Wait, Delay: j.ClaimUntil.Sub(now) + earlyTolerance}
	}
	return Plan{Action: Offer}
}

// NextAttemptAt is when an overflowed job is offered again: after the retry
// interval plus jitter (a fraction in [0,1) of a quarter interval), but no
// later than its dispatch deadline, so the deadline is enforced on time.
func NextAttemptAt(now time.Time, retry time.Duration, jitter float64, deadline time.Time) time.Time {
	next := now.Add(retry + time.Duration(jitter*float64(retry)/4))
	if !deadline.IsZero() && next.After(deadline) {
		return deadline
	}
	return next
}
