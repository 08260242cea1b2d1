package apply

import (
	"context"
	"errors"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/scheduler/internal/metrics"
)

// Progress applies a worker's progress report on subject. It applies only
// while the job is running the report's claim on the worker the subject
// names, and the report names that worker too; anything else (a malformed
// report, an old claim, a job ending) is dropped and counted, and a
// report that does not speak for the job's worker is refused
// (CheckReport). A report that applies is published at once as
// a progress event; the store gets it later: the newest report of each
// claim is written at the next flush (at most once per
// Config.ProgressFlush per job, see Run), and a job's last report is
// written with its result (see Result). With ProgressFlush 0 every
// report is written as it comes. Reports are fire and forget: the worker
// throttles them, and a lost one is replaced by the next.
//
// The first report of a claim reads the job (its claim, worker and the
// fields of the event); the next ones are checked against what that
// read found, and the write's compare-and-set checks them again.
func (a *Applier) Progress(ctx context.Context, subject string, data []byte) {
	rep, err := contracts.DecodeProgressReport(data)
	if err != nil {
		a.m.Progress.WithLabelValues(metrics.ProgressMalformed).Inc()
		a.log.Debug().Err(err).Str(observe.FieldSubject, subject).Msg("malformed progress report dropped")
		return
	}
	if _, v := Reporter(subject, rep.WorkerID); v != VerdictApplies {
		a.refuse(metrics.ReportProgress, v, refusal{subject: subject, jobID: rep.JobID, claim: rep.Claim, named: rep.WorkerID})
		return
	}
	// From here rep.WorkerID is the subject's worker.
	if a.cfg.ProgressFlush <= 0 {
		a.writeProgress(ctx, subject, rep)
		return
	}
	now := a.now()
	job, noted, replaced := a.book.note(rep, now)
	switch noted {
	case noteStale:
		a.m.Progress.WithLabelValues(metrics.ProgressStale).Inc()
		return
	case noteForeign:
		a.refuseProgress(subject, rep, job.Worker)
		return
	case noteUnknown:
		var outcome string
		if job, outcome = a.currentJob(ctx, subject, rep); outcome != "" {
			a.countProgress(subject, rep, job, outcome)
			return
		}
		added, lost := a.book.add(job, rep, now)
		if lost { // the report kept of the job's former claim
			a.m.Progress.WithLabelValues(metrics.ProgressStale).Inc()
		}
		if !added {
			a.m.Progress.WithLabelValues(metrics.ProgressStale).Inc()
			return
		}
	}
	if replaced {
		// The report this one replaced is never written on its own.
		a.m.Progress.WithLabelValues(metrics.ProgressCoalesced).Inc()
	}
	a.publishProgress(job, rep.Progress)
}

// currentJob reads the job of rep, which came on subject, and returns it
// when rep speaks for it (running at rep's claim on the subject's worker);
// otherwise the outcome to count (VerdictForeign when the job at that
// claim is another worker's).
func (a *Applier) currentJob(ctx context.Context, subject string, rep contracts.ProgressReport) (contracts.Job, string) {
	job, err := a.jobs.Get(ctx, rep.JobID)
	if err != nil {
		return job, outcomeOf(err)
	}
	switch v := CheckReport(job, rep.Claim, subject, rep.WorkerID); {
	case v.Refused():
		return job, string(v)
	case v != VerdictApplies || job.State != contracts.StateRunning:
		return job, metrics.ProgressStale
	}
	return job, ""
}

// countProgress counts a report currentJob did not take: refused when
// the job at its claim is another worker's, else by outcome.
func (a *Applier) countProgress(subject string, rep contracts.ProgressReport, job contracts.Job, outcome string) {
	if outcome == string(VerdictForeign) {
		a.refuseProgress(subject, rep, job.Worker)
		return
	}
	a.m.Progress.WithLabelValues(outcome).Inc()
}

// refuseProgress refuses rep, which came on subject, for a job whose
// claim is holder's.
func (a *Applier) refuseProgress(subject string, rep contracts.ProgressReport, holder string) {
	a.refuse(metrics.ReportProgress, VerdictForeign, refusal{subject: subject, jobID: rep.JobID, claim: rep.Claim,
		named: rep.WorkerID, holder: holder})
}

