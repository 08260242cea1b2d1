package worker

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/services/worker/internal/inputs"
	"github.com/sluicehq/sluice/services/worker/internal/kinds"
	"github.com/sluicehq/sluice/services/worker/internal/lease"
	"github.com/sluicehq/sluice/services/worker/internal/limit"
	"github.com/sluicehq/sluice/services/worker/internal/sandbox"
	"github.com/sluicehq/sluice/services/worker/internal/slots"
)

// Deps are the worker's dependencies, wired by hand.
type Deps struct {
	// NC is the NATS connection; JS its JetStream context (nil derives it
	// from NC).
	NC *nats.Conn
	JS jetstream.JetStream
	// Log receives the worker's logs (a zero Logger discards them).
	Log zerolog.Logger
	// Now is the clock for lease ages and idle time; nil is time.Now.
	// Timers still use the real clock.
	Now func() time.Time
	// Registry takes the worker's metrics and is what /metrics serves; nil
	// makes one with the Go and process collectors (observe.NewRegistry).
	// Several workers may share one.
	Registry *prometheus.Registry
	// Sampler measures the worker's use for measured backpressure
	// (SLUICE_WORKER_TARGET_MEMORY, SLUICE_WORKER_TARGET_CPU); nil reads
	// the worker's cgroup, else the machine (limit.NewSampler).
	Sampler Sampler
}

// Worker runs jobs offered by the scheduler. Build it with New, register
// kinds with Handle, then call Run once.
type Worker struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	log    zerolog.Logger
	now    func() time.Time
	reg    *prometheus.Registry
	probe  *observe.Probe
	m      *metrics
	slots  *slots.Slots
	leases *lease.Table
	// ledger counts the resources of running jobs (under mu).
	ledger *ledger
	// sampler measures use when a target is set.
	sampler Sampler
	// limits holds exec runs to their resources and sandbox walls their
	// programs off (both set by Run when the exec kind is registered);
	// isolation is what the sandbox gives, announced ("" without exec).
	limits    *limit.Enforcer
	sandbox   *sandbox.Sandbox
	isolation contracts.Isolation
	// seqBase starts the load reports' sequence (see load): the wall
	// clock at start, in nanoseconds, so that it grows across restarts.
	seqBase uint64

	// announceSig asks the announce loop to announce now; a burst of
	// signals coalesces into one announcement of the latest state.
	announceSig chan struct{}
	// startQ queues the attempts waiting for their start heartbeat (see startLoop).
	startQ *startQueue
	// results queues the results waiting for delivery (see resultLoop).
	results chan resultReq

	// jobs owns every job goroutine; Add happens under mu while not draining.
	jobs sync.WaitGroup

	mu        sync.Mutex
	handlers  map[string]Handler // frozen once running is set
	running   bool
	draining  bool
	idleSince time.Time     // when in-flight last dropped to 0 (zero while busy)
	pressure  string        // why measured use is above a target ("" = it is not)
	active    int           // job goroutines not yet finished (handler or delivery)
	changed   chan struct{} // closed and replaced whenever in-flight, active or draining change
	// scratch holds the runs' scratch directories (set by Run).
	scratch *scratch
	// inputs is the pinned-input cache (set by Run).
	inputs *inputs.Cache
}

