package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/bus/events"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/scheduler/internal/consume"
	"github.com/sluicehq/sluice/services/scheduler/internal/metrics"
	"github.com/sluicehq/sluice/services/scheduler/internal/picker"
)

// Jobs is the part of the store the dispatcher uses.
type Jobs interface {
	Get(ctx context.Context, id string) (contracts.Job, error)
	Transition(ctx context.Context, exp store.Expect, ch store.Change) (contracts.Job, error)
}

// Requester sends an offer and waits for the answer; *nats.Conn is one.
type Requester interface {
	RequestWithContext(ctx context.Context, subj string, data []byte) (*nats.Msg, error)
	// MaxPayload is the largest message the connection can send.
	MaxPayload() int64
}

// Config tunes dispatching.
type Config struct {
	// RetryInterval is the base delay before an overflowed job is offered again.
	RetryInterval time.Duration
	// ClaimTTL is how long a dispatch claim keeps other schedulers off a
	// job; it must outlast an offer round and a worker's start heartbeat.
	ClaimTTL time.Duration
	// OfferTimeout bounds one offer request.
	OfferTimeout time.Duration
	// HoldForRoom is how long a due message waits in the scheduler for a
	// slot to free up before the job overflows (0 = overflow at once).
	HoldForRoom time.Duration
	// MaxHolding bounds how many messages hold at once, so jobs of other
	// kinds still get through (default: 1).
	MaxHolding int
	// NoWorkerGrace fails a job early, "capacity: no worker runs kind",
	// when no live worker has announced its kind for this long (counted
	// from the dispatcher's start at the earliest); 0 = never early.
	NoWorkerGrace time.Duration
}

// Dispatcher handles due messages.
type Dispatcher struct {
	cfg    Config
	jobs   Jobs
	nc     Requester
	picker *picker.Picker
	now    func() time.Time
	jitter func() float64
	log    zerolog.Logger
	m      *metrics.Scheduler
	// ev receives the change events worth showing: a dispatch claim or an
	// overflow only moves a pending job's attempt and next time, so only
	// the capacity failure is published from here.
	ev *events.Publisher

	holders chan struct{} // one token per message holding for room
	started time.Time     // the grace for absent kinds counts from here at the earliest
}

// New returns a dispatcher. jitter returns a number in [0,1).
func New(cfg Config, jobs Jobs, nc Requester, p *picker.Picker, ev *events.Publisher, now func() time.Time, jitter func() float64, log zerolog.Logger, m *metrics.Scheduler) *Dispatcher {
	if cfg.MaxHolding <= 0 {
		cfg.MaxHolding = 1
	}
	return &Dispatcher{cfg: cfg, jobs: jobs, nc: nc, picker: p, now: now, jitter: jitter, log: log, m: m, ev: ev,
		holders: make(chan struct{}, cfg.MaxHolding), started: now()}
}

// storeRetry is how soon a message comes back when the store did not answer.
const storeRetry = time.Second

// maxPasses bounds re-reads after compare-and-set misses in one delivery.
const maxPasses = 3

// Handle processes one due message.
func (d *Dispatcher) Handle(ctx context.Context, data []byte, progress func()) consume.Settle {
	due, err := contracts.DecodeDue(data)
	if err != nil {
		d.log.Warn().Err(err).Str(observe.FieldSubject, contracts.SubjectDue).Msg("malformed due message dropped")
		return consume.Poison()
	}
	for range maxPasses {
		job, err := d.jobs.Get(ctx, due.JobID)
		if errors.Is(err, store.ErrNotFound) {
			return consume.Ack()
		}
		if err != nil {
			d.log.Warn().Err(err).Str(observe.FieldJobID, due.JobID).Msg("store unavailable; due message retried")
			return consume.RetryIn(storeRetry)
		}
		settle, again := d.step(ctx, job, progress)
		if !again {
			return settle
		}
	}
	return consume.RetryIn(100 * time.Millisecond)
}

