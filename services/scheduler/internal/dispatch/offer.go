package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/scheduler/internal/picker"
)

// dispatch offers one claimed job to the workers that run its kind, in
// stable order, until one accepts. When none does, the claim is given
// back: at once when every worker was merely busy (the view now knows
// they are full and the job waits for a freed slot), after RetryInterval
// when offers failed.
func (d *Dispatcher) dispatch(ctx context.Context, job contracts.Job) {
	// A job too large for the bus could never be offered: fail it instead
	// of burning attempts and blaming the workers.
	if err := contracts.CheckMessageSize(job, d.nc.MaxPayload()); err != nil {
		d.fail(ctx, job, contracts.JobError(contracts.ClassInput, err.Error()), "too_large")
		return
	}
	body, err := json.Marshal(contracts.Offer{Job: job.Spec()})
	if err != nil {
		d.fail(ctx, job, contracts.JobError(contracts.ClassInput, "cannot encode the offer: "+err.Error()), "too_large")
		return
	}
	ids, _ := d.picker.Candidates(job.Kind)
	offers, failed := 0, false
	for _, id := range ids {
		if !d.picker.Reserve(id) {
			continue
		}
		offers++
		outcome, reply := d.offerTo(ctx, id, body)
		if ctx.Err() != nil {
			d.picker.Release(id)
			return // shutting down: the claim expires and another scheduler takes over
		}
		evicted := d.picker.Record(id, outcome, reply)
		d.picker.Release(id)
		d.m.Offer(outcome.String(), evicted)
		if evicted {
			d.log.Warn().Str(observe.FieldWorkerID, id).Msg("worker evicted after repeated failed offers")
		}
		switch outcome {
		case picker.Accepted:
			d.m.Dispatches.WithLabelValues("dispatched").Inc()
			d.m.OffersPerDispatch.Observe(float64(offers))
			jobFields(d.log.Debug(), job).Str(observe.FieldWorkerID, id).Msg("job accepted")
			return
		case picker.Busy, picker.NotSent:
		default:
			failed = true
		}
	}
	d.release(ctx, job, failed)
}

// release gives a claim back when no worker took the job; after failed
// offers the job waits RetryInterval (with jitter) before it is ready again.
func (d *Dispatcher) release(ctx context.Context, job contracts.Job, failed bool) {
	now := d.now()
	ch := store.Change{Now: now, State: contracts.StatePending, ClearClaim: true}
	if failed {
		next := NextAttemptAt(now, d.cfg.RetryInterval, d.jitter(), job.DispatchDeadline)
		ch.NextDispatchAt = &next
	}
	_, err := d.jobs.Transition(ctx, store.Expect{ID: job.ID, State: contracts.StatePending, Attempt: job.Attempt}, ch)
	switch {
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
		// A worker's start heartbeat won (an offer that timed out was
		// accepted after all), or the job was cancelled meanwhile.
	case err != nil:
		jobFields(d.log.Warn(), job).Err(err).Msg("dispatch claim not given back; it expires")
	default:
		d.m.Dispatches.WithLabelValues("overflow").Inc()
	}
}

// fail ends a pending job failed with msg; outcome labels the dispatch. A
// missed compare-and-set means the job moved on; nothing to do.
func (d *Dispatcher) fail(ctx context.Context, job contracts.Job, msg, outcome string) bool {
	failed, err := d.jobs.Transition(ctx, store.Expect{ID: job.ID, State: contracts.StatePending, Attempt: job.Attempt},
		store.Change{Now: d.now(), State: contracts.StateFailed, Error: &msg})
	if err != nil {
		if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
			jobFields(d.log.Warn(), job).Err(err).Msg("job not failed; the store did not answer")
		}
		return false
	}
	d.ev.State(failed)
	d.m.Dispatches.WithLabelValues(outcome).Inc()
	if contracts.ClassOf(msg) == contracts.ClassCapacity {
		d.m.CapacityFailures.Inc()
	}
	jobFields(d.log.Info(), job).Str("error", msg).Msg("job failed before dispatch")
	return true
}

// capacityError is the error of a job whose dispatch deadline passed.
func capacityError(job contracts.Job) string {
	return contracts.JobError(contracts.ClassCapacity, fmt.Sprintf(
		"no worker accepted the job before its dispatch deadline %s (%d dispatch attempts)",
		job.DispatchDeadline.UTC().Format(time.RFC3339), job.Attempt))
}

// offerTo sends one offer and classifies the outcome.
func (d *Dispatcher) offerTo(ctx context.Context, workerID string, body []byte) (picker.Outcome, *contracts.OfferReply) {
	octx, cancel := context.WithTimeout(ctx, d.cfg.OfferTimeout)
	defer cancel()
	msg, err := d.nc.RequestWithContext(octx, contracts.WorkerOfferSubject(workerID), body)
	switch {
	case notSent(err):
		return picker.NotSent, nil
	case errors.Is(err, nats.ErrNoResponders):
		return picker.NoResponders, nil
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return picker.Timeout, nil
	case err != nil:
		return picker.Failed, nil
	}
	reply, err := contracts.DecodeOfferReply(msg.Data)
	if err != nil {
		return picker.Failed, nil
	}
	switch reply.Status {
	case contracts.OfferAccepted:
		return picker.Accepted, &reply
	case contracts.OfferBusy:
		return picker.Busy, &reply
	}
	return picker.Refused, &reply
}

// notSent reports whether a request failed before it left this process:
// the message could never reach any worker, so no worker is to blame.
func notSent(err error) bool {
	return errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrConnectionClosed) ||
		errors.Is(err, nats.ErrConnectionDraining) || errors.Is(err, nats.ErrBadSubject) ||
		errors.Is(err, nats.ErrInvalidConnection)
}