// writeProgress writes rep, which came on subject, at once (flush period
// 0) and publishes it.
func (a *Applier) writeProgress(ctx context.Context, subject string, rep contracts.ProgressReport) {
	job, outcome := a.currentJob(ctx, subject, rep)
	if outcome != "" {
		a.countProgress(subject, rep, job, outcome)
		return
	}
	p := rep.Progress
	_, err := a.jobs.Transition(ctx, store.Expect{ID: job.ID, State: contracts.StateRunning, Claim: job.Claim},
		store.Change{Now: a.now(), State: contracts.StateRunning, Progress: &p})
	if err != nil {
		a.m.Progress.WithLabelValues(outcomeOf(err)).Inc()
		return
	}
	a.m.Progress.WithLabelValues(metrics.ProgressApplied).Inc()
	a.publishProgress(job, p)
}

// publishProgress publishes p as job's progress event.
func (a *Applier) publishProgress(job contracts.Job, p contracts.Progress) {
	a.ev.Publish(contracts.Event{
		Type: contracts.EventProgress, JobID: job.ID, Tenant: job.Tenant, Kind: job.Kind, Parent: job.Parent,
		Attempt: job.Attempt, Claim: job.Claim, Worker: job.Worker, Progress: &p, At: a.now().UTC(),
	})
}

// progressFlushChunk bounds the jobs one flush writes in one store call,
// so that a flush of many running jobs never holds the writer long.
const progressFlushChunk = 256

// Run writes the progress reports kept in memory once per
// Config.ProgressFlush until ctx ends, and once more then (within
// Config.ShutdownTimeout), so a scheduler that stops loses no report it
// kept. With ProgressFlush 0 every report is written as it comes, and
// Run returns at once.
func (a *Applier) Run(ctx context.Context) error {
	if a.cfg.ProgressFlush <= 0 {
		return nil
	}
	t := time.NewTicker(a.cfg.ProgressFlush)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			dctx, cancel := observe.DrainContext(ctx, a.cfg.ShutdownTimeout)
			defer cancel()
			a.flushProgress(dctx)
			return nil
		case <-t.C:
			a.flushProgress(ctx)
		}
	}
}

// flushProgress writes the newest report of every claim that has one not
// yet written, progressFlushChunk jobs per store call, each a
// compare-and-set on the job running that claim on that worker; then it
// forgets the jobs that sent no report for a whole flush period.
func (a *Applier) flushProgress(ctx context.Context) {
	writes := a.book.due()
	now := a.now()
	for start := 0; start < len(writes); start += progressFlushChunk {
		a.writeProgresses(ctx, writes[start:min(start+progressFlushChunk, len(writes))], now)
	}
	a.book.drop(now.Add(-a.cfg.ProgressFlush))
}

// writeProgresses writes ws in one store call and counts what became of
// each report.
func (a *Applier) writeProgresses(ctx context.Context, ws []progressWrite, now time.Time) {
	ids := make([]string, len(ws))
	for i, w := range ws {
		ids[i] = w.job.ID
	}
	updated, err := a.jobs.UpdateEach(ctx, ids, func(i int, job contracts.Job) (store.Change, error) {
		w := ws[i]
		if job.State != contracts.StateRunning || job.Claim != w.job.Claim || job.Worker != w.job.Worker {
			return store.Change{}, errStale
		}
		p := w.progress
		return store.Change{Now: now, State: contracts.StateRunning, Progress: &p}, nil
	})
	if err != nil {
		a.log.Warn().Err(err).Int("jobs", len(ws)).Msg("progress not written; tried again at the next flush")
		for _, w := range ws {
			a.book.failed(w)
		}
		a.m.Progress.WithLabelValues(metrics.ProgressStoreError).Add(float64(len(ws)))
		return
	}
	for i, u := range updated {
		w := ws[i]
		switch {
		case u.Err == nil:
			a.book.wrote(w)
			a.m.Progress.WithLabelValues(metrics.ProgressApplied).Inc()
		case errors.Is(u.Err, errStale) || errors.Is(u.Err, store.ErrNotFound):
			// The claim is gone (the job ended on another scheduler, or
			// was requeued): forget it, with any newer report of it.
			a.m.Progress.WithLabelValues(metrics.ProgressStale).Inc()
			if a.book.forget(w.job.ID, w.job.Claim) > w.seq {
				a.m.Progress.WithLabelValues(metrics.ProgressStale).Inc()
			}
		case errors.Is(u.Err, store.ErrConflict):
			a.book.failed(w) // the job changed under the write: next flush
		default:
			a.m.Progress.WithLabelValues(metrics.ProgressStoreError).Inc()
			a.book.failed(w)
		}
	}
}

// outcomeOf labels a failed progress read or write.
func outcomeOf(err error) string {
	if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
		return metrics.ProgressStale
	}
	return metrics.ProgressStoreError
}
