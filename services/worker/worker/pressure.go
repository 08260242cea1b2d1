package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/internal/limit"
)

// Sampler measures what the worker uses, its jobs included: the memory
// in use now and the CPU time used so far (limit.Sampler reads the
// worker's cgroup, else the machine; tests inject their own).
type Sampler interface {
	Sample() (limit.Measure, error)
}

// Measured backpressure: with SLUICE_WORKER_TARGET_MEMORY or
// SLUICE_WORKER_TARGET_CPU set, the worker samples its use every
// SLUICE_WORKER_SAMPLE_INTERVAL and answers busy while a sample is above
// a target, whatever its jobs declared: jobs that declare too little
// cannot push it over.

// measuring reports whether a target is set.
func (c Config) measuring() bool { return c.TargetMemory > 0 || c.TargetCPU > 0 }

// sampleLoop samples on a ticker it owns until ctx ends, and sets the
// pressure after every sample (before the next one is taken).
func (w *Worker) sampleLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.SampleInterval)
	defer t.Stop()
	var (
		prev   limit.Measure
		prevAt time.Time
		have   bool
		failed bool
	)
	for {
		m, err := w.sampler.Sample()
		now := w.now()
		switch {
		case err != nil:
			if !failed {
				w.log.Warn().Err(err).Msg("measuring the worker's use failed; measured backpressure paused")
			}
			failed = true
			w.setPressure("")
		default:
			failed = false
			var elapsed time.Duration
			if have {
				elapsed = now.Sub(prevAt)
			}
			w.setPressure(overTarget(w.cfg, w.ledger.capacity, prev, m, elapsed, have))
			prev, prevAt, have = m, now, true
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// overTarget is the measured-backpressure rule: the reason to answer busy
// when sample m (after prev, elapsed before it; have false for the first)
// is above a target of capacity, else "".
func overTarget(c Config, capacity contracts.Resources, prev, m limit.Measure, elapsed time.Duration, have bool) string {
	if c.TargetMemory > 0 && capacity.Memory > 0 {
		if f := float64(m.Memory) / float64(capacity.Memory); f > c.TargetMemory {
			return fmt.Sprintf("memory in use %.0f%% is above its target %.0f%%", 100*f, 100*c.TargetMemory)
		}
	}
	if c.TargetCPU > 0 && capacity.CPU > 0 && have && elapsed > 0 {
		if f := limit.Rate(prev, m, elapsed) / capacity.CPU; f > c.TargetCPU {
			return fmt.Sprintf("CPU in use %.0f%% is above its target %.0f%%", 100*f, 100*c.TargetCPU)
		}
	}
	return ""
}

// setPressure records the measured-backpressure reason ("" = none).
func (w *Worker) setPressure(reason string) {
	w.mu.Lock()
	changed := w.pressure != reason
	w.pressure = reason
	w.mu.Unlock()
	if changed {
		if reason != "" {
			w.m.pressure.Set(1)
			w.log.Info().Str("reason", reason).Msg("measured use above target: answering busy")
		} else {
			w.m.pressure.Set(0)
			w.log.Info().Msg("measured use back under target")
		}
	}
}
