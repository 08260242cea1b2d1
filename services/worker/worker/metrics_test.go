package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/worker"
)

// histogramCount reads the sample count of one histogram series; 0 when
// absent.
func (b *bundle) histogramCount(name string, labels map[string]string) uint64 {
	b.t.Helper()
	return b.find(name, labels).GetHistogram().GetSampleCount()
}

func TestMetricsOfHandlersAndSlots(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	r := b.start(testConfig(t, "w-metrics"), map[string]worker.Handler{
		"ok":  func(context.Context, worker.Job) (worker.Result, error) { <-release; return nil, nil },
		"bad": func(context.Context, worker.Job) (worker.Result, error) { return nil, errors.New("boom") },
	})
	// Every outcome series exists before the first job.
	for _, s := range []string{"succeeded", "failed", "cancelled", "requeued", "fenced", "unclaimed"} {
		require.Contains(t, b.series("sluice_worker_jobs_total"), map[string]string{"state": s})
	}
	for _, r := range []string{"lost", "unacknowledged"} {
		require.Contains(t, b.series("sluice_worker_leases_fenced_total"), map[string]string{"reason": r})
	}
	require.EqualValues(t, 1, b.metric("sluice_worker_slots_capacity", map[string]string{"worker_id": "w-metrics"}))
	require.Equal(t, contracts.OfferAccepted, b.offer("w-metrics", spec("m1", "ok", 1, "")).Status)
	require.EqualValues(t, 1, b.metric("sluice_worker_slots_used", map[string]string{"worker_id": "w-metrics"}))
	require.Equal(t, contracts.OfferBusy, b.offer("w-metrics", spec("m2", "bad", 1, "")).Status)
	close(release)
	require.Equal(t, contracts.StateSucceeded, b.nextResult().State)
	require.Eventually(t, func() bool { return r.w.InFlight() == 0 }, waitFor, 5*time.Millisecond)
	require.Equal(t, contracts.OfferAccepted, b.offer("w-metrics", spec("m2", "bad", 1, "")).Status)
	require.Equal(t, contracts.StateFailed, b.nextResult().State)

	require.Eventually(t, func() bool {
		return b.histogramCount("sluice_worker_handler_duration_seconds", map[string]string{"kind": "bad"}) == 1
	}, waitFor, 5*time.Millisecond)
	require.EqualValues(t, 1, b.histogramCount("sluice_worker_handler_duration_seconds", map[string]string{"kind": "ok"}))
	require.EqualValues(t, 0, b.metric("sluice_worker_slots_used", map[string]string{"worker_id": "w-metrics"}))
	require.EqualValues(t, 2, b.metric("sluice_worker_offers_total", map[string]string{"outcome": "accepted"}))
	require.EqualValues(t, 1, b.metric("sluice_worker_offers_total", map[string]string{"outcome": "busy"}))
	require.EqualValues(t, 1, b.metric("sluice_worker_jobs_total", map[string]string{"state": "succeeded"}))
	require.EqualValues(t, 1, b.metric("sluice_worker_jobs_total", map[string]string{"state": "failed"}))
}

// series lists the label sets of a family in the bundle's registry.
func (b *bundle) series(name string) []map[string]string {
	b.t.Helper()
	families, err := b.reg.Gather()
	require.NoError(b.t, err)
	var out []map[string]string
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			out = append(out, labels)
		}
	}
	return out
}
