package store

import (
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// The retry rule. A worker's result for the current run of a job ends it
// in the result's state, except a failed run, which ends a job a user asked
// to cancel cancelled (the worker had not learned of the request when the
// run ended, and the job must not run again), and otherwise runs again
// after a backoff while the failure is retryable and the job has runs
// left (contracts.RunsAgain); each failure is kept in the job's errors.

// ResultChange is the change a worker's result res for the current run of
// job (read as the store holds it) makes at now. backoff says how long a
// job waits before its next run after its runs-th run failed.
func ResultChange(job contracts.Job, res contracts.Result, now time.Time, backoff func(runs int) time.Duration) Change {
	// A run counts from its start; a result that beats the start's
	// write (the job still pending at that claim) still ends a run.
	ch := Change{Now: now, State: res.State, Result: res.Result, IncAttempt: job.State == contracts.StatePending, Usage: res.Usage}
	if res.Error != "" {
		ch.Error = &res.Error
	}
	if res.State != contracts.StateFailed {
		return ch
	}
	runs := job.Attempt
	if job.State == contracts.StatePending {
		runs++
	}
	ch.Errors = contracts.AppendRunError(job.Errors, contracts.RunError{Attempt: runs, Claim: job.Claim, Error: res.Error, At: now})
	counted := job
	counted.Attempt = runs
	switch {
	case job.CancelRequested:
		cancelled := contracts.CancelledByRequest
		ch.State, ch.Error = contracts.StateCancelled, &cancelled
	case contracts.RunsAgain(counted, res.Error, res.Permanent):
		ch = RetryChange(job, ch, now.Add(backoff(runs)))
	}
	return ch
}

// RetryChange turns final, the change that ends a failed run of job, into
// its retry: back to pending under the next claim, off the worker, ready
// at next, keeping the run's error in the job's errors and what the run
// used.
func RetryChange(job contracts.Job, final Change, next time.Time) Change {
	none := ""
	return Change{Now: final.Now, State: contracts.StatePending, Claim: job.Claim + 1, Worker: &none,
		IncAttempt: final.IncAttempt, ClearClaim: true, NextDispatchAt: &next, Errors: final.Errors, Usage: final.Usage}
}
