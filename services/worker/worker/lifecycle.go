package worker

import (
	"context"
	"fmt"
	"time"
)

// stopReason says why Run began to drain.
type stopReason int

const (
	stopContext  stopReason = iota // ctx ended: bounded drain
	stopIdle                       // idle timeout: nothing runs
	stopLifetime                   // max lifetime: finish what runs
)

// String names the reason in logs.
func (r stopReason) String() string {
	switch r {
	case stopIdle:
		return "idle timeout"
	case stopLifetime:
		return "max lifetime"
	default:
		return "shutdown"
	}
}

// stopGrace bounds the last wait for job goroutines after deliveries were
// abandoned; only a handler that ignores its ctx can exceed it.
const stopGrace = 2 * time.Second

// awaitStop blocks until ctx ends, the max lifetime passes or the worker
// has been idle for the idle timeout (then it is already draining).
func (w *Worker) awaitStop(ctx context.Context) stopReason {
	var lifetime <-chan time.Time
	if w.cfg.MaxLifetime > 0 {
		t := time.NewTimer(w.cfg.MaxLifetime)
		defer t.Stop()
		lifetime = t.C
	}
	var idle <-chan time.Time
	if w.cfg.IdleTimeout > 0 {
		t := time.NewTicker(idleCheckPeriod(w.cfg.IdleTimeout))
		defer t.Stop()
		idle = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return stopContext
		case <-lifetime:
			return stopLifetime
		case <-idle:
			if w.drainIfIdle() {
				return stopIdle
			}
		}
	}
}

// idleCheckPeriod is how often the idle timeout is checked.
func idleCheckPeriod(timeout time.Duration) time.Duration {
	return min(max(timeout/10, 5*time.Millisecond), time.Second)
}

// drainIfIdle starts draining when no job has run for the idle timeout,
// atomically with respect to offers.
func (w *Worker) drainIfIdle() bool {
	w.mu.Lock()
	idle := w.slots.InFlight() == 0 && !w.idleSince.IsZero() &&
		w.now().Sub(w.idleSince) >= w.cfg.IdleTimeout
	if idle && !w.draining {
		w.draining = true
		w.broadcastLocked()
	}
	w.mu.Unlock()
	if idle {
		w.signalAnnounce()
	}
	return idle
}

// drain stops taking offers and lets the jobs end. After an idle timeout
// or the max lifetime every job may finish and report; once ctx has ended
// handlers get the shutdown timeout, then are cancelled (their attempts
// requeued), and deliveries get the delivery grace on top.
func (w *Worker) drain(ctx context.Context, reason stopReason, hardCancel context.CancelCauseFunc, deliverCancel context.CancelFunc) error {
	w.setDraining()
	allDone := func() bool { return w.active == 0 }
	if reason != stopContext {
		if w.waitUntil(nil, ctx.Done(), allDone) {
			w.jobs.Wait()
			return nil
		}
		w.log.Info().Int("in_flight", w.InFlight()).Msg("shutdown requested while draining")
	}

	deadline := time.NewTimer(w.cfg.ShutdownTimeout + w.cfg.DeliveryGrace)
	defer deadline.Stop()
	handlersTimer := time.NewTimer(w.cfg.ShutdownTimeout)
	defer handlersTimer.Stop()
	if !w.waitUntil(handlersTimer.C, nil, func() bool { return w.slots.InFlight() == 0 }) {
		w.log.Warn().Int("in_flight", w.InFlight()).Dur("shutdown_timeout", w.cfg.ShutdownTimeout).
			Msg("shutdown timeout passed; cancelling running handlers and requeueing their jobs")
		hardCancel(errShutdown)
	}
	if !w.waitUntil(deadline.C, nil, allDone) {
		w.log.Error().Msg("shutdown deadline passed; abandoning pending deliveries")
		deliverCancel()
		last := time.NewTimer(stopGrace)
		defer last.Stop()
		if !w.waitUntil(last.C, nil, allDone) {
			w.mu.Lock()
			n := w.active
			w.mu.Unlock()
			return fmt.Errorf("worker: shutdown: %d jobs did not stop (a handler ignores its context)", n)
		}
	}
	w.jobs.Wait()
	return nil
}
