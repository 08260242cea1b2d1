package dispatch

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/pkg/bus/events"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/scheduler/internal/metrics"
	"github.com/sluicehq/sluice/services/scheduler/internal/picker"
)

// Jobs is the part of the store the dispatcher uses.
type Jobs interface {
	Get(ctx context.Context, id string) (contracts.Job, error)
	Transition(ctx context.Context, exp store.Expect, ch store.Change) (contracts.Job, error)
	Claim(ctx context.Context, r store.ClaimRequest) ([]contracts.Job, error)
	Stale(ctx context.Context, q store.StaleQuery) ([]contracts.Job, error)
	PendingKinds(ctx context.Context) ([]string, error)
}

// Requester sends an offer and waits for the answer; *nats.Conn is one.
type Requester interface {
	RequestWithContext(ctx context.Context, subj string, data []byte) (*nats.Msg, error)
	// MaxPayload is the largest message the connection can send.
	MaxPayload() int64
}

// Config tunes dispatching.
type Config struct {
	// RetryInterval is how long a job its worker refused waits before it
	// is ready again, and how often the dispatcher looks for ready jobs
	// when nothing woke it.
	RetryInterval time.Duration
	// OfferTimeout bounds one offer request.
	OfferTimeout time.Duration
	// Offers bounds the offer requests in flight at once (default 64);
	// one request may carry many jobs for one worker.
	Offers int
	// SweepInterval is how often the dispatch deadline sweep runs
	// (default 1s).
	SweepInterval time.Duration
	// NoWorkerGrace fails a job early, "capacity: no worker runs kind",
	// when no live worker has announced its kind for this long (counted
	// from the dispatcher's start at the earliest); 0 = never early.
	NoWorkerGrace time.Duration
}

// Dispatcher moves ready jobs to workers: it reserves the free worker
// slots it knows of, in stable worker order, and claims the best ready
// jobs into them in one store write (each job running on its slot), then
// offers each job to its slot's worker. A job the worker says it does not
// take goes back to pending. The picker's reservations are the one count of
// room promised and not yet answered.
type Dispatcher struct {
	cfg    Config
	jobs   Jobs
	nc     Requester
	picker *picker.Picker
	now    func() time.Time
	jitter func() float64
	log    zerolog.Logger
	m      *metrics.Scheduler
	// ev receives the change events worth showing: a dispatch claim or a
	// released claim only moves a pending job's attempt, so only the
	// failures before dispatch are published from here.
	ev *events.Publisher

	wake    chan struct{} // a due job or a freed slot: look for ready jobs
	started time.Time     // the grace for absent kinds counts from here at the earliest

	sem chan struct{} // bounds the offer requests in flight
}

// New returns a dispatcher. jitter returns a number in [0,1).
func New(cfg Config, jobs Jobs, nc Requester, p *picker.Picker, ev *events.Publisher, now func() time.Time, jitter func() float64, log zerolog.Logger, m *metrics.Scheduler) *Dispatcher {
	if cfg.Offers <= 0 {
		cfg.Offers = 64
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = time.Second
	}
	return &Dispatcher{cfg: cfg, jobs: jobs, nc: nc, picker: p, now: now, jitter: jitter, log: log, m: m, ev: ev,
		wake: make(chan struct{}, 1), started: now(), sem: make(chan struct{}, cfg.Offers)}
}

// storeRetry is how soon a failed store call is tried again.
const storeRetry = time.Second

// Wake asks the dispatcher to look for ready jobs now. It never blocks;
// wake-ups that come while it is busy fold into one.
func (d *Dispatcher) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Run dispatches until ctx ends, then waits for the offers in flight. It
// also runs the dispatch deadline sweep.
func (d *Dispatcher) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { d.dispatchLoop(gctx); return nil })
	g.Go(func() error { d.sweepLoop(gctx); return nil })
	return g.Wait()
}

