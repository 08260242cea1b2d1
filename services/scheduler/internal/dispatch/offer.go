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
	"github.com/sluicehq/sluice/services/scheduler/internal/picker"
)

// offerJob is a claimed job on its way to a worker.
type offerJob struct {
	job      contracts.Job
	spec     []byte          // its JobSpec, encoded once
	tried    map[string]bool // the workers it was offered to
	offers   int
	failed   bool // an offer of it failed (not merely busy)
	accepted bool
}

// offerGroup is the jobs one wave offers to one worker in one request.
type offerGroup struct {
	worker string
	jobs   []*offerJob
	size   int
}

// offerEnvelope is what an OfferBatch adds around its jobs, with room to spare.
const offerEnvelope = 64

// dispatchAll offers the jobs of one claim round to the workers that run
// their kinds. Each kind goes in waves: every job is assigned to the first
// worker, in stable order, that it was not offered to yet and that has a
// free slot as far as the view knows, and each worker gets its jobs in one
// request (an OfferBatch when there are several); the jobs no worker took
// go to the next wave. When no worker is left for a job its claim is given
// back: at once when every worker was merely busy (the view now knows they
// are full and the job waits for a freed slot), after RetryInterval when
// offers failed.
func (d *Dispatcher) dispatchAll(ctx context.Context, jobs []contracts.Job) {
	byKind := map[string][]*offerJob{}
	var kinds []string
	for _, job := range jobs {
		// A job too large for the bus could never be offered: fail it
		// instead of burning attempts and blaming the workers.
		if err := contracts.CheckMessageSize(job, d.nc.MaxPayload()); err != nil {
			d.fail(ctx, job, contracts.JobError(contracts.ClassInput, err.Error()), "too_large")
			d.done(job.Kind)
			continue
		}
		spec, err := contracts.EncodeJSON(job.Spec())
		if err != nil {
			d.fail(ctx, job, contracts.JobError(contracts.ClassInput, "cannot encode the offer: "+err.Error()), "too_large")
			d.done(job.Kind)
			continue
		}
		if _, ok := byKind[job.Kind]; !ok {
			kinds = append(kinds, job.Kind)
		}
		byKind[job.Kind] = append(byKind[job.Kind], &offerJob{job: job, spec: spec, tried: map[string]bool{}})
	}
	var wg sync.WaitGroup
	for _, kind := range kinds {
		wg.Go(func() { d.dispatchKind(ctx, kind, byKind[kind]) })
	}
	wg.Wait()
}

// dispatchKind offers jobs of one kind, best first, in waves until each
// was accepted or offered to every worker with room.
func (d *Dispatcher) dispatchKind(ctx context.Context, kind string, jobs []*offerJob) {
	for len(jobs) > 0 && ctx.Err() == nil {
		groups := d.assign(kind, jobs)
		if len(groups) == 0 {
			break
		}
		var wg sync.WaitGroup
		for _, g := range groups {
			select {
			case d.sem <- struct{}{}:
			case <-ctx.Done():
				d.picker.ReleaseN(g.worker, len(g.jobs))
				continue
			}
			wg.Go(func() {
				defer func() { <-d.sem }()
				d.offerGroup(ctx, g)
			})
		}
		wg.Wait()
		left := jobs[:0]
		for _, oj := range jobs {
			if oj.accepted {
				d.done(kind)
				continue
			}
			left = append(left, oj)
		}
		jobs = left
	}
	rctx := ctx
	if ctx.Err() != nil {
		// Shutting down: give the claims back so that another scheduler
		// takes the jobs now, not when the claims expire. One a worker
		// accepted without its answer arriving here is fenced by its
		// attempt, as after any lost answer.
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), releaseOnStop)
		defer cancel()
	}
	for _, oj := range jobs {
		d.release(rctx, oj.job, oj.failed)
		d.done(kind)
	}
}

// releaseOnStop bounds giving claims back when the dispatcher stops.
const releaseOnStop = 2 * time.Second

// assign plans one wave: each job goes to the first worker in stable order
// it was not offered to yet that has a free slot (reserved here) and room
// left in the request.
func (d *Dispatcher) assign(kind string, jobs []*offerJob) []*offerGroup {
	// Enough workers for every job, past those each was offered already.
	want := len(jobs)
	for _, oj := range jobs {
		want += len(oj.tried)
	}
	open := d.picker.Candidates(kind, want) // workers that may still have a free slot this wave
	groups := map[string]*offerGroup{}
	var order []*offerGroup
	limit := int(d.nc.MaxPayload())
	if limit <= 0 {
		limit = 1 << 20
	}
	for _, oj := range jobs {
		for i := 0; i < len(open); i++ {
			id := open[i]
			if oj.tried[id] {
				continue
			}
			g := groups[id]
			if g != nil && (len(g.jobs) >= contracts.MaxOfferBatch || g.size+len(oj.spec)+1 > limit) {
				continue // this request is full; the job may go to the next worker
			}
			if !d.picker.Reserve(id) {
				open = append(open[:i:i], open[i+1:]...) // full: no later job goes there either
				i--
				continue
			}
			if g == nil {
				g = &offerGroup{worker: id, size: offerEnvelope}
				groups[id] = g
				order = append(order, g)
			}
			g.jobs = append(g.jobs, oj)
			g.size += len(oj.spec) + 1
			break
		}
	}
	return order
}

// offerGroup sends one worker its jobs of a wave and records what it did
// with each.
func (d *Dispatcher) offerGroup(ctx context.Context, g *offerGroup) {
	body := offerBody(g.jobs)
	outcome, reply := d.offerTo(ctx, g.worker, body)
	if ctx.Err() != nil {
		d.picker.ReleaseN(g.worker, len(g.jobs))
		return // shutting down: the claims expire and another scheduler takes over
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
	d.picker.ReleaseN(g.worker, len(g.jobs))
	if evicted {
		d.m.Offer(outcome.String(), true)
		d.log.Warn().Str(observe.FieldWorkerID, g.worker).Msg("worker evicted after repeated failed offers")
	}
	for i, oj := range g.jobs {
		oj.tried[g.worker] = true
		oj.offers++
		d.m.Offer(outcomes[i].String(), false)
		switch outcomes[i] {
		case picker.Accepted:
			oj.accepted = true
			d.m.Dispatches.WithLabelValues("dispatched").Inc()
			d.m.OffersPerDispatch.Observe(float64(oj.offers))
			jobFields(d.log.Debug(), oj.job).Str(observe.FieldWorkerID, g.worker).Msg("job accepted")
		case picker.Busy, picker.NotSent:
		default:
			oj.failed = true
		}
	}
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

// release gives a claim back when no worker took the job; after failed
// offers the job waits RetryInterval (with jitter) before it is ready again.
func (d *Dispatcher) release(ctx context.Context, job contracts.Job, failed bool) {
	now := d.now()
	ch := store.Change{Now: now, State: contracts.StatePending, ClearClaim: true}
	if failed {
		next := NextAttemptAt(now, d.cfg.RetryInterval, d.jitter(), job.DispatchDeadline)
		ch.NextDispatchAt = &next
	}
	_, err := d.jobs.Transition(ctx, store.Expect{ID: job.ID, State: contracts.StatePending, Claim: job.Claim}, ch)
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
	failed, err := d.jobs.Transition(ctx, store.Expect{ID: job.ID, State: contracts.StatePending, Claim: job.Claim},
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
