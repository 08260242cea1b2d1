package apply

import (
	"context"
	"errors"

	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/scheduler/internal/consume"
	"github.com/sluicehq/sluice/services/scheduler/internal/metrics"
)

// Requeue applies a requeue event on subject: from the reaper
// (contracts.SubjectRequeue: stale, lost, timeout) or from a worker that
// shut down mid-job (its contracts.WorkerRequeueSubject: shutdown). The
// event only applies while the job is still at the event's state and
// attempt, and its reason is checked again here; a worker's applies only
// to a job running on that worker (CheckRequeueSubject, CheckReport), and
// a shutdown requeue on the reaper's subject, which names no worker, never
// applies.
func (a *Applier) Requeue(ctx context.Context, subject string, data []byte, _ func()) consume.Settle {
	rq, err := contracts.DecodeRequeue(data)
	if err != nil {
		a.log.Warn().Err(err).Str(observe.FieldSubject, subject).Msg("malformed requeue dropped")
		return consume.Poison()
	}
	if v := CheckRequeueSubject(subject, rq.Reason); v.Refused() {
		a.refuse(metrics.ReportRequeue, v, refusal{subject: subject, jobID: rq.JobID, claim: rq.Claim})
		return consume.Ack()
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
	if rq.Reason == contracts.ReasonShutdown {
		if v := CheckReport(job, rq.Claim, subject, ""); v.Refused() {
			a.refuse(metrics.ReportRequeue, v, refusal{subject: subject, jobID: rq.JobID, claim: rq.Claim, holder: job.Worker})
			return consume.Ack()
		}
	}
	d := a.staleRule().DecideRequeue(job, rq, a.now())
	switch d.Action {
	case store.RequeueRedeliver:
		return a.redeliver(ctx, job, log)
	case store.RequeueRunAgain:
		return a.requeueRunning(ctx, job, d.Change, rq.Reason, log)
	case store.RequeueEnd:
		return a.end(ctx, job, d.Change, rq.Reason, log)
	}
	return consume.Ack() // the job moved on, or the reason no longer holds
}

// CheckRequeueSubject decides whether a requeue of reason may come on
// subject at all: a shutdown requeue only on the subject of a worker (the
// worker that stopped: CheckReport then checks the job is its), the
// reaper's reasons (stale, lost, timeout, which the scheduler checks
// against the store whoever sent them) only on the reaper's
// (contracts.SubjectRequeue). It returns VerdictUnbound for a shutdown
// requeue on a subject naming no worker, VerdictMismatch for a reaper's
// reason on any other subject, and VerdictApplies otherwise.
func CheckRequeueSubject(subject string, reason contracts.RequeueReason) Verdict {
	if reason == contracts.ReasonShutdown {
		if _, named := contracts.ReportingWorker(subject); !named {
			return VerdictUnbound
		}
		return VerdictApplies
	}
	if subject != contracts.SubjectRequeue {
		return VerdictMismatch
	}
	return VerdictApplies
}

// staleRule is the stale-requeue rule with the scheduler's thresholds.
func (a *Applier) staleRule() store.StaleRule {
	return store.StaleRule{Threshold: a.cfg.StaleThreshold, MaxRuntime: a.cfg.MaxRuntime}
}

// redeliver republishes a due message for a pending job whose message was lost.
func (a *Applier) redeliver(ctx context.Context, job contracts.Job, log zerolog.Logger) consume.Settle {
	if err := a.notify.Due(ctx, job.ID); err != nil {
		log.Warn().Err(err).Msg("due not republished; requeue retried")
		return consume.RetryIn(storeRetry)
	}
	a.m.Requeue(contracts.ReasonLost, metrics.RequeueRedelivered)
	log.Info().Msg("lost pending job dispatched again")
	return consume.Ack()
}

// requeueRunning applies ch (store.RequeueChange: the next claim, pending)
// and dispatches the job again.
func (a *Applier) requeueRunning(ctx context.Context, job contracts.Job, ch store.Change, reason contracts.RequeueReason, log zerolog.Logger) consume.Settle {
	out, err := a.jobs.Transition(ctx, store.Expect{ID: job.ID, State: contracts.StateRunning, Claim: job.Claim}, ch)
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

// end applies ch, the end (failed or cancelled) of the job's run for a
// requeue event of reason.
func (a *Applier) end(ctx context.Context, job contracts.Job, ch store.Change, reason contracts.RequeueReason, log zerolog.Logger) consume.Settle {
	state, msg := ch.State, *ch.Error
	out, err := a.jobs.Transition(ctx, store.Expect{ID: job.ID, State: job.State, Claim: job.Claim}, ch)
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