// dispatchLoop claims and offers whenever room and ready jobs may meet: at
// a wake-up, a roster change, the end of an offer, and every RetryInterval.
func (d *Dispatcher) dispatchLoop(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	tick := time.NewTicker(d.cfg.RetryInterval)
	defer tick.Stop()
	pause := time.NewTimer(0)
	<-pause.C
	defer pause.Stop()
	for {
		viewCh, freedCh := d.picker.Changed()
		claimed, drained, err := d.claimRound(ctx)
		if err != nil && ctx.Err() == nil {
			d.log.Warn().Err(err).Msg("claiming ready jobs failed; trying again")
			select {
			case <-ctx.Done():
				return
			case <-time.After(storeRetry):
			}
			continue
		}
		if len(claimed) > 0 {
			wg.Go(func() { d.dispatchAll(ctx, claimed) })
		}
		if len(claimed) > 0 && !drained {
			continue // there may be more
		}
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
			continue
		case <-tick.C:
			continue
		case <-viewCh:
		case <-freedCh:
		}
		if drained {
			// The ready queue had no more than was claimed: more room
			// alone makes nothing claimable, except a job waiting for
			// its concurrency key, which a run that ended may have
			// freed. Look again after a short pause, so that a fleet's
			// thousands of load changes a second make a few claims, not
			// thousands.
			pause.Reset(drainedPause)
			select {
			case <-ctx.Done():
				return
			case <-d.wake:
			case <-pause.C:
			}
		}
	}
}

// drainedPause is the pause before a roster change leads to another claim
// when the last one emptied the ready queue.
const drainedPause = 5 * time.Millisecond

// claimBatch bounds the jobs of a kind one claim round takes: a claim is
// one store transaction, and the heartbeats and results that arrive
// meanwhile wait for it. The loop claims again at once while jobs come.
const claimBatch = 256

// claimRound reserves the free slots the workers have for each kind (at
// most claimBatch per kind; a worker's slots reserved once and shared by
// the kinds it runs) and claims the best ready jobs into them, bounded in
// the store by each worker's reservations and capacity; the reservations
// no job filled are ended at once. drained says the store had fewer ready jobs than slots,
// of every kind asked.
func (d *Dispatcher) claimRound(ctx context.Context) (_ []contracts.Job, drained bool, _ error) {
	want := map[string]int{}
	for kind, n := range d.picker.Room() {
		want[kind] = min(n, claimBatch)
	}
	r := d.picker.SlotsFor(want)
	slots, reserved := r.Lists, r.Reserved
	if len(slots) == 0 {
		return nil, false, nil
	}
	var packs map[string]store.WorkerResources
	for w, c := range r.Resources {
		if packs == nil {
			packs = make(map[string]store.WorkerResources, len(r.Resources))
		}
		packs[w] = store.WorkerResources{Capacity: c, Defaults: r.Defaults[w]}
	}
	jobs, err := d.jobs.Claim(ctx, store.ClaimRequest{Now: d.now(), Slots: slots, Room: reserved, Capacity: r.Capacity,
		Resources: packs, Clock: d.now})
	if err != nil {
		d.endReservations(reserved)
		return nil, false, err
	}
	got := map[string]int{}
	for _, j := range jobs {
		got[j.Kind]++
		reserved[j.Worker]-- // filled: ended once the worker's answer is in
	}
	d.endReservations(reserved)
	drained = true
	for kind, s := range slots {
		if got[kind] >= len(s) {
			drained = false
		}
	}
	d.m.Claims.Add(float64(len(jobs)))
	return jobs, drained, nil
}

// endReservations ends the reservations no job filled, per worker,
// without waking the dispatch loop: no room appeared.
func (d *Dispatcher) endReservations(reserved map[string]int) {
	for w, n := range reserved {
		d.picker.Unreserve(w, n)
	}
}

// jobFields adds a job's fields to a log event (nil when the level is off,
// which zerolog's events accept): no child logger per dispatch.
func jobFields(e *zerolog.Event, j contracts.Job) *zerolog.Event {
	return e.Str(observe.FieldJobID, j.ID).Int(observe.FieldAttempt, j.Attempt).Int64(observe.FieldClaim, j.Claim)
}