// New builds a worker from cfg (see DefaultConfig and LoadConfig; Kinds
// lists the built-ins to register, MaxConcurrent 0 means no limit) and its
// dependencies. It starts nothing.
func New(cfg Config, d Deps) (*Worker, error) {
	if d.NC == nil {
		return nil, errors.New("worker: Deps.NC is required")
	}
	if d.JS == nil {
		js, err := jetstream.New(d.NC)
		if err != nil {
			return nil, fmt.Errorf("worker: jetstream: %w", err)
		}
		d.JS = js
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Registry == nil {
		d.Registry = observe.NewRegistry()
	}
	if d.Sampler == nil {
		d.Sampler = limit.NewSampler()
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("worker: invalid config: %w", err)
	}
	m, err := newMetrics(d.Registry, cfg.WorkerID)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	w := &Worker{
		cfg:         cfg,
		nc:          d.NC,
		js:          d.JS,
		log:         d.Log.With().Str(observe.FieldWorkerID, cfg.WorkerID).Logger(),
		now:         d.Now,
		reg:         d.Registry,
		m:           m,
		slots:       slots.New(cfg.MaxConcurrent),
		leases:      lease.NewTable(),
		ledger:      newLedger(cfg),
		sampler:     d.Sampler,
		seqBase:     uint64(time.Now().UnixNano()),
		announceSig: make(chan struct{}, 1),
		startQ:      newStartQueue(),
		results:     make(chan resultReq),
		handlers:    map[string]Handler{},
		changed:     make(chan struct{}),
	}
	m.slotsTotal.Set(float64(w.slots.Capacity()))
	m.slotsUsed.Set(0)
	m.cpuCapacity.Set(w.ledger.capacity.CPU)
	m.memoryCapacity.Set(float64(w.ledger.capacity.Memory))
	m.cpuDeclared.Set(0)
	m.memoryDeclared.Set(0)
	m.pressure.Set(0)
	if err := w.registerBuiltins(); err != nil {
		return nil, err
	}
	w.probe = observe.NewProbe(w.log, d.Registry)
	nc := d.NC
	w.probe.AddCheck("nats", func(ctx context.Context) error { return bus.Check(ctx, nc, nil) })
	w.probe.AddCheck("worker", func(context.Context) error {
		if w.Draining() {
			return errors.New("draining")
		}
		return nil
	})
	return w, nil
}

// Probe returns the worker's health and readiness checks.
func (w *Worker) Probe() *observe.Probe { return w.probe }

// Handle registers the handler of a kind. It must be called before Run;
// kind must satisfy contracts.ValidKind and may be registered only once.
func (w *Worker) Handle(kind string, h Handler) error {
	if !contracts.ValidKind(kind) {
		return fmt.Errorf("worker: kind %q is not a valid kind", kind)
	}
	if h == nil {
		return fmt.Errorf("worker: kind %q: nil handler", kind)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running {
		return fmt.Errorf("worker: kind %q: Handle called after Run", kind)
	}
	if _, ok := w.handlers[kind]; ok {
		return fmt.Errorf("worker: kind %q is already registered", kind)
	}
	w.handlers[kind] = h
	return nil
}

// ID returns the worker's id.
func (w *Worker) ID() string { return w.cfg.WorkerID }

// InFlight returns the number of jobs holding a slot.
func (w *Worker) InFlight() int { return w.slots.InFlight() }

// Draining reports whether the worker refuses new offers because it is
// stopping.
func (w *Worker) Draining() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.draining
}

// Kinds returns the registered kinds, sorted.
func (w *Worker) Kinds() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.handlers))
	for k := range w.handlers {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// errShutdown cancels the handlers still running when the shutdown
// timeout passes; their attempts are requeued.
var errShutdown = errors.New("worker shutting down")

// Run serves offers until ctx ends, the idle timeout or the max lifetime
// passes, then drains: it refuses new offers, waits for running jobs
// (after ctx ended, at most the shutdown timeout, then cancels and requeues
// them), waits for pending deliveries, announces that it leaves and
// returns nil. Meanwhile it serves /healthz, /readyz and /metrics on
// SLUICE_WORKER_HTTP_ADDR (when set). It may be called once.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.markRunning(); err != nil {
		return err
	}
	sc, err := openScratch(w.cfg.ScratchDir, w.cfg.WorkerID)
	if err != nil {
		return fmt.Errorf("worker: SLUICE_WORKER_SCRATCH_DIR: %w", err)
	}
	w.scratch = sc
	defer func() { _ = sc.close() }()
	allow, err := inputs.ParseAllow(w.cfg.FetchAllow)
	if err != nil {
		return fmt.Errorf("worker: %s: %w", inputs.AllowVariable, err)
	}
	ic, err := inputs.Open(filepath.Join(w.cfg.CacheDir, w.cfg.WorkerID), w.cfg.MaxCacheBytes,
		inputs.Fetchers{Timeout: w.cfg.FetchTimeout, Allow: allow})
	if err != nil {
		return fmt.Errorf("worker: SLUICE_WORKER_CACHE_DIR: %w", err)
	}
	w.inputs = ic
	defer w.openWalls()()
	// The probe serves until the drain is over, so /readyz says
	// "draining" meanwhile; if it cannot serve, the worker stops.
	ctx, stopRun := context.WithCancelCause(ctx)
	defer stopRun(nil)
	probeCtx, stopProbe := context.WithCancel(context.WithoutCancel(ctx))
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		if err := w.probe.Serve(probeCtx, w.cfg.HTTPAddr); err != nil {
			stopRun(fmt.Errorf("worker: probe: %w", err))
		}
	}()
	defer func() {
		stopProbe()
		<-probeDone
	}()
	// Handlers and deliveries outlive ctx on purpose: they stop on the
	// worker's own schedule during the drain below.
	base := context.WithoutCancel(ctx)
	hardCtx, hardCancel := context.WithCancelCause(base)
	defer hardCancel(nil)
	deliverCtx, deliverCancel := context.WithCancel(base)
	defer deliverCancel()
	loopCtx, loopCancel := context.WithCancel(base)
	defer loopCancel()

	subs, err := w.subscribe(hardCtx, deliverCtx)
	if err != nil {
		return err
	}
	w.log.Info().Int("capacity", w.slots.Capacity()).Stringer("resources", w.ledger.capacity).
		Strs("kinds", w.Kinds()).Msg("worker started")
	if slices.Contains(w.cfg.Kinds, kinds.Exec) && len(w.cfg.ExecAllow) == 0 {
		w.log.Warn().Msg("exec kind enabled with an empty SLUICE_WORKER_EXEC_ALLOW: every exec job fails")
	}

	var loops sync.WaitGroup
	loops.Go(func() { w.announceLoop(loopCtx) })
	loops.Go(func() { w.heartbeatLoop(loopCtx) })
	if w.cfg.measuring() {
		loops.Go(func() { w.sampleLoop(loopCtx) })
	}
	for range startSenders {
		loops.Go(func() { w.startLoop(loopCtx) })
	}
	for range resultSenders {
		loops.Go(func() { w.resultLoop(loopCtx, deliverCtx) })
	}

	reason := w.awaitStop(ctx)
	w.log.Info().Str("reason", reason.String()).Int("in_flight", w.InFlight()).Msg("worker draining")
	err = w.drain(ctx, reason, hardCancel, deliverCancel)

	loopCancel()
	loops.Wait()
	w.announce(true)
	w.unsubscribe(subs)
	if err == nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			err = cause // the probe failed
		}
	}
	if err != nil {
		return err
	}
	w.log.Info().Msg("worker stopped")
	return nil
}

func (w *Worker) markRunning() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running {
		return errors.New("worker: Run called twice")
	}
	w.running = true
	w.idleSince = w.now()
	return nil
}

// broadcastLocked wakes everyone waiting in waitUntil. Callers hold mu.
func (w *Worker) broadcastLocked() {
	close(w.changed)
	w.changed = make(chan struct{})
}

// waitUntil waits until cond (evaluated under mu) holds, reporting true, or
// until stop fires, reporting false.
func (w *Worker) waitUntil(stop <-chan time.Time, done <-chan struct{}, cond func() bool) bool {
	for {
		w.mu.Lock()
		ok := cond()
		ch := w.changed
		w.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-stop:
			return false
		case <-done:
			return false
		}
	}
}

// setDraining makes the worker refuse new offers and announces it.
func (w *Worker) setDraining() {
	w.mu.Lock()
	changed := !w.draining
	w.draining = true
	if changed {
		w.broadcastLocked()
	}
	w.mu.Unlock()
	if changed {
		w.signalAnnounce()
	}
}
