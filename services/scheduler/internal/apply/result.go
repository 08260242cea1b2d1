package apply

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/scheduler/internal/consume"
	"github.com/sluicehq/sluice/services/scheduler/internal/metrics"
)

// Result applies a message of worker results on subject: one Result or a
// batch (contracts.DecodeResults), all in one store call (UpdateEach), each
// result decided on its own. A result applies only for the worker the
// subject names, when it names itself and holds the job at the result's
// claim (CheckReport, on the job the store call reads anyway: no read of
// its own); any other is refused. A message whose subject names no worker
// (the shared result subject of an earlier release) is refused whole,
// without a store call. When the store fails, or any result must be tried
// again, the whole message comes back, and the results already applied are
// then stale and skipped.
func (a *Applier) Result(ctx context.Context, subject string, data []byte, _ func()) consume.Settle {
	results, err := contracts.DecodeResults(data)
	if err != nil {
		a.log.Warn().Err(err).Str(observe.FieldSubject, subject).Msg("malformed result dropped")
		return consume.Poison()
	}
	if _, v := Reporter(subject, ""); v != VerdictApplies {
		for _, res := range results {
			a.refuse(metrics.ReportResult, v, refusal{subject: subject, jobID: res.JobID, claim: res.Claim, named: res.WorkerID})
		}
		return consume.Ack()
	}
	var (
		ids      = make([]string, len(results))
		befores  = make([]contracts.Job, len(results))
		changes  = make([]store.Change, len(results))
		verdicts = make([]Verdict, len(results))
	)
	for i, res := range results {
		ids[i] = res.JobID
	}
	updated, err := a.jobs.UpdateEach(ctx, ids, func(i int, job contracts.Job) (store.Change, error) {
		res := results[i]
		befores[i] = job
		switch verdicts[i] = CheckReport(job, res.Claim, subject, res.WorkerID); {
		case verdicts[i].Refused():
			return store.Change{}, errRefused
		case verdicts[i] != VerdictApplies:
			return store.Change{}, errStale
		}
		changes[i] = a.resultChange(job, res)
		// The claim's newest progress, kept since the last flush, is
		// stored with its end: no write of its own.
		if p := a.book.end(res.JobID, res.Claim); p != nil {
			changes[i].Progress = p
		}
		return changes[i], nil
	})
	if err != nil {
		a.log.Warn().Err(err).Int("results", len(results)).Msg("store unavailable; results retried")
		return consume.RetryIn(storeRetry)
	}
	out := consume.Ack()
	for i, res := range results {
		if errors.Is(updated[i].Err, errRefused) {
			// Nothing of the job is touched, its kept progress included:
			// that is its own worker's.
			a.refuse(metrics.ReportResult, verdicts[i], refusal{subject: subject, jobID: res.JobID, claim: res.Claim,
				named: res.WorkerID, holder: befores[i].Worker})
			continue
		}
		s := a.settleResult(ctx, res, befores[i], changes[i], updated[i])
		if s.Retry && (!out.Retry || s.Delay > out.Delay) {
			out = s
		}
	}
	return out
}

// settleResult reports what applying one result did: the job before
// (what decide saw), the change decided and the store's outcome. A result
// is ignored (and counted as stale) unless the job was still active at the
// result's claim; one for another worker's job was refused before (see
// Result).
func (a *Applier) settleResult(ctx context.Context, res contracts.Result, before contracts.Job, ch store.Change, u store.Updated) consume.Settle {
	// The result's fields go on each event: no child logger per result.
	fields := func(e *zerolog.Event) *zerolog.Event {
		return e.Str(observe.FieldJobID, res.JobID).Int64(observe.FieldClaim, res.Claim).Str(observe.FieldWorkerID, res.WorkerID)
	}
	switch err := u.Err; {
	case errors.Is(err, store.ErrNotFound):
		a.m.Results.WithLabelValues("stale").Inc()
		a.forgetProgress(res, metrics.ProgressStale)
		return consume.Ack()
	case errors.Is(err, errStale):
		a.m.Results.WithLabelValues("stale").Inc()
		a.forgetProgress(res, metrics.ProgressStale)
		fields(a.log.Info()).Str("state", string(before.State)).Int64("current_claim", before.Claim).Msg("result for an old claim ignored")
		return consume.Ack()
	case errors.Is(err, store.ErrConflict):
		return consume.RetryIn(0)
	case err != nil:
		fields(a.log.Warn()).Err(err).Msg("store unavailable; result retried")
		return consume.RetryIn(storeRetry)
	}
	a.ev.State(u.Job)
	a.forgetProgress(res, metrics.ProgressCoalesced) // stored with the end
	if ch.State == contracts.StatePending {
		a.m.Results.WithLabelValues("retried").Inc()
		fields(a.log.Info()).Str("error", res.Error).Time("next_dispatch_at", *ch.NextDispatchAt).Msg("run failed; job runs again after a backoff")
		if err := a.notify.Due(ctx, res.JobID); err != nil {
			// The job is pending in the store; the dispatcher finds it when due.
			fields(a.log.Warn()).Err(err).Msg("due not published after a failed run")
		}
		return consume.Ack()
	}
	a.m.Results.WithLabelValues("applied").Inc()
	a.m.Finished(ch.State, before.StartedAt, ch.Now)
	return consume.Ack()
}

// forgetProgress drops the progress kept of res's claim once its result
// settled; a report not yet written counts as outcome.
func (a *Applier) forgetProgress(res contracts.Result, outcome string) {
	if a.book.forget(res.JobID, res.Claim) != 0 {
		a.m.Progress.WithLabelValues(outcome).Inc()
	}
}

// errStale is the decision on a result that no longer speaks for its job.
var errStale = errors.New("result for an old claim")

// errRefused is the decision on a result that does not speak for the
// worker that holds its job (CheckReport).
var errRefused = errors.New("result refused: not the job's worker")

// resultChange is the change a current result makes to job: the retry
// rule (store.ResultChange) with the configured backoff (RetryDelay).
func (a *Applier) resultChange(job contracts.Job, res contracts.Result) store.Change {
	return store.ResultChange(job, res, a.now(), func(runs int) time.Duration {
		return RetryDelay(runs, a.cfg.RetryBackoff, a.cfg.RetryBackoffMax)
	})
}