// step acts on one read of the job; again asks for a fresh read after a
// compare-and-set miss.
func (d *Dispatcher) step(ctx context.Context, job contracts.Job, progress func()) (consume.Settle, bool) {
	now := d.now()
	plan := Decide(job, now)
	switch plan.Action {
	case Drop:
		d.m.Dispatches.WithLabelValues("dropped").Inc()
		return consume.Ack(), false
	case Wait:
		return consume.RetryIn(plan.Delay), false
	case FailCapacity:
		msg := contracts.JobError(contracts.ClassCapacity, fmt.Sprintf(
			"no worker accepted the job before its dispatch deadline %s (%d dispatch attempts)",
			job.DispatchDeadline.UTC().Format(time.RFC3339), job.Attempt))
		return d.fail(ctx, job, now, msg, "capacity_failed")
	}
	if d.cfg.NoWorkerGrace > 0 {
		since := d.picker.KindLastSeen(job.Kind)
		if since.Before(d.started) {
			since = d.started
		}
		if now.Sub(since) >= d.cfg.NoWorkerGrace {
			msg := contracts.JobError(contracts.ClassCapacity, fmt.Sprintf(
				"no worker runs kind %q (none has announced it for %s)", job.Kind, d.cfg.NoWorkerGrace))
			return d.fail(ctx, job, now, msg, "no_worker")
		}
	}
	// A job too large for the bus (admitted before the gateway checked, or
	// under a larger max payload) could never be offered: fail it instead
	// of burning attempts and blaming the workers.
	if err := contracts.CheckMessageSize(job, d.nc.MaxPayload()); err != nil {
		return d.fail(ctx, job, now, contracts.JobError(contracts.ClassInput, err.Error()), "too_large")
	}
	return d.offer(ctx, job, now, progress)
}

// fail ends a pending job failed with msg; outcome labels the dispatch.
func (d *Dispatcher) fail(ctx context.Context, job contracts.Job, now time.Time, msg, outcome string) (consume.Settle, bool) {
	failed, err := d.jobs.Transition(ctx, store.Expect{ID: job.ID, State: job.State, Attempt: job.Attempt},
		store.Change{Now: now, State: contracts.StateFailed, Error: &msg})
	if errors.Is(err, store.ErrConflict) {
		return consume.Settle{}, true
	}
	if err != nil {
		return consume.RetryIn(storeRetry), false
	}
	d.ev.State(failed)
	d.m.Dispatches.WithLabelValues(outcome).Inc()
	if contracts.ClassOf(msg) == contracts.ClassCapacity {
		d.m.CapacityFailures.Inc()
	}
	d.log.Info().Str(observe.FieldJobID, job.ID).Str("error", msg).Msg("job failed before dispatch")
	return consume.Ack(), false
}

