package store

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// The stale-requeue rule. The reaper finds running jobs whose worker went
// quiet (stale) or whose run passed the hard maximum runtime (timeout), and
// publishes a requeue event for each (StaleRule.Reason); the scheduler
// applies the event only while the job is still where the event saw it and
// its reason still holds, as DecideRequeue says. A pending job's event
// (its due message was lost) is dispatched again.

// StaleRule holds the limits that make a running job the reaper's.
type StaleRule struct {
	// Threshold is the heartbeat age that makes a running job stale.
	Threshold time.Duration
	// MaxRuntime is the hard limit of one run; 0 = none.
	MaxRuntime time.Duration
}

// Holds reports whether reason still applies to job at now: a running job
// over the maximum runtime (timeout) or past the stale threshold (stale).
// Every other reason or state is false.
func (r StaleRule) Holds(job contracts.Job, reason contracts.RequeueReason, now time.Time) bool {
	if job.State != contracts.StateRunning {
		return false
	}
	switch reason {
	case contracts.ReasonTimeout:
		return r.MaxRuntime > 0 && job.StartedAt != nil && now.Sub(*job.StartedAt) >= r.MaxRuntime
	case contracts.ReasonStale:
		return job.Stale(now, r.Threshold)
	}
	return false
}

// Reason says why a job the reaper found must be requeued at now, or ""
// when it must not: timeout before stale; only running jobs are ever the
// reaper's.
func (r StaleRule) Reason(job contracts.Job, now time.Time) contracts.RequeueReason {
	for _, reason := range []contracts.RequeueReason{contracts.ReasonTimeout, contracts.ReasonStale} {
		if r.Holds(job, reason, now) {
			return reason
		}
	}
	return ""
}

// RequeueAction is what a requeue event does to its job.
type RequeueAction int

const (
	// RequeueIgnore: the job moved on, its reason no longer holds, or a
	// scheduler is offering it right now; nothing changes.
	RequeueIgnore RequeueAction = iota
	// RequeueRedeliver: a pending job whose due message was lost is
	// dispatched again; the store is not written.
	RequeueRedeliver
	// RequeueRunAgain: the run is over and the job runs again: Change
	// takes it back to pending under the next claim.
	RequeueRunAgain
	// RequeueEnd: the run is over and the job ends (failed, or cancelled
	// when a user asked): Change ends it.
	RequeueEnd
)

// Requeue is the change set of a requeue event: what to do and, for
// RequeueRunAgain and RequeueEnd, the change to apply as a compare-and-set
// on the job as read.
type Requeue struct {
	Action RequeueAction
	Change Change
}

// DecideRequeue is what the requeue event rq does to job, read as the store
// holds it at now:
//
//   - a job no longer at the event's state and claim: ignored;
//   - pending: dispatched again, unless a live dispatch claim holds it;
//   - running, a timeout or stale event whose reason no longer holds:
//     ignored (a worker's shutdown always holds);
//   - a job a user asked to cancel ends cancelled;
//   - a timeout ends it failed (timeout:);
//   - a stale job runs again under the next claim while it has runs left
//     (contracts.RunsAgain), else ends failed (stale:);
//   - any other reason (a worker that shut down mid-run) runs it again.
func (r StaleRule) DecideRequeue(job contracts.Job, rq contracts.Requeue, now time.Time) Requeue {
	if job.State != rq.State || job.Claim != rq.Claim {
		return Requeue{}
	}
	if job.State == contracts.StatePending {
		if job.ClaimUntil != nil && job.ClaimUntil.After(now) {
			return Requeue{}
		}
		return Requeue{Action: RequeueRedeliver}
	}
	if (rq.Reason == contracts.ReasonTimeout || rq.Reason == contracts.ReasonStale) && !r.Holds(job, rq.Reason, now) {
		return Requeue{}
	}
	end := func(state contracts.JobState, msg string) Requeue {
		return Requeue{Action: RequeueEnd, Change: Change{Now: now, State: state, Error: &msg}}
	}
	if job.CancelRequested {
		return end(contracts.StateCancelled, contracts.CancelledByRequest)
	}
	if rq.Reason == contracts.ReasonTimeout {
		return end(contracts.StateFailed, contracts.JobError(contracts.ClassTimeout,
			fmt.Sprintf("ran longer than the maximum runtime %s", r.MaxRuntime)))
	}
	if rq.Reason == contracts.ReasonStale {
		msg := contracts.JobError(contracts.ClassStale, fmt.Sprintf(
			"worker %s stopped heartbeating; the job ran %d times (max_attempts %d)", job.Worker, job.Attempt, job.MaxAttempts))
		if !contracts.RunsAgain(job, msg, false) {
			return end(contracts.StateFailed, msg)
		}
	}
	return Requeue{Action: RequeueRunAgain, Change: RequeueChange(job, now)}
}

// RequeueChange takes a running job whose run is over back to pending
// under the next claim (a late report of the old run is fenced off), off
// its worker, ready at once.
func RequeueChange(job contracts.Job, now time.Time) Change {
	none, at := "", now
	return Change{Now: now, State: contracts.StatePending, Claim: job.Claim + 1, Worker: &none, NextDispatchAt: &at, ClearClaim: true}
}
