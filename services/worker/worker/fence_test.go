package worker_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/observe/clocktest"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/worker"
)

// fencedHandler records that it started, then waits for its ctx and
// returns success: a fenced attempt must report nothing, even a success.
type fencedHandler struct {
	started   atomic.Bool
	cancelled chan error
}

func (f *fencedHandler) handle(ctx context.Context, _ worker.Job) (worker.Result, error) {
	f.started.Store(true)
	select {
	case <-ctx.Done():
		f.cancelled <- context.Cause(ctx)
		return worker.JSON("finished anyway")
	case <-time.After(waitFor):
		return nil, nil
	}
}

func TestLostLeaseInPeriodicAckCancelsHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l := contracts.Lease{JobID: "fence1", Claim: 2}
	f := &fencedHandler{cancelled: make(chan error, 1)}
	b.sched.setAnswer(func(hb contracts.Heartbeat) (contracts.HeartbeatAck, bool) {
		if f.started.Load() && slices.Contains(hb.Leases, l) {
			return contracts.HeartbeatAck{Lost: []contracts.Lease{l}}, true
		}
		return contracts.HeartbeatAck{}, true
	})
	r := b.start(testConfig(t, "w-lost"), map[string]worker.Handler{"fence": f.handle})
	require.Equal(t, contracts.OfferAccepted, b.offer("w-lost", spec("fence1", "fence", 2, "")).Status)

	select {
	case cause := <-f.cancelled:
		require.ErrorContains(t, cause, "lost")
	case <-time.After(waitFor):
		t.Fatal("a lost lease did not cancel the handler")
	}
	require.Eventually(t, func() bool { return r.w.InFlight() == 0 }, waitFor, 5*time.Millisecond)
	b.noResult(300 * time.Millisecond)
	require.EqualValues(t, 1, b.metric("sluice_worker_jobs_total", map[string]string{"state": "fenced"}))
	require.EqualValues(t, 1, b.metric("sluice_worker_leases_fenced_total", map[string]string{"reason": "lost"}))
}

func TestMissingAcksSelfFenceHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := &fencedHandler{cancelled: make(chan error, 1)}
	var silent atomic.Bool
	b.sched.setAnswer(func(contracts.Heartbeat) (contracts.HeartbeatAck, bool) {
		return contracts.HeartbeatAck{}, !silent.Load()
	})
	clock := clocktest.New()
	cfg := testConfig(t, "w-self-fence")
	cfg.HeartbeatInterval = 50 * time.Millisecond
	cfg.StaleThreshold = 300 * time.Millisecond // fence after 200ms without an ack
	r := b.start(cfg, map[string]worker.Handler{"fence": f.handle}, clock.Now)
	l := contracts.Lease{JobID: "quiet", Claim: 1}
	require.Equal(t, contracts.OfferAccepted, b.offer("w-self-fence", spec("quiet", "fence", 1, "")).Status)
	require.Eventually(t, f.started.Load, waitFor, time.Millisecond)
	silent.Store(true) // the scheduler goes quiet

	// waitTicks waits until the worker sent a few more heartbeats.
	waitTicks := func() {
		n := b.sched.heartbeatsFor(l)
		require.Eventually(t, func() bool { return b.sched.heartbeatsFor(l) >= n+3 }, waitFor, time.Millisecond)
	}
	clock.Advance(150 * time.Millisecond)
	waitTicks()
	select {
	case cause := <-f.cancelled:
		t.Fatalf("fenced before 2/3 of the stale threshold: %v", cause)
	default:
	}

	clock.Advance(100 * time.Millisecond) // 250ms without an ack
	select {
	case cause := <-f.cancelled:
		require.ErrorContains(t, cause, "not acknowledged")
	case <-time.After(waitFor):
		t.Fatal("missing acks did not fence the handler")
	}
	require.Eventually(t, func() bool { return r.w.InFlight() == 0 }, waitFor, 5*time.Millisecond)
	b.noResult(300 * time.Millisecond)
	require.EqualValues(t, 1, b.metric("sluice_worker_jobs_total", map[string]string{"state": "fenced"}))
	require.EqualValues(t, 1, b.metric("sluice_worker_leases_fenced_total", map[string]string{"reason": "unacknowledged"}))
}

// TestErrorAcksDoNotRenew: a scheduler that answers but could not record
// the heartbeat (its store is down) renews nothing, so the worker fences
// itself before the job can go stale and run elsewhere.
func TestErrorAcksDoNotRenew(t *testing.T) {
	t.Parallel()
	b := setup(t)
	f := &fencedHandler{cancelled: make(chan error, 1)}
	var failing atomic.Bool
	b.sched.setAnswer(func(contracts.Heartbeat) (contracts.HeartbeatAck, bool) {
		if failing.Load() {
			return contracts.HeartbeatAck{Error: "store unavailable"}, true
		}
		return contracts.HeartbeatAck{}, true
	})
	clock := clocktest.New()
	cfg := testConfig(t, "w-error-ack")
	cfg.HeartbeatInterval = 50 * time.Millisecond
	cfg.StaleThreshold = 300 * time.Millisecond
	r := b.start(cfg, map[string]worker.Handler{"fence": f.handle}, clock.Now)
	l := contracts.Lease{JobID: "errack", Claim: 1}
	require.Equal(t, contracts.OfferAccepted, b.offer("w-error-ack", spec("errack", "fence", 1, "")).Status)
	require.Eventually(t, f.started.Load, waitFor, time.Millisecond)
	failing.Store(true)
	n := b.sched.heartbeatsFor(l)
	require.Eventually(t, func() bool { return b.sched.heartbeatsFor(l) >= n+2 }, waitFor, time.Millisecond)
	clock.Advance(250 * time.Millisecond)
	select {
	case cause := <-f.cancelled:
		require.ErrorContains(t, cause, "not acknowledged")
	case <-time.After(waitFor):
		t.Fatal("error acks renewed the lease")
	}
	require.Eventually(t, func() bool { return r.w.InFlight() == 0 }, waitFor, 5*time.Millisecond)
}
