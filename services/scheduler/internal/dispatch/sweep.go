package dispatch

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/scheduler/internal/metrics"
)

// sweepBatch bounds the jobs one sweep fails.
const sweepBatch = 500

// sweepLoop runs the dispatch deadline sweep every SweepInterval until ctx
// ends: pending jobs whose deadline passed, holding no live claim, fail
// with a capacity: error. Every scheduler sweeps; the compare-and-set makes
// each job fail once.
func (d *Dispatcher) sweepLoop(ctx context.Context) {
	t := time.NewTicker(d.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := d.Sweep(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn().Err(err).Msg("dispatch deadline sweep failed; trying again")
		}
	}
}

// Sweep fails the pending jobs whose dispatch deadline passed, and those
// of kinds no live worker has run for NoWorkerGrace, and says how many it
// failed.
func (d *Dispatcher) Sweep(ctx context.Context) (int, error) {
	now := d.now()
	jobs, err := d.jobs.Stale(ctx, store.StaleQuery{Now: now, DeadlineBefore: now, Limit: sweepBatch})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, j := range jobs {
		if d.fail(ctx, j, capacityError(j), metrics.DispatchCapacityFailed) {
			n++
		}
	}
	absent, err := d.sweepAbsentKinds(ctx, now)
	return n + absent, err
}

// sweepAbsentKinds fails the waiting jobs of every kind no live worker has
// announced for NoWorkerGrace (none when the grace is off).
func (d *Dispatcher) sweepAbsentKinds(ctx context.Context, now time.Time) (int, error) {
	if d.cfg.NoWorkerGrace <= 0 {
		return 0, nil
	}
	kinds, err := d.jobs.PendingKinds(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, kind := range kinds {
		if left, absent := d.noWorker(kind, now); !absent || left > 0 {
			continue
		}
		jobs, err := d.jobs.Stale(ctx, store.StaleQuery{Now: now, Kind: kind, Limit: sweepBatch})
		if err != nil {
			return n, err
		}
		for _, j := range jobs {
			if d.fail(ctx, j, noWorkerError(kind, d.cfg.NoWorkerGrace), metrics.DispatchNoWorker) {
				n++
			}
		}
	}
	return n, nil
}
