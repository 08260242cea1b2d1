// Package scheduler is the Sluice scheduler as a library: it pulls due jobs
// from JetStream, offers each to workers in a stable order, keeps overflow
// pending until its deadline, and applies results, heartbeats and requeue
// events. Any number of schedulers may share one store and one stream.
package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/bus/events"
	"github.com/sluicehq/sluice/pkg/bus/roster"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/scheduler/internal/apply"
	"github.com/sluicehq/sluice/services/scheduler/internal/consume"
	"github.com/sluicehq/sluice/services/scheduler/internal/dispatch"
	"github.com/sluicehq/sluice/services/scheduler/internal/metrics"
	"github.com/sluicehq/sluice/services/scheduler/internal/picker"
	"github.com/sluicehq/sluice/services/scheduler/internal/spawn"
)

// Deps are the scheduler's dependencies, wired by hand.
type Deps struct {
	Store store.Store
	NC    *nats.Conn
	JS    jetstream.JetStream
	Log   zerolog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Registry takes the metrics and is what /metrics serves; nil makes one
	// with the Go and process collectors (observe.NewRegistry).
	Registry *prometheus.Registry
}

// Scheduler is one scheduler replica.
type Scheduler struct {
	cfg      Config
	deps     Deps
	roster   *roster.Roster
	dispatch *dispatch.Dispatcher
	apply    *apply.Applier
	parents  *events.Parents
	spawn    *spawn.Spawner
	probe    *observe.Probe
	metrics  *metrics.Scheduler
}

// New builds a scheduler from its configuration and dependencies.
func New(cfg Config, d Deps) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Store == nil || d.NC == nil || d.JS == nil {
		return nil, fmt.Errorf("scheduler: store, nats connection and jetstream are required")
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Registry == nil {
		d.Registry = observe.NewRegistry()
	}
	m := metrics.New(d.Registry)
	r := roster.New(d.Now)
	s := &Scheduler{cfg: cfg, deps: d, roster: r, metrics: m}
	pub := events.NewPublisher(d.NC)
	s.parents = events.NewParents(d.Store, events.NewPublisher(d.NC), 0)
	// A fan-out child that changed may have released the next one into the
	// ready queue: claim it now, not at the next poll.
	pub.WithChildren(func(parent string) {
		s.parents.Touch(parent)
		s.dispatch.Wake()
	})
	var view picker.View = r
	if cfg.MinWorkerVersion != "" {
		view = picker.MinVersion(r, cfg.MinWorkerVersion)
	}
	pick := picker.New(view, 0)
	s.spawn = spawn.New(spawn.Config{Mode: cfg.Spawn, Command: cfg.SpawnCommand, Cooldown: cfg.SpawnCooldown,
		Max: cfg.MaxSpawned, Timeout: cfg.SpawnTimeout}, d.Store, pick, r, d.NC, d.Now, d.Log, m)
	s.dispatch = dispatch.New(dispatch.Config{
		RetryInterval: cfg.ReofferInterval, OfferTimeout: cfg.OfferTimeout,
		Offers: cfg.MaxConcurrent, NoWorkerGrace: cfg.NoWorkerGrace,
	},
		d.Store, d.NC, pick, pub, d.Now, rand.Float64, d.Log, m)
	s.apply = apply.New(apply.Config{StaleThreshold: cfg.StaleThreshold, LeaseRenewAfter: cfg.RenewAfter(), MaxRuntime: cfg.MaxRuntime,
		RetryBackoff: cfg.RetryBackoff, RetryBackoffMax: cfg.MaxRetryBackoff,
		ProgressFlush: cfg.ProgressFlush, ShutdownTimeout: cfg.ShutdownTimeout},
		d.Store, notifier{nc: d.NC, js: d.JS}, pub, d.Now, d.Log, m)
	s.probe = observe.NewProbe(d.Log, d.Registry)
	s.probe.AddCheck("store", d.Store.Ping)
	s.probe.AddCheck("nats", func(ctx context.Context) error { return bus.Check(ctx, d.NC, d.JS) })
	return s, nil
}

