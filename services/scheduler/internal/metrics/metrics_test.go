package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestOfferCountsEvictionsAsTheirOwnOutcome(t *testing.T) {
	t.Parallel()
	m := New(prometheus.NewRegistry())
	require.Equal(t, 7, testutil.CollectAndCount(m.offers), "every outcome exists from the start")
	m.Offer("accepted", false)
	m.Offer("timeout", false)
	m.Offer("timeout", true)
	require.Equal(t, 1.0, testutil.ToFloat64(m.offers.WithLabelValues("accepted")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.offers.WithLabelValues("timeout")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.offers.WithLabelValues(OfferEvicted)))
	require.Equal(t, 1.0, testutil.ToFloat64(m.Evictions))
}

func TestStartedObservesQueueWait(t *testing.T) {
	t.Parallel()
	m := New(prometheus.NewRegistry())
	created := time.Unix(1_700_000_000, 0)
	at := func(d time.Duration) *time.Time { v := created.Add(d); return &v }
	m.Started([]contracts.Job{
		{ID: "a", CreatedAt: created, StartedAt: at(1500 * time.Millisecond)},
		{ID: "b", CreatedAt: created, StartedAt: at(-time.Second)}, // clock skew: counts as 0
		{ID: "c", CreatedAt: created},                              // no start: skipped
		{ID: "d", StartedAt: at(time.Second)},                      // no submit time: skipped
	})
	count, sum := histogram(t, m.queueWait)
	require.Equal(t, uint64(2), count)
	require.InDelta(t, 1.5, sum, 1e-9)
}

func TestFinishedObservesRunTimeByState(t *testing.T) {
	t.Parallel()
	m := New(prometheus.NewRegistry())
	start := time.Unix(1_700_000_000, 0)
	m.Finished(contracts.StateSucceeded, &start, start.Add(2*time.Second))
	m.Finished(contracts.StateCancelled, &start, start.Add(time.Second))
	m.Finished(contracts.StateFailed, nil, start) // never ran: skipped
	count, sum := histogram(t, m.runTime.WithLabelValues(string(contracts.StateSucceeded)).(prometheus.Histogram))
	require.Equal(t, uint64(1), count)
	require.InDelta(t, 2.0, sum, 1e-9)
	count, _ = histogram(t, m.runTime.WithLabelValues(string(contracts.StateCancelled)).(prometheus.Histogram))
	require.Equal(t, uint64(1), count)
	require.Equal(t, 2, testutil.CollectAndCount(m.runTime), "no series for the job that never ran")
}

func TestRequeueSeriesExistFromTheStart(t *testing.T) {
	t.Parallel()
	m := New(prometheus.NewRegistry())
	require.Equal(t, 5, testutil.CollectAndCount(m.requeues))
	m.Requeue(contracts.ReasonStale, RequeueRequeued)
	require.Equal(t, 1.0, testutil.ToFloat64(m.requeues.WithLabelValues(string(contracts.ReasonStale), RequeueRequeued)))
	require.Zero(t, testutil.ToFloat64(m.requeues.WithLabelValues(string(contracts.ReasonStale), RequeueFailed)))
}

func TestRefusedSeriesExistFromTheStart(t *testing.T) {
	t.Parallel()
	m := New(prometheus.NewRegistry())
	require.Equal(t, 12, testutil.CollectAndCount(m.Refused), "four reports by three outcomes")
	require.Zero(t, testutil.ToFloat64(m.Refused.WithLabelValues(ReportResult, RefusedForeign)))
}

func TestNamesFollowTheConventions(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	New(reg)
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// histogram reads the sample count and sum of h.
func histogram(t *testing.T, h prometheus.Histogram) (uint64, float64) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(h))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	require.Len(t, mfs, 1)
	hist := mfs[0].GetMetric()[0].GetHistogram()
	return hist.GetSampleCount(), hist.GetSampleSum()
}
