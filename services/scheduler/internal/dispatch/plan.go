// Package dispatch turns ready jobs into running jobs. The store is the
// ready queue: the dispatcher reserves the free worker slots the workers
// announced, in stable worker order, and claims the best ready jobs
// (priority, tenant fairness, concurrency keys, run_at and retry backoff
// are the store's ready order) into them, each running on its slot from
// the claim, then offers each job to its slot's worker. A job its worker
// does not take goes back to pending; a job no worker has room for simply
// stays pending in the store until a slot frees; a sweep fails jobs whose
// dispatch deadline passes, with a capacity: error. Due messages are the
// jobs' durable wake-ups.
package dispatch

import (
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Action is what to do with a due message for a job in a given state.
type Action int

// Actions.
const (
	// Drop acknowledges the message: the job is gone, finished, running,
	// or being offered under a live claim.
	Drop Action = iota + 1
	// Wait redelivers the message after Plan.Delay: the job is not due yet.
	Wait
	// FailCapacity fails the job: its dispatch deadline passed.
	FailCapacity
	// Offer wakes the dispatcher: the job is ready.
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
	if j.State != contracts.StatePending || j.IsParent() {
		return Plan{Action: Drop} // a fan-out parent is never offered: its children are
	}
	if j.ClaimUntil != nil && j.ClaimUntil.After(now) {
		return Plan{Action: Drop} // being offered; the deadline sweep sees it if the claim lapses
	}
	if !j.DispatchDeadline.IsZero() && !now.Before(j.DispatchDeadline) {
		return Plan{Action: FailCapacity}
	}
	if j.NextDispatchAt != nil && j.NextDispatchAt.Sub(now) > earlyTolerance {
		return Plan{Action: Wait, Delay: j.NextDispatchAt.Sub(now)}
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
