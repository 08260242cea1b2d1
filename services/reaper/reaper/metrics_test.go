package reaper

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/reaper/internal/sweep"
)

func TestSweepMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// Every reason starts at zero.
	for _, r := range []string{string(contracts.ReasonStale), string(contracts.ReasonTimeout)} {
		require.Zero(t, testutil.ToFloat64(b.r.m.found.WithLabelValues(r)))
		require.Zero(t, testutil.ToFloat64(b.r.m.published.WithLabelValues(r)))
	}

	b.running("stale", b.now.Add(-time.Minute))
	b.admit("done", b.now.Add(-3*time.Hour))
	msg := "handler: x"
	_, err := b.store.Transition(ctx, store.Expect{ID: "done", State: contracts.StatePending},
		store.Change{Now: b.now.Add(-2 * time.Hour), State: contracts.StateFailed, Error: &msg})
	require.NoError(t, err)

	_, err = b.r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 1.0, testutil.ToFloat64(b.r.m.found.WithLabelValues(string(contracts.ReasonStale))))
	require.Equal(t, 1.0, testutil.ToFloat64(b.r.m.published.WithLabelValues(string(contracts.ReasonStale))))
	require.Equal(t, 1.0, testutil.ToFloat64(b.r.m.purged))
	require.Zero(t, testutil.ToFloat64(b.r.m.drift))
	require.Equal(t, uint64(1), sweeps(t, b))

	// The stale job is still running (nobody applied the requeue): the next
	// sweep finds and publishes it again.
	_, err = b.r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, 2.0, testutil.ToFloat64(b.r.m.found.WithLabelValues(string(contracts.ReasonStale))))
	require.Equal(t, 2.0, testutil.ToFloat64(b.r.m.published.WithLabelValues(string(contracts.ReasonStale))))
	require.Equal(t, 1.0, testutil.ToFloat64(b.r.m.purged))
	require.Equal(t, uint64(2), sweeps(t, b))

	// All of it is served on the probe's registry under these names.
	n, err := testutil.GatherAndCount(b.r.deps.Registry,
		"sluice_reaper_sweep_duration_seconds", "sluice_reaper_jobs_found_total",
		"sluice_reaper_requeues_published_total", "sluice_reaper_purged_jobs_total", "sluice_reaper_admission_drift_repaired_total")
	require.NoError(t, err)
	require.Equal(t, 1+2+2+1+1, n)
}

// sweeps is how many sweeps the duration histogram observed.
func sweeps(t *testing.T, b *bundle) uint64 {
	t.Helper()
	mfs, err := b.r.deps.Registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "sluice_reaper_sweep_duration_seconds" {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatal("no sweep duration histogram")
	return 0
}

func TestMetricsObserveAReport(t *testing.T) {
	t.Parallel()
	m, err := newMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	// The bus went down after the first publish: two found, one published.
	m.observe(sweep.Report{
		Found:    map[contracts.RequeueReason]int{contracts.ReasonStale: 2},
		Requeued: map[contracts.RequeueReason]int{contracts.ReasonStale: 1},
		Purged:   4,
		Drift:    3,
	}, time.Millisecond)
	require.Equal(t, 2.0, testutil.ToFloat64(m.found.WithLabelValues(string(contracts.ReasonStale))))
	require.Equal(t, 1.0, testutil.ToFloat64(m.published.WithLabelValues(string(contracts.ReasonStale))))
	require.Equal(t, 4.0, testutil.ToFloat64(m.purged))
	require.Equal(t, 3.0, testutil.ToFloat64(m.drift))

	_, err = newMetrics(nil)
	require.Error(t, err)
}

func TestMetricsRegisterOncePerRegistry(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	_, err := newMetrics(reg)
	require.NoError(t, err)
	_, err = newMetrics(reg)
	require.ErrorContains(t, err, "reaper: register metrics")
}
