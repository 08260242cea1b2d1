package apply

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/scheduler/internal/consume"
)

// Result applies a worker's result. It is ignored (and counted as stale)
// unless the job is still active at the result's attempt and, once
// running, on the result's worker.
func (a *Applier) Result(ctx context.Context, data []byte, _ func()) consume.Settle {
	res, err := contracts.DecodeResult(data)
	if err != nil {
		a.log.Warn().Err(err).Str(observe.FieldSubject, contracts.SubjectResult).Msg("malformed result dropped")
		return consume.Poison()
	}
	log := a.log.With().Str(observe.FieldJobID, res.JobID).Int64(observe.FieldAttempt, res.Attempt).Str(observe.FieldWorkerID, res.WorkerID).Logger()
	for range maxPasses {
		job, err := a.jobs.Get(ctx, res.JobID)
		if errors.Is(err, store.ErrNotFound) {
			a.m.Results.WithLabelValues("stale").Inc()
			return consume.Ack()
		}
		if err != nil {
			log.Warn().Err(err).Msg("store unavailable; result retried")
			return consume.RetryIn(storeRetry)
		}
		if !Current(job, res.Attempt, res.WorkerID) {
			a.m.Results.WithLabelValues("stale").Inc()
			log.Info().Str("state", string(job.State)).Int64("current_attempt", job.Attempt).Msg("result for an old attempt ignored")
			return consume.Ack()
		}
		ch := store.Change{Now: a.now(), State: res.State, Result: res.Result}
		if res.Error != "" {
			ch.Error = &res.Error
		}
		out, err := a.jobs.Transition(ctx, store.Expect{ID: job.ID, State: job.State, Attempt: job.Attempt}, ch)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			log.Warn().Err(err).Msg("store unavailable; result retried")
			return consume.RetryIn(storeRetry)
		}
		a.ev.State(out)
		a.m.Results.WithLabelValues("applied").Inc()
		a.m.Finished(res.State, job.StartedAt, ch.Now)
		return consume.Ack()
	}
	return consume.RetryIn(0)
}

// Current reports whether a report for attempt from workerID still speaks
// for the job: the job is active at that attempt and, when it is running,
// on that worker. (A pending job at that attempt holds the dispatch claim
// the worker accepted; its start heartbeat has not landed yet.)
func Current(job contracts.Job, attempt int64, workerID string) bool {
	if !job.State.Active() || job.Attempt != attempt {
		return false
	}
	return job.State == contracts.StatePending || job.Worker == workerID
}
