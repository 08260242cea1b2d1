// Package reaper is the Sluice reaper as a library: on boot and every tick
// it requeues stale running jobs through JetStream (the scheduler applies
// each event with a compare-and-set), fails jobs past the hard max runtime,
// purges finished jobs past retention and repairs admission counters.
package reaper

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/reaper/internal/sweep"
)

// Deps are the reaper's dependencies, wired by hand.
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

// Reaper runs sweeps on a timer.
type Reaper struct {
	cfg     Config
	deps    Deps
	sweeper *sweep.Sweeper
	probe   *observe.Probe
	m       *metrics
}

// New builds a reaper.
func New(cfg Config, d Deps) (*Reaper, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Store == nil || d.JS == nil {
		return nil, fmt.Errorf("reaper: store and jetstream are required")
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Registry == nil {
		d.Registry = observe.NewRegistry()
	}
	m, err := newMetrics(d.Registry)
	if err != nil {
		return nil, err
	}
	r := &Reaper{cfg: cfg, deps: d, m: m}
	r.sweeper = sweep.New(sweep.Config{
		StaleThreshold: cfg.StaleThreshold, MaxRuntime: cfg.MaxRuntime,
		Retention: cfg.Retention, Batch: cfg.MaxBatch,
	}, d.Store, publisher{js: d.JS}, d.Now)
	r.probe = observe.NewProbe(d.Log, d.Registry)
	r.probe.AddCheck("store", d.Store.Ping)
	r.probe.AddCheck("nats", func(ctx context.Context) error { return bus.Check(ctx, d.NC, d.JS) })
	return r, nil
}

// Probe returns the reaper's health and readiness checks.
func (r *Reaper) Probe() *observe.Probe { return r.probe }

// Sweep runs one sweep now and records its metrics.
func (r *Reaper) Sweep(ctx context.Context) (sweep.Report, error) {
	start := time.Now()
	rep, err := r.sweeper.Run(ctx)
	r.m.observe(rep, time.Since(start))
	return rep, err
}

// Run sweeps on boot and every interval until ctx ends; a sweep in
// progress then may finish within SLUICE_SHUTDOWN_TIMEOUT. It serves
// /healthz, /readyz and /metrics on SLUICE_REAPER_HTTP_ADDR meanwhile.
func (r *Reaper) Run(ctx context.Context) error {
	r.deps.Log.Info().Dur("interval", r.cfg.Interval).Msg("reaper started")
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return r.probe.Serve(gctx, r.cfg.HTTPAddr) })
	g.Go(func() error {
		sweepCtx, cancel := observe.DrainContext(gctx, r.cfg.ShutdownTimeout)
		defer cancel()
		t := time.NewTicker(r.cfg.Interval)
		defer t.Stop()
		for {
			rep, err := r.Sweep(sweepCtx)
			if err != nil && sweepCtx.Err() == nil {
				r.deps.Log.Warn().Err(err).Msg("sweep incomplete; retrying next tick")
			}
			if n := len(rep.Requeued); n > 0 || rep.Purged > 0 || rep.Drift > 0 {
				r.deps.Log.Info().Interface("requeued", rep.Requeued).Int("purged", rep.Purged).Int("drift", rep.Drift).Msg("sweep")
			}
			select {
			case <-gctx.Done():
				return nil
			case <-t.C:
			}
		}
	})
	return g.Wait()
}

// publisher sends requeue events to JetStream.
type publisher struct{ js jetstream.JetStream }

func (p publisher) Requeue(ctx context.Context, rq contracts.Requeue) error {
	return bus.Publish(ctx, p.js, contracts.SubjectRequeue, rq, "")
}