// offer claims the job and offers it to the candidates in order. When
// every worker that runs the kind is full, it holds the message for up to
// HoldForRoom and offers again as soon as a slot frees up, instead of
// polling; only then does the job overflow.
func (d *Dispatcher) offer(ctx context.Context, job contracts.Job, now time.Time, progress func()) (consume.Settle, bool) {
	holdUntil := now.Add(d.cfg.HoldForRoom)
	if !job.DispatchDeadline.IsZero() && job.DispatchDeadline.Before(holdUntil) {
		holdUntil = job.DispatchDeadline
	}
	var (
		claimed contracts.Job
		body    []byte
		offers  int
		holding bool
		// Workers not to ask again in this dispatch: refused or failed for
		// good, busy until the next wake-up.
		skip = map[string]bool{}
		busy = map[string]bool{}
	)
	defer func() {
		if holding {
			<-d.holders
		}
	}()
	for {
		viewCh, freedCh := d.picker.Changed()
		ids, full := d.picker.Candidates(job.Kind)
		if len(ids) > 0 && body == nil {
			var settle consume.Settle
			var again bool
			claimed, body, settle, again = d.claim(ctx, job, d.now())
			if body == nil {
				return settle, again
			}
		}
		for _, id := range ids {
			if skip[id] || busy[id] || !d.picker.Reserve(id) {
				continue
			}
			offers++
			outcome, reply := d.offerTo(ctx, id, body)
			if ctx.Err() != nil {
				d.picker.Release(id)
				// Shutting down: the claim expires and another scheduler takes over.
				return consume.RetryIn(d.cfg.ClaimTTL), false
			}
			evicted := d.picker.Record(id, outcome, reply)
			d.picker.Release(id)
			d.m.Offer(outcome.String(), evicted)
			if evicted {
				d.log.Warn().Str(observe.FieldWorkerID, id).Msg("worker evicted after repeated failed offers")
			}
			if outcome == picker.Accepted {
				d.m.Dispatches.WithLabelValues("dispatched").Inc()
				d.m.OffersPerDispatch.Observe(float64(offers))
				d.log.Debug().Str(observe.FieldJobID, job.ID).Int64(observe.FieldAttempt, claimed.Attempt).
					Str(observe.FieldWorkerID, id).Msg("job accepted")
				return consume.Ack(), false
			}
			if outcome == picker.Busy {
				busy[id] = true
			} else {
				skip[id] = true
			}
			if offers%4 == 0 {
				progress()
			}
		}
		// No room right now. Hold on if some worker runs this kind and is
		// only full, the hold has time left, and not too many are holding.
		if full == 0 || !d.now().Before(holdUntil) {
			break
		}
		if !holding {
			select {
			case d.holders <- struct{}{}:
				holding = true
			default:
			}
			if !holding {
				break
			}
		}
		timer := time.NewTimer(holdUntil.Sub(d.now()))
		select {
		case <-ctx.Done():
			timer.Stop()
			return consume.RetryIn(0), false
		case <-viewCh:
		case <-freedCh:
		case <-timer.C:
		}
		timer.Stop()
		clear(busy)
		progress()
	}
	if body == nil {
		// Overflow known without asking anyone: no claim, no attempt spent.
		return d.reschedule(ctx, job, job.Attempt, d.now(), store.Expect{ID: job.ID, State: contracts.StatePending, Attempt: job.Attempt, ClaimFreeAt: d.now()})
	}
	return d.reschedule(ctx, claimed, claimed.Attempt, d.now(), store.Expect{ID: job.ID, State: contracts.StatePending, Attempt: claimed.Attempt})
}

// claim takes the dispatch claim (attempt + 1) and encodes the offer. A nil
// body means the claim was not taken and settle/again say what to do.
func (d *Dispatcher) claim(ctx context.Context, job contracts.Job, now time.Time) (contracts.Job, []byte, consume.Settle, bool) {
	claimUntil := now.Add(d.cfg.ClaimTTL)
	claimed, err := d.jobs.Transition(ctx,
		store.Expect{ID: job.ID, State: contracts.StatePending, Attempt: job.Attempt, ClaimFreeAt: now},
		store.Change{Now: now, State: contracts.StatePending, Attempt: job.Attempt + 1, ClaimUntil: &claimUntil})
	switch {
	case errors.Is(err, store.ErrConflict):
		return claimed, nil, consume.Settle{}, true
	case errors.Is(err, store.ErrNotFound):
		return claimed, nil, consume.Ack(), false
	case err != nil:
		return claimed, nil, consume.RetryIn(storeRetry), false
	}
	body, err := json.Marshal(contracts.Offer{Job: claimed.Spec()})
	if err != nil {
		return claimed, nil, consume.Poison(), false
	}
	return claimed, body, consume.Settle{}, false
}

// reschedule keeps an overflowed job pending until its next attempt time
// and redelivers its message then.
func (d *Dispatcher) reschedule(ctx context.Context, job contracts.Job, attempt int64, now time.Time, exp store.Expect) (consume.Settle, bool) {
	next := NextAttemptAt(now, d.cfg.RetryInterval, d.jitter(), job.DispatchDeadline)
	_, err := d.jobs.Transition(ctx, exp, store.Change{Now: now, State: contracts.StatePending, ClearClaim: true, NextDispatchAt: &next})
	switch {
	case errors.Is(err, store.ErrConflict):
		// A worker's start heartbeat may have won (an offer that timed out
		// was accepted after all); read again and act on what is there.
		return consume.Settle{}, true
	case errors.Is(err, store.ErrNotFound):
		return consume.Ack(), false
	case err != nil:
		return consume.RetryIn(storeRetry), false
	}
	d.m.Dispatches.WithLabelValues("overflow").Inc()
	d.log.Debug().Str(observe.FieldJobID, job.ID).Int64(observe.FieldAttempt, attempt).Time("next_dispatch_at", next).Msg("no worker has room; job stays pending")
	return consume.RetryIn(next.Sub(now)), false
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
