package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/worker"
)

func TestResultRetriedUntilStreamExists(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	// No job stream, and a stream whose subjects overlap it, so that the
	// worker can neither publish the result nor create the stream itself.
	_, err := b.js.CreateStream(ctx, jetstream.StreamConfig{Name: "BLOCKER", Subjects: []string{contracts.SubjectDue}})
	require.NoError(t, err)

	done := make(chan struct{})
	r := b.start(testConfig(t, "w-later"), map[string]worker.Handler{
		"quick": func(context.Context, worker.Job) (worker.Result, error) {
			defer close(done)
			return worker.JSON("kept")
		},
	})
	require.Equal(t, contracts.OfferAccepted, b.offer("w-later", spec("late", "quick", 1, "")).Status)
	<-done
	require.Eventually(t, func() bool {
		return b.metric("sluice_worker_deliveries_total", map[string]string{"outcome": "retried"}) >= 2
	}, waitFor, 10*time.Millisecond, "the result delivery was not retried")
	require.Zero(t, r.w.InFlight(), "the slot is freed while the result waits")

	require.NoError(t, b.js.DeleteStream(ctx, "BLOCKER"))
	_, err = bus.EnsureStream(ctx, b.js)
	require.NoError(t, err)

	res := b.nextResult()
	require.Equal(t, "late", res.JobID)
	require.Equal(t, contracts.StateSucceeded, res.State)
	require.JSONEq(t, `"kept"`, string(res.Result))
	require.Eventually(t, func() bool {
		return b.metric("sluice_worker_deliveries_total", map[string]string{"outcome": "delivered"}) == 1
	}, waitFor, 5*time.Millisecond)
}
