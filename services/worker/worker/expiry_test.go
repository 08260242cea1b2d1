package worker_test

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/observe/clocktest"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/worker"
)

// pausedConfig never ticks during a test (the periodic heartbeat is a
// minute away), so only the job goroutine's own checks can fence: fencing
// happens after 2 minutes without an acknowledgement.
func pausedConfig(t testing.TB, id string) worker.Config {
	cfg := testConfig(t, id)
	cfg.HeartbeatInterval = time.Minute
	cfg.StaleThreshold = 3 * time.Minute
	return cfg
}

// pastTheLease is a pause longer than pausedConfig's self-fencing delay.
const pastTheLease = 2*time.Minute + time.Second

// TestExpiredLeaseResultNotReported: a process paused past its lease (say
// SIGSTOP) whose handler returns as soon as it resumes, before any
// heartbeat tick, must not report the result: the job may already run
// elsewhere at a newer attempt.
func TestExpiredLeaseResultNotReported(t *testing.T) {
	t.Parallel()
	b := setup(t)
	clock := clocktest.New()
	h := newBlocking()
	r := b.start(pausedConfig(t, "w-expired"), map[string]worker.Handler{"block": h.handle}, clock.Now)
	require.Equal(t, contracts.OfferAccepted, b.offer("w-expired", spec("exp1", "block", 1, "")).Status)
	h.waitStarted(t)

	clock.Advance(pastTheLease) // the pause
	close(h.release)
	require.NoError(t, h.waitEnded(t), "the handler returned on its own")
	require.Eventually(t, func() bool { return r.w.InFlight() == 0 }, waitFor, 5*time.Millisecond)
	b.noResult(300 * time.Millisecond)
	require.EqualValues(t, 1, b.metric("sluice_worker_jobs_total", map[string]string{"state": "fenced"}))
}

// TestExpiredLeaseHandlerNotStarted: a start heartbeat acknowledged, but
// read only after a pause longer than the lease, must not start the
// handler.
func TestExpiredLeaseHandlerNotStarted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	clock := clocktest.New()
	b.sched.setAnswer(func(contracts.Heartbeat) (contracts.HeartbeatAck, bool) {
		clock.Advance(pastTheLease) // paused between sending and reading the ack
		return contracts.HeartbeatAck{}, true
	})
	h := newBlocking()
	r := b.start(pausedConfig(t, "w-expired-start"), map[string]worker.Handler{"block": h.handle}, clock.Now)
	require.Equal(t, contracts.OfferAccepted, b.offer("w-expired-start", spec("exp2", "block", 1, "")).Status)

	require.Eventually(t, func() bool {
		return b.metric("sluice_worker_jobs_total", map[string]string{"state": "fenced"}) == 1
	}, waitFor, 5*time.Millisecond)
	require.Eventually(t, func() bool { return r.w.InFlight() == 0 }, waitFor, 5*time.Millisecond)
	select {
	case j := <-h.started:
		t.Fatalf("handler started on an expired lease: %+v", j)
	default:
	}
	b.noResult(300 * time.Millisecond)
}
