package worker_test

import (
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/worker"
)

var cancelledError = contracts.JobError(contracts.ClassCancelled, "cancelled by request")

func TestCancelViaSubject(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := newBlocking()
	r := b.start(testConfig(t, "w-cancel"), map[string]worker.Handler{"block": h.handle})
	require.Equal(t, contracts.OfferAccepted, b.offer("w-cancel", spec("c1", "block", 5, "")).Status)
	h.waitStarted(t)

	// A cancel for another attempt or job changes nothing.
	for _, c := range []contracts.CancelJob{{JobID: "c1", Claim: 4}, {JobID: "other", Claim: 5}} {
		data, err := json.Marshal(c)
		require.NoError(t, err)
		require.NoError(t, b.nc.Publish(contracts.WorkerCancelSubject("w-cancel"), data))
	}
	require.NoError(t, b.nc.Publish(contracts.WorkerCancelSubject("w-cancel"), []byte("garbage")))
	data, err := json.Marshal(contracts.CancelJob{JobID: "c1", Claim: 5})
	require.NoError(t, err)
	require.NoError(t, b.nc.Publish(contracts.WorkerCancelSubject("w-cancel"), data))

	require.ErrorContains(t, h.waitEnded(t), "cancelled by request")
	require.Eventually(t, func() bool { return r.w.InFlight() == 0 }, 2*time.Second, time.Millisecond, "slot not freed at once")
	res := b.nextResult()
	require.Equal(t, contracts.StateCancelled, res.State)
	require.Equal(t, cancelledError, res.Error)
	require.EqualValues(t, 5, res.Claim)
}

func TestCancelViaHeartbeatAck(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := newBlocking()
	l := contracts.Lease{JobID: "c2", Claim: 1}
	var started atomic.Bool
	b.sched.setAnswer(func(hb contracts.Heartbeat) (contracts.HeartbeatAck, bool) {
		if started.Load() && slices.Contains(hb.Leases, l) {
			return contracts.HeartbeatAck{Cancel: []contracts.Lease{l}}, true
		}
		return contracts.HeartbeatAck{}, true
	})
	b.start(testConfig(t, "w-cancel-ack"), map[string]worker.Handler{"block": h.handle})
	require.Equal(t, contracts.OfferAccepted, b.offer("w-cancel-ack", spec("c2", "block", 1, "")).Status)
	h.waitStarted(t)
	started.Store(true)

	require.ErrorContains(t, h.waitEnded(t), "cancelled by request")
	res := b.nextResult()
	require.Equal(t, contracts.StateCancelled, res.State)
	require.Equal(t, cancelledError, res.Error)
}
