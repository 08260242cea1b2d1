package apply

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/scheduler/internal/consume"
	"github.com/sluicehq/sluice/services/scheduler/internal/metrics"
)

// Requeue applies a requeue event from the reaper (or a worker that shut
// down mid-job). The event only applies while the job is still at the
// event's state and attempt, and its reason is checked again here.
func (a *Applier) Requeue(ctx context.Context, data []byte, _ func()) consume.Settle {
	rq, err := contracts.DecodeRequeue(data)
	if err != nil {
		a.log.Warn().Err(err).Str(observe.FieldSubject, contracts.SubjectRequeue).Msg("malformed requeue dropped")
		return consume.Poison()
	}
	log := a.log.With().Str(observe.FieldJobID, rq.JobID).Int64(observe.FieldClaim, rq.Claim).Str("reason", string(rq.Reason)).Logger()
	job, err := a.jobs.Get(ctx, rq.JobID)
	if errors.Is(err, store.ErrNotFound) {
		return consume.Ack()
	}
	if err != nil {
		log.Warn().Err(err).Msg("store unavailable; requeue retried")
		return consume.RetryIn(storeRetry)
	}
	if job.State != rq.State || job.Claim != rq.Claim {
		return consume.Ack() // the job moved on; the event is stale
	}
	now := a.now()
	if job.State == contracts.StatePending {
		return a.redeliver(ctx, job, now, log)
	}
	switch rq.Reason {
	case contracts.ReasonTimeout:
		if a.cfg.MaxRuntime <= 0 || job.StartedAt == nil || now.Sub(*job.StartedAt) < a.cfg.MaxRuntime {
			return consume.Ack()
		}
	case contracts.ReasonStale:
		if !a.stale(job, now) {
			return consume.Ack()
		}
	}
	// The run is over. A job a user asked to cancel ends cancelled: it
	// neither runs again nor fails for how its run ended.
	if job.CancelRequested {
		return a.end(ctx, job, now, contracts.StateCancelled, contracts.CancelledByRequest, rq.Reason, log)
	}
	switch rq.Reason {
	case contracts.ReasonTimeout:
		return a.end(ctx, job, now, contracts.StateFailed, contracts.JobError(contracts.ClassTimeout,
			fmt.Sprintf("ran longer than the maximum runtime %s", a.cfg.MaxRuntime)), rq.Reason, log)
	case contracts.ReasonStale:
		msg := contracts.JobError(contracts.ClassStale, fmt.Sprintf(
			"worker %s stopped heartbeating; the job ran %d times (max_attempts %d)", job.Worker, job.Attempt, job.MaxAttempts))
		if !contracts.RunsAgain(job, msg, false) {
			return a.end(ctx, job, now, contracts.StateFailed, msg, rq.Reason, log)
		}
	}
	return a.requeueRunning(ctx, job, now, rq.Reason, log)
}

// stale applies the stale rule (contracts.Job.Stale) with the scheduler's
// threshold.
func (a *Applier) stale(job contracts.Job, now time.Time) bool {
	return job.Stale(now, a.cfg.StaleThreshold)
}

// redeliver republishes a due message for a pending job whose message was lost.
func (a *Applier) redeliver(ctx context.Context, job contracts.Job, now time.Time, log zerolog.Logger) consume.Settle {
	if job.ClaimUntil != nil && job.ClaimUntil.After(now) {
		return consume.Ack() // a scheduler is offering it right now
	}
	if err := a.notify.Due(ctx, job.ID); err != nil {
		log.Warn().Err(err).Msg("due not republished; requeue retried")
		return consume.RetryIn(storeRetry)
	}
	a.m.Requeue(contracts.ReasonLost, metrics.RequeueRedelivered)
	log.Info().Msg("lost pending job dispatched again")
	return consume.Ack()
}

// requeueRunning takes the attempt back (attempt + 1) and dispatches again.
func (a *Applier) requeueRunning(ctx context.Context, job contracts.Job, now time.Time, reason contracts.RequeueReason, log zerolog.Logger) consume.Settle {
	none := ""
	out, err := a.jobs.Transition(ctx, store.Expect{ID: job.ID, State: contracts.StateRunning, Claim: job.Claim},
		store.Change{Now: now, State: contracts.StatePending, Claim: job.Claim + 1, Worker: &none, NextDispatchAt: &now, ClearClaim: true})
	switch {
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
		return consume.Ack()
	case err != nil:
		log.Warn().Err(err).Msg("store unavailable; requeue retried")
		return consume.RetryIn(storeRetry)
	}
	a.ev.State(out)
	a.m.Requeue(reason, metrics.RequeueRequeued)
	log.Info().Str(observe.FieldWorkerID, job.Worker).Msg("job requeued")
	if err := a.notify.Due(ctx, job.ID); err != nil {
		// The job is pending in the store; the dispatcher's poll finds it.
		log.Warn().Err(err).Msg("due not published after requeue")
	}
	return consume.Ack()
}

// end ends the job in state (failed or cancelled) with msg for a requeue
// event of reason.
func (a *Applier) end(ctx context.Context, job contracts.Job, now time.Time, state contracts.JobState, msg string, reason contracts.RequeueReason, log zerolog.Logger) consume.Settle {
	out, err := a.jobs.Transition(ctx, store.Expect{ID: job.ID, State: job.State, Claim: job.Claim},
		store.Change{Now: now, State: state, Error: &msg})
	switch {
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
		return consume.Ack()
	case err != nil:
		return consume.RetryIn(storeRetry)
	}
	a.ev.State(out)
	if state == contracts.StateCancelled {
		a.m.Requeue(reason, metrics.RequeueCancelled)
		log.Info().Msg("job cancelled: its run stopped after a cancel request")
	} else {
		a.m.Requeue(reason, metrics.RequeueFailed)
		log.Info().Str("error", msg).Msg("job failed")
	}
	if job.Worker != "" {
		_ = a.notify.Cancel(job.Worker, contracts.Lease{JobID: job.ID, Claim: job.Claim})
	}
	return consume.Ack()
}
