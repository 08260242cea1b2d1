package apply

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/store"
)

// Progress records a worker's progress report on the job and publishes it
// as a progress event. It applies only while the job is running the
// report's attempt on the report's worker; anything else (a malformed
// report, an old attempt, another worker) is dropped and counted. Reports
// are fire and forget: the worker throttles them, and a lost one is
// replaced by the next.
func (a *Applier) Progress(ctx context.Context, data []byte) {
	rep, err := contracts.DecodeProgressReport(data)
	if err != nil {
		a.m.Progress.WithLabelValues("malformed").Inc()
		a.log.Debug().Err(err).Str(observe.FieldSubject, contracts.SubjectProgress).Msg("malformed progress report dropped")
		return
	}
	job, err := a.jobs.Get(ctx, rep.JobID)
	if err != nil {
		a.m.Progress.WithLabelValues(outcomeOf(err)).Inc()
		return
	}
	if job.State != contracts.StateRunning || !Current(job, rep.Claim, rep.WorkerID) {
		a.m.Progress.WithLabelValues("stale").Inc()
		return
	}
	p := rep.Progress
	_, err = a.jobs.Transition(ctx, store.Expect{ID: job.ID, State: contracts.StateRunning, Claim: job.Claim},
		store.Change{Now: a.now(), State: contracts.StateRunning, Progress: &p})
	if err != nil {
		a.m.Progress.WithLabelValues(outcomeOf(err)).Inc()
		return
	}
	a.m.Progress.WithLabelValues("applied").Inc()
	a.ev.Publish(contracts.Event{
		Type: contracts.EventProgress, JobID: job.ID, Tenant: job.Tenant, Kind: job.Kind, Parent: job.Parent,
		Attempt: job.Attempt, Claim: job.Claim, Worker: job.Worker, Progress: &p, At: a.now().UTC(),
	})
}

// outcomeOf labels a failed progress write.
func outcomeOf(err error) string {
	if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
		return "stale"
	}
	return "store_error"
}
