package scheduler_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/bus/bustest"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store/sqlite"
	"github.com/sluicehq/sluice/services/scheduler/scheduler"
)

// TestRunStartsAndDrains runs a scheduler against a real NATS server and
// store: every subscription and consumer it opens must be accepted, it
// answers a heartbeat, and it stops cleanly when its context ends.
func TestRunStartsAndDrains(t *testing.T) {
	t.Parallel()
	srv := bustest.Start(t)
	nc, js := srv.JobStream("scheduler")
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "sluice.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	cfg, err := scheduler.LoadConfig(map[string]string{"SLUICE_SCHEDULER_HTTP_ADDR": "", "SLUICE_SHUTDOWN_TIMEOUT": "2s"})
	require.NoError(t, err)
	s, err := scheduler.New(cfg, scheduler.Deps{Store: st, NC: nc, JS: js})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	// A heartbeat of a lease the store does not know comes back lost.
	caller, _ := srv.Connect("worker")
	var ack contracts.HeartbeatAck
	require.Eventually(t, func() bool {
		msg, err := caller.Request(contracts.HeartbeatSubject("w1"), []byte(`{"worker_id":"w1","leases":[{"job_id":"j1","attempt":1}]}`), time.Second)
		if err != nil {
			return false
		}
		ack, err = contracts.DecodeHeartbeatAck(msg.Data)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "no heartbeat answer")
	require.Equal(t, []contracts.Lease{{JobID: "j1", Claim: 1}}, ack.Lost)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("scheduler did not stop")
	}
}