// Probe returns the scheduler's health and readiness checks.
func (s *Scheduler) Probe() *observe.Probe { return s.probe }

// Run schedules until ctx ends, then drains: it stops taking messages and
// lets the offers, results and heartbeats in flight finish within
// SLUICE_SHUTDOWN_TIMEOUT. It serves /healthz, /readyz and /metrics on
// SLUICE_SCHEDULER_HTTP_ADDR meanwhile.
func (s *Scheduler) Run(ctx context.Context) error {
	if err := s.roster.Subscribe(ctx, s.deps.NC); err != nil {
		return err
	}
	// Every replica hears the gateways' wake-ups (no queue group): each
	// claims what its workers have room for.
	wake, err := s.deps.NC.Subscribe(contracts.SubjectWake, func(*nats.Msg) { s.dispatch.Wake() })
	if err != nil {
		return fmt.Errorf("scheduler: subscribe %s: %w", contracts.SubjectWake, err)
	}
	defer func() { _ = wake.Unsubscribe() }()
	s.deps.Log.Info().Msg("scheduler started")
	g, gctx := errgroup.WithContext(ctx)
	// Each consumer reads the subjects contracts.ConsumerSubjects names;
	// one declared by an earlier release with another filter is moved to
	// them (bus.EnsureConsumer).
	consumer := func(name string, conc int, h consume.Handler) {
		g.Go(func() error {
			return consume.Run(gctx, s.deps.JS, consume.Options{
				Config: bus.ConsumerConfig(name, s.cfg.AckWait, contracts.ConsumerSubjects(name)...), Concurrency: conc,
				DrainTimeout: s.cfg.ShutdownTimeout, Log: s.deps.Log,
			}, h)
		})
	}
	g.Go(func() error { return s.dispatch.Run(gctx) })
	g.Go(func() error { return s.parents.Run(gctx) })
	g.Go(func() error { return s.spawn.Run(gctx) })
	g.Go(func() error { return s.apply.Run(gctx) })
	consumer(contracts.ConsumerDue, s.cfg.MaxConcurrent, s.dispatch.Handle)
	consumer(contracts.ConsumerResult, s.cfg.MaxConcurrent, s.wakeAfter(s.apply.Result))
	consumer(contracts.ConsumerRequeue, 8, s.wakeAfter(s.apply.Requeue))
	// Heartbeats and progress reports come on each worker's own subject,
	// which names the worker they speak for.
	g.Go(func() error {
		return s.serveQueue(gctx, contracts.HeartbeatSubjects, heartbeatWorkers, heartbeatBuffer, nil, func(ctx context.Context, m *nats.Msg) {
			_ = m.Respond(s.apply.Heartbeat(ctx, m.Subject, m.Data))
		})
	})
	g.Go(func() error {
		return s.serveQueue(gctx, contracts.ProgressSubjects, progressWorkers, progressBuffer, laneOf, func(ctx context.Context, m *nats.Msg) {
			s.apply.Progress(ctx, m.Subject, m.Data)
		})
	})
	g.Go(func() error { return s.probe.Serve(gctx, s.cfg.HTTPAddr) })
	return g.Wait()
}

// heartbeatWorkers is how many heartbeats one scheduler applies at once.
// A worker's start heartbeat holds its job until it is answered, and with
// thousands of busy workers a thousand heartbeats arrive each second: the
// store's group commit folds the concurrent ones into one transaction, so
// more at once means bigger transactions, not more of them.
const heartbeatWorkers = 512

// progressWorkers is how many progress reports one scheduler applies at once.
const progressWorkers = 4

