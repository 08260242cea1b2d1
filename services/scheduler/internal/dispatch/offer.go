package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/scheduler/internal/metrics"
	"github.com/sluicehq/sluice/services/scheduler/internal/picker"
)

// offerJob is a claimed job on its way to its slot's worker.
type offerJob struct {
	job  contracts.Job
	spec []byte // its JobSpec, encoded once
}

// offerGroup is the jobs one request offers to one worker.
type offerGroup struct {
	worker string
	jobs   []*offerJob
	size   int
}

// offerEnvelope is what an OfferBatch adds around its jobs, with room to spare.
const offerEnvelope = 64

// dispatchAll offers the jobs of one claim round, each to the worker whose
// slot the claim gave it (the job is running there in the store already):
// each worker gets its jobs in as few requests as the batch and message
// limits allow. A job its worker says it does not take goes back to
// pending (see release): ready again at once when the worker was busy or
// nobody listened (the view now knows it is full, or puts it last), after
// RetryInterval when the worker refused it. A job whose answer did not
// come stays running on the worker (see offerGroup).
func (d *Dispatcher) dispatchAll(ctx context.Context, jobs []contracts.Job) {
	limit := int(d.nc.MaxPayload())
	if limit <= 0 {
		limit = 1 << 20
	}
	var (
		groups []*offerGroup
		open   = map[string]*offerGroup{} // each worker's group being filled
	)
	for _, job := range jobs {
		// A cancel asked while the job was being given back or requeued
		// (both compare-and-set on its state and claim, which the cancel
		// leaves alone) left it pending with the cancel asked: it ends
		// here, never offered again.
		if job.CancelRequested {
			if d.end(ctx, job, contracts.StateCancelled, contracts.CancelledByRequest, metrics.DispatchCancelled) {
				jobFields(d.log.Info(), job).Msg("job cancelled before dispatch: its cancel came while it was given back")
			}
			d.picker.ReleaseN(job.Worker, 1)
			continue
		}
		// A job too large for the bus could never be offered: fail it
		// instead of burning attempts and blaming the workers.
		if err := contracts.CheckMessageSize(job, d.nc.MaxPayload()); err != nil {
			d.fail(ctx, job, contracts.JobError(contracts.ClassInput, err.Error()), metrics.DispatchTooLarge)
			d.picker.ReleaseN(job.Worker, 1)
			continue
		}
		spec, err := contracts.EncodeJSON(job.Spec())
		if err != nil {
			d.fail(ctx, job, contracts.JobError(contracts.ClassInput, "cannot encode the offer: "+err.Error()), metrics.DispatchTooLarge)
			d.picker.ReleaseN(job.Worker, 1)
			continue
		}
		g := open[job.Worker]
		if g != nil && (len(g.jobs) >= contracts.MaxOfferBatch || g.size+len(spec)+1 > limit) {
			g = nil // this request is full: the worker's next one
		}
		if g == nil {
			g = &offerGroup{worker: job.Worker, size: offerEnvelope}
			open[job.Worker] = g
			groups = append(groups, g)
		}
		g.jobs = append(g.jobs, &offerJob{job: job, spec: spec})
		g.size += len(spec) + 1
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		select {
		case d.sem <- struct{}{}:
		case <-ctx.Done():
			d.giveBack(ctx, g)
			continue
		}
		wg.Go(func() {
			defer func() { <-d.sem }()
			d.offerGroup(ctx, g)
		})
	}
	wg.Wait()
}

// releaseOnStop bounds giving claims back when the dispatcher stops.
const releaseOnStop = 2 * time.Second

// giveBack returns the jobs of a group never offered to pending when the
// dispatcher stops: another scheduler offers them now, not when the reaper
// finds them stale. (Offers already sent are not given back: see
// offerGroup.)
func (d *Dispatcher) giveBack(ctx context.Context, g *offerGroup) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseOnStop)
	defer cancel()
	for _, oj := range g.jobs {
		d.release(rctx, oj.job, false)
	}
	d.picker.ReleaseN(g.worker, len(g.jobs))
}

