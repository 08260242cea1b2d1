package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/worker"
)

func TestHandlerProgressIsThrottledAndFenced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reports := make(chan *nats.Msg, 100)
	sub, err := b.nc.ChanSubscribe(contracts.ProgressSubject("w-progress"), reports)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, b.nc.Flush())

	release := make(chan struct{})
	handler := func(ctx context.Context, job worker.Job) (worker.Result, error) {
		// A chatty handler: 200 reports as fast as it can.
		for i := range 200 {
			assert.NoError(t, worker.ReportProgress(ctx, contracts.Progress{Percent: float64(i) / 2, Stage: "loop"}))
		}
		assert.Error(t, worker.ReportProgress(ctx, contracts.Progress{Percent: 101}), "a bad progress is refused")
		<-release
		return nil, nil
	}
	cfg := testConfig(t, "w-progress")
	cfg.ProgressInterval = 200 * time.Millisecond
	b.start(cfg, map[string]worker.Handler{"chatty": handler})
	require.Equal(t, contracts.OfferAccepted, b.offer("w-progress", spec("j1", "chatty", 1, "")).Status)

	// The first report goes at once, the latest of the rest when the
	// interval ends; nothing in between.
	var got []contracts.ProgressReport
	for len(got) < 2 {
		select {
		case m := <-reports:
			rep, err := contracts.DecodeProgressReport(m.Data)
			require.NoError(t, err)
			got = append(got, rep)
		case <-time.After(waitFor):
			t.Fatalf("got %d progress reports, want 2", len(got))
		}
	}
	require.Equal(t, contracts.ProgressReport{JobID: "j1", Claim: 1, WorkerID: "w-progress",
		Progress: contracts.Progress{Percent: 0, Stage: "loop"}}, got[0])
	require.InDelta(t, 99.5, got[1].Progress.Percent, 0, "the latest report wins")
	close(release)
	require.Equal(t, contracts.StateSucceeded, b.nextResult().State)
	select {
	case m := <-reports:
		t.Fatalf("a third report was sent: %s", m.Data)
	case <-time.After(300 * time.Millisecond):
	}
}

func TestReportProgressOutsideAHandlerFails(t *testing.T) {
	t.Parallel()
	require.Error(t, worker.ReportProgress(context.Background(), contracts.Progress{Percent: 1}))
}
