package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/worker"
)

func TestIdleTimeoutReturnsNil(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := testConfig(t, "w-idle")
	cfg.IdleTimeout = 300 * time.Millisecond
	r := b.start(cfg, map[string]worker.Handler{"echo": echoHandler})

	// A job resets the idle clock; the worker still stops once idle.
	require.Equal(t, contracts.OfferAccepted, b.offer("w-idle", spec("i1", "echo", 1, "")).Status)
	require.Equal(t, "i1", b.nextResult().JobID)

	require.NoError(t, r.wait(t))
	leaving := b.sched.waitAnnounce(func(a contracts.Announce) bool { return a.Leaving })
	require.Equal(t, "w-idle", leaving.WorkerID)
	require.Zero(t, leaving.InFlight)
}

func TestMaxLifetimeDrainsThenReturns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := newBlocking()
	cfg := testConfig(t, "w-life")
	cfg.MaxLifetime = 300 * time.Millisecond
	r := b.start(cfg, map[string]worker.Handler{"block": h.handle})
	require.Equal(t, contracts.OfferAccepted, b.offer("w-life", spec("l1", "block", 1, "")).Status)
	h.waitStarted(t)

	b.sched.waitAnnounce(func(a contracts.Announce) bool { return a.Draining && !a.Leaving && a.InFlight == 1 })
	require.True(t, r.w.Draining())
	reply := b.offer("w-life", spec("l2", "block", 1, ""))
	require.Equal(t, contracts.OfferRefused, reply.Status)
	require.Equal(t, "draining", reply.Reason)
	select {
	case <-r.done:
		t.Fatal("Run returned while a job was still running")
	default:
	}

	close(h.release)
	require.Nil(t, h.waitEnded(t), "the running job finished normally")
	require.NoError(t, r.wait(t))
	res := b.nextResult()
	require.Equal(t, "l1", res.JobID)
	require.Equal(t, contracts.StateSucceeded, res.State)
	b.sched.waitAnnounce(func(a contracts.Announce) bool { return a.Leaving })
}

func TestShutdownRequeuesRunningJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := newBlocking()
	cfg := testConfig(t, "w-shutdown")
	cfg.ShutdownTimeout = 200 * time.Millisecond
	r := b.start(cfg, map[string]worker.Handler{"block": h.handle})
	require.Equal(t, contracts.OfferAccepted, b.offer("w-shutdown", spec("s1", "block", 7, "")).Status)
	h.waitStarted(t)

	start := time.Now()
	r.cancel()
	require.NoError(t, r.wait(t))
	require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "handlers get the shutdown timeout")
	require.ErrorContains(t, h.waitEnded(t), "shutting down")

	rq := b.nextRequeue()
	require.Equal(t, contracts.Requeue{JobID: "s1", Claim: 7, State: contracts.StateRunning, Reason: contracts.ReasonShutdown}, rq)
	b.noResult(200 * time.Millisecond)
	b.sched.waitAnnounce(func(a contracts.Announce) bool { return a.Leaving })
}

func TestShutdownWaitsForHandlersWithinTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := newBlocking()
	r := b.start(testConfig(t, "w-graceful"), map[string]worker.Handler{"block": h.handle})
	require.Equal(t, contracts.OfferAccepted, b.offer("w-graceful", spec("g1", "block", 1, "")).Status)
	h.waitStarted(t)

	r.cancel()
	b.sched.waitAnnounce(func(a contracts.Announce) bool { return a.Draining && !a.Leaving })
	require.Equal(t, contracts.OfferRefused, b.offer("w-graceful", spec("g2", "block", 1, "")).Status)
	close(h.release)
	require.NoError(t, r.wait(t))
	res := b.nextResult()
	require.Equal(t, "g1", res.JobID)
	require.Equal(t, contracts.StateSucceeded, res.State)
}

func TestRunTwiceFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.start(testConfig(t, "w-twice"), nil)
	require.ErrorContains(t, r.w.Run(context.Background()), "twice")
	require.ErrorContains(t, r.w.Handle("late", echoHandler), "after Run")
}

func TestRunServesItsProbeAndStopsWhenItCannot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := testConfig(t, "w-probe")
	cfg.HTTPAddr = "127.0.0.1:-1" // no such port: the probe cannot listen
	w := b.newWorker(cfg)
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	select {
	case err := <-done:
		require.ErrorContains(t, err, "probe")
	case <-time.After(30 * time.Second):
		t.Fatal("Run went on without its probe")
	}
}