// offerGroup sends one worker its jobs and records what it did with each.
func (d *Dispatcher) offerGroup(ctx context.Context, g *offerGroup) {
	body := offerBody(g.jobs)
	outcome, reply := d.offerTo(ctx, g.worker, body)
	if ctx.Err() != nil {
		outcome, reply = picker.Timeout, nil // stopping: the answer will not be read
	}
	outcomes := make([]picker.Outcome, len(g.jobs))
	for i := range outcomes {
		outcomes[i] = outcome
	}
	if reply != nil && len(g.jobs) > 1 {
		if len(reply.Results) != len(g.jobs) {
			outcome, reply = picker.Failed, nil // not an answer to this batch
			for i := range outcomes {
				outcomes[i] = picker.Failed
			}
		} else {
			for i, r := range reply.Results {
				outcomes[i] = statusOutcome(r.Status)
			}
		}
	}
	evicted := d.picker.Record(g.worker, outcome, reply)
	if evicted {
		d.m.Offer(outcome.String(), true)
		d.log.Warn().Str(observe.FieldWorkerID, g.worker).Msg("worker evicted after repeated failed offers")
	}
	for i, oj := range g.jobs {
		d.m.Offer(outcomes[i].String(), false)
		switch outcomes[i] {
		case picker.Accepted:
			d.m.Dispatch(metrics.DispatchDispatched)
			d.m.Started([]contracts.Job{oj.job}) // queue wait: submit → running
			d.ev.State(oj.job)
			jobFields(d.log.Debug(), oj.job).Str(observe.FieldWorkerID, g.worker).Msg("job accepted")
		case picker.Refused:
			d.release(ctx, oj.job, true) // the worker said no: wait before the next try
		case picker.Busy, picker.NotSent, picker.NoResponders:
			// Busy (the view now knows it is full), never sent, or no
			// worker listening (counted towards its eviction, and it comes
			// last in the next claim's slots): ready again at once.
			d.release(ctx, oj.job, false)
		default:
			// No answer, or one that cannot be read: the worker may have
			// taken the job. Giving it back now could let a second worker
			// run it while the first, whose start heartbeat read it as
			// its own before the give-back, runs it too. It stays running
			// on this worker: the worker's heartbeats confirm it, or the
			// reaper requeues it once its lease, written by the claim, is
			// stale.
			d.m.Dispatch(metrics.DispatchUnanswered)
			d.ev.State(oj.job)
			jobFields(d.log.Debug(), oj.job).Str(observe.FieldWorkerID, g.worker).Str("outcome", outcomes[i].String()).
				Msg("offer unanswered; the job stays with the worker until its lease says otherwise")
		}
	}
	// The reservations end once the view holds the answer and the jobs
	// not taken are pending again, so the next claim round sees both.
	d.picker.ReleaseN(g.worker, len(g.jobs))
}

// offerBody is the request for jobs (contracts.AppendOffer; the specs
// are encoded already).
func offerBody(jobs []*offerJob) []byte {
	specs := make([][]byte, len(jobs))
	for i, oj := range jobs {
		specs[i] = oj.spec
	}
	return contracts.AppendOffer(nil, specs)
}

// statusOutcome is the outcome of one job of a batch from its status.
func statusOutcome(s contracts.OfferStatus) picker.Outcome {
	switch s {
	case contracts.OfferAccepted:
		return picker.Accepted
	case contracts.OfferBusy:
		return picker.Busy
	}
	return picker.Refused
}

// release gives back a claimed job its worker did not take: pending again,
// its run undone (store.ReleaseChange), a second write counted as
// overflow; failed (the worker refused it) makes it wait RetryInterval
// (with jitter) before it is ready again.
func (d *Dispatcher) release(ctx context.Context, job contracts.Job, failed bool) {
	now := d.now()
	var next *time.Time
	if failed {
		at := NextAttemptAt(now, d.cfg.RetryInterval, d.jitter(), job.DispatchDeadline)
		next = &at
	}
	_, err := d.jobs.Transition(ctx, store.Expect{ID: job.ID, State: contracts.StateRunning, Claim: job.Claim},
		store.ReleaseChange(now, next))
	switch {
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
		// The job moved on: its result came (the worker took it after
		// all), or it was cancelled or requeued meanwhile.
	case err != nil:
		jobFields(d.log.Warn(), job).Err(err).Msg("claimed job not given back; the reaper requeues it when its lease goes stale")
	default:
		// No event either way: its running event is published only once
		// its worker takes it, so the event stream never saw it leave
		// pending.
		d.m.Dispatch(metrics.DispatchOverflow)
	}
}

// fail ends a job failed with msg before it was offered: a claimed job
// (running on its slot) or a pending one; outcome labels the dispatch. A
// missed compare-and-set means the job moved on; nothing to do.
func (d *Dispatcher) fail(ctx context.Context, job contracts.Job, msg string, outcome metrics.DispatchOutcome) bool {
	if !d.end(ctx, job, contracts.StateFailed, msg, outcome) {
		return false
	}
	if contracts.ClassOf(msg) == contracts.ClassCapacity {
		d.m.CapacityFailures.Inc()
	}
	jobFields(d.log.Info(), job).Str("error", msg).Msg("job failed before dispatch")
	return true
}

// end ends a job in the final state st with msg before it was offered,
// and reports whether it did.
func (d *Dispatcher) end(ctx context.Context, job contracts.Job, st contracts.JobState, msg string, outcome metrics.DispatchOutcome) bool {
	ended, err := d.jobs.Transition(ctx, store.Expect{ID: job.ID, State: job.State, Claim: job.Claim},
		store.Change{Now: d.now(), State: st, Error: &msg})
	if err != nil {
		if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
			jobFields(d.log.Warn(), job).Err(err).Msg("job not ended; the store did not answer")
		}
		return false
	}
	d.ev.State(ended)
	d.m.Dispatch(outcome)
	return true
}

// capacityError is the error of a job whose dispatch deadline passed.
func capacityError(job contracts.Job) string {
	return contracts.JobError(contracts.ClassCapacity, fmt.Sprintf(
		"no worker accepted the job before its dispatch deadline %s (%d dispatch attempts)",
		job.DispatchDeadline.UTC().Format(time.RFC3339), job.Claim))
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
