package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/internal/progress"
)

// resultHeadroom is the part of a NATS message kept free for the result's
// envelope and error when bounding a handler's result.
const resultHeadroom = 32 << 10

// runJob is the life of one accepted attempt: claim it with the start
// heartbeat, run the handler, free the slot, report the outcome.
func (w *Worker) runJob(jctx, deliverCtx context.Context, t *task) {
	defer w.jobs.Done()
	defer w.finished(t)
	defer t.cancel(nil)
	defer w.release(t) // idempotent; covers every early return

	if !w.claim(jctx, t) {
		w.release(t)
		w.m.jobs.WithLabelValues(jobUnclaimed).Inc()
		t.log.Warn().Dur("claim_wait", w.cfg.ClaimWait).
			Msg("start heartbeat never acknowledged; job not run")
		return
	}
	var (
		res Result
		err error
	)
	w.fenceIfExpired(t)
	sc := w.newRunScratch(jctx, t)
	defer sc.remove(t)
	removeInputs := func() {}
	switch {
	case jctx.Err() != nil:
		// Lost, cancelled, expired or shut down before the handler started.
		err = context.Cause(jctx)
	default:
		t.job.scratch = sc.get
		t.job.usage = func(u contracts.Usage) { t.usage.Store(&u) }
		if len(t.job.Inputs) > 0 {
			var paths map[string]string
			var ierr error
			paths, t.job.inputDir, removeInputs, ierr = w.handOutInputs(jctx, t)
			if ierr != nil {
				err = ierr
				break
			}
			t.job.InputPaths = paths
		}
		th := progress.NewThrottle(w.cfg.ProgressInterval, w.progressSender(t), w.now)
		stopLimits := w.enforceLimits(jctx, t, th)
		hctx := w.leases.Context(jctx, t.lease, w.now, w.fenceAfter(), func() { w.fenceIfExpired(t) })
		res, err = w.call(progress.With(hctx, th), t)
		stopLimits()
		th.Stop()
		if cause := context.Cause(jctx); err != nil && (errors.Is(cause, errScratchFull) || errors.Is(cause, errRunLimit)) {
			err = cause // the handler only saw its context end
		}
	}
	removeInputs() // before the result: a run's copies never outlive it
	w.fenceIfExpired(t)
	w.release(t)

	res, err = checkResult(res, err, w.maxResultBytes())
	fenced, cancelRequested := w.leases.Flags(t.lease)
	v := decide(err, fenced, cancelRequested, errors.Is(context.Cause(jctx), errShutdown))
	w.report(deliverCtx, t, v, res)
}

// handOutInputs places private copies of t's pinned inputs in a directory
// of the run's own and returns their paths, the directory, and the
// function that removes them (call it once the run ended, also after an
// error).
func (w *Worker) handOutInputs(ctx context.Context, t *task) (map[string]string, string, func(), error) {
	dir, err := w.scratch.makeInputs(t.lease)
	if err != nil {
		return nil, "", func() {}, err
	}
	remove := func() {
		if err := w.scratch.remove(dir); err != nil {
			t.log.Warn().Err(err).Msg("input copies not removed")
		}
	}
	paths, err := w.inputs.Acquire(ctx, t.job.Tenant, t.job.Inputs, dir)
	return paths, dir, remove, err
}

// call runs the handler, turning a panic into an error.
func (w *Worker) call(ctx context.Context, t *task) (res Result, err error) {
	start := time.Now()
	defer func() {
		w.m.handlerSeconds.WithLabelValues(t.job.Kind).Observe(time.Since(start).Seconds())
		if r := recover(); r != nil {
			t.log.Error().Interface("panic", r).Bytes("stack", debug.Stack()).Msg("handler panicked")
			res, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	return t.handler(ctx, t.job)
}

// release frees the attempt's slot exactly once, stops renewing its lease
// and announces the new load.
func (w *Worker) release(t *task) {
	t.release.Do(func() {
		w.leases.Finish(t.lease)
		w.mu.Lock()
		w.slots.Release()
		w.ledger.give(t.need)
		w.setDeclaredLocked()
		if w.slots.InFlight() == 0 {
			w.idleSince = w.now()
		}
		w.broadcastLocked()
		w.m.slotsUsed.Set(float64(w.slots.InFlight()))
		w.mu.Unlock()
		w.signalAnnounce()
	})
}

// finished forgets the attempt once its outcome is reported.
func (w *Worker) finished(t *task) {
	w.leases.Remove(t.lease)
	w.mu.Lock()
	w.active--
	w.broadcastLocked()
	w.mu.Unlock()
}

// maxResultBytes is the largest result that still fits in one message.
func (w *Worker) maxResultBytes() int {
	limit := int(w.nc.MaxPayload())
	if limit <= 0 {
		limit = 1 << 20
	}
	return max(limit-resultHeadroom, 1024)
}
