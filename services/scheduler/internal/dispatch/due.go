package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/scheduler/internal/consume"
	"github.com/sluicehq/sluice/services/scheduler/internal/metrics"
)

// Handle processes one due message: the durable wake-up of a job. It wakes
// the dispatcher when the job is ready; holds the message until a job
// that is not due yet (run_at, a retry's backoff) is; fails a job whose
// dispatch deadline passed, that is too large for the bus, or whose kind
// no worker has run for NoWorkerGrace; and drops it once the job is
// dispatched or finished. The job itself waits in the store, not here.
func (d *Dispatcher) Handle(ctx context.Context, _ string, data []byte, _ func()) consume.Settle {
	due, err := contracts.DecodeDue(data)
	if err != nil {
		d.log.Warn().Err(err).Str(observe.FieldSubject, contracts.SubjectDue).Msg("malformed due message dropped")
		return consume.Poison()
	}
	job, err := d.jobs.Get(ctx, due.JobID)
	if errors.Is(err, store.ErrNotFound) {
		return consume.Ack()
	}
	if err != nil {
		d.log.Warn().Err(err).Str(observe.FieldJobID, due.JobID).Msg("store unavailable; due message retried")
		return consume.RetryIn(storeRetry)
	}
	now := d.now()
	plan := Decide(job, now)
	switch plan.Action {
	case Drop:
		d.m.Dispatch(metrics.DispatchDropped)
		return consume.Ack()
	case FailCapacity:
		d.fail(ctx, job, capacityError(job), metrics.DispatchCapacityFailed)
		return consume.Ack()
	case Wait:
		return consume.RetryIn(plan.Delay)
	}
	if err := contracts.CheckMessageSize(job, d.nc.MaxPayload()); err != nil {
		d.fail(ctx, job, contracts.JobError(contracts.ClassInput, err.Error()), metrics.DispatchTooLarge)
		return consume.Ack()
	}
	if wait, ok := d.noWorker(job.Kind, now); ok {
		if wait <= 0 {
			d.fail(ctx, job, noWorkerError(job.Kind, d.cfg.NoWorkerGrace), metrics.DispatchNoWorker)
			return consume.Ack()
		}
		return consume.RetryIn(min(wait, time.Until(job.DispatchDeadline)))
	}
	d.Wake()
	return consume.Ack()
}

// noWorker reports, when no live worker runs kind, how long the grace has
// left (≤ 0: over). ok is false while some worker runs it, or when the
// grace is off.
func (d *Dispatcher) noWorker(kind string, now time.Time) (time.Duration, bool) {
	if d.cfg.NoWorkerGrace <= 0 {
		return 0, false
	}
	since := d.picker.KindLastSeen(kind)
	if !since.IsZero() && !since.Before(now) {
		return 0, false // a live worker runs it right now
	}
	if since.Before(d.started) {
		since = d.started
	}
	return d.cfg.NoWorkerGrace - now.Sub(since), true
}

// noWorkerError is the error of a job failed because no worker has run its
// kind for the grace.
func noWorkerError(kind string, grace time.Duration) string {
	return contracts.JobError(contracts.ClassCapacity, fmt.Sprintf(
		"no worker runs kind %q (none has announced it for %s)", kind, grace))
}