// heartbeatBuffer and progressBuffer bound the messages waiting for a
// handler: room for one heartbeat of each of 64k busy workers, so that a
// burst (thousands of workers joining or reconnecting at once) waits
// instead of being dropped. Past it NATS drops the newest, and the
// scheduler counts and logs them (sluice_scheduler_dropped_messages_total).
const (
	heartbeatBuffer = 1 << 16
	progressBuffer  = 1 << 12
)

// droppedEvery is how often serveQueue looks for dropped messages.
const droppedEvery = time.Second

// serveQueue hands the messages of subject, in the queue group every
// scheduler replica shares, to handle on workers goroutines until ctx
// ends; a message being handled then may finish within
// SLUICE_SHUTDOWN_TIMEOUT. Heartbeats are requests (handle answers them);
// progress reports are fire and forget. Up to buffer messages wait; past
// that NATS drops the newest (the worker's next heartbeat or report
// replaces them), and the drops are counted and logged. With lane set,
// every message goes to goroutine lane(body, workers), in arrival order
// (see ordered.go); with lane nil, to whichever goroutine is free.
func (s *Scheduler) serveQueue(ctx context.Context, subject string, workers, buffer int, lane func([]byte, int) int, handle func(context.Context, *nats.Msg)) error {
	ch := make(chan *nats.Msg, buffer)
	sub, err := s.deps.NC.ChanQueueSubscribe(subject, contracts.QueueScheduler, ch)
	if err != nil {
		return fmt.Errorf("subscribe %s: %w", subject, err)
	}
	hctx, cancel := observe.DrainContext(ctx, s.cfg.ShutdownTimeout)
	defer cancel()
	lanes := make([]chan *nats.Msg, workers)
	for i := range lanes {
		lanes[i] = ch
		if lane != nil {
			lanes[i] = make(chan *nats.Msg, max(buffer/workers, 1))
		}
	}
	var wg sync.WaitGroup
	for _, in := range lanes {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case m := <-in:
					handle(hctx, m)
				}
			}
		})
	}
	if lane != nil {
		wg.Go(func() { route(ctx, ch, lanes, lane) })
	}
	s.watchDropped(ctx, sub, subject)
	_ = sub.Unsubscribe()
	wg.Wait()
	return nil
}

// watchDropped counts and logs the messages NATS dropped for sub because
// its buffer was full, until ctx ends.
func (s *Scheduler) watchDropped(ctx context.Context, sub *nats.Subscription, subject string) {
	t := time.NewTicker(droppedEvery)
	defer t.Stop()
	seen := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, err := sub.Dropped()
		if err != nil || n <= seen {
			continue
		}
		s.metrics.Dropped.WithLabelValues(subject).Add(float64(n - seen))
		s.deps.Log.Warn().Str(observe.FieldSubject, subject).Int("dropped", n-seen).
			Msg("scheduler buffer full: messages dropped; the workers send the next ones (add scheduler replicas)")
		seen = n
	}
}

// notifier publishes due messages and worker cancels.
type notifier struct {
	nc *nats.Conn
	js jetstream.JetStream
}

func (n notifier) Due(ctx context.Context, jobID string) error {
	id := "due-" + jobID + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	return bus.Publish(ctx, n.js, contracts.SubjectDue, contracts.Due{JobID: jobID}, id)
}

func (n notifier) Cancel(workerID string, l contracts.Lease) error {
	b, err := json.Marshal(contracts.CancelJob{JobID: l.JobID, Claim: l.Claim})
	if err != nil {
		return err
	}
	return n.nc.Publish(contracts.WorkerCancelSubject(workerID), b)
}

// wakeAfter wakes the dispatcher once h has applied a message: a result or
// a requeue ends runs in the store, and a claim bounds a worker's jobs by
// the runs the store shows on it, so the room a worker announced may only
// now be claimable.
func (s *Scheduler) wakeAfter(h consume.Handler) consume.Handler {
	return func(ctx context.Context, subject string, data []byte, progress func()) consume.Settle {
		settle := h(ctx, subject, data, progress)
		s.dispatch.Wake()
		return settle
	}
}
