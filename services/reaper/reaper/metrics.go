package reaper

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/reaper/internal/sweep"
)

// metrics are the reaper's Prometheus series.
type metrics struct {
	duration  prometheus.Histogram
	found     *prometheus.CounterVec
	published *prometheus.CounterVec
	purged    prometheus.Counter
	drift     prometheus.Counter
}

// newMetrics registers the reaper's series on reg.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, errors.New("reaper: nil metrics registerer")
	}
	m := &metrics{
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_reaper_sweep_duration_seconds",
			Help:    "Duration of one reaper sweep (find, requeue, purge, reconcile).",
			Buckets: prometheus.ExponentialBuckets(0.001, 3, 12),
		}),
		found: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_reaper_jobs_found_total",
			Help: "Jobs a sweep found to requeue, by reason (stale, timeout); a job still found on the next sweep counts again.",
		}, []string{"reason"}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_reaper_requeues_published_total",
			Help: "Requeue events published to JetStream, by reason (stale, timeout).",
		}, []string{"reason"}),
		purged: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_reaper_purged_jobs_total",
			Help: "Finished jobs deleted after the retention period.",
		}),
		drift: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_reaper_admission_drift_repaired_total",
			Help: "Admission counter drift repaired: how far the counters were off the jobs, summed over repairs.",
		}),
	}
	for _, c := range []prometheus.Collector{m.duration, m.found, m.published, m.purged, m.drift} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("reaper: register metrics: %w", err)
		}
	}
	// Every reason the reaper sends exists from the start, so dashboards
	// and alerts see zeros rather than gaps.
	for _, r := range []contracts.RequeueReason{contracts.ReasonStale, contracts.ReasonTimeout} {
		m.found.WithLabelValues(string(r))
		m.published.WithLabelValues(string(r))
	}
	return m, nil
}

// observe records one sweep that took took.
func (m *metrics) observe(rep sweep.Report, took time.Duration) {
	m.duration.Observe(took.Seconds())
	for reason, n := range rep.Found {
		m.found.WithLabelValues(string(reason)).Add(float64(n))
	}
	for reason, n := range rep.Requeued {
		m.published.WithLabelValues(string(reason)).Add(float64(n))
	}
	m.purged.Add(float64(rep.Purged))
	m.drift.Add(float64(max(rep.Drift, 0)))
}
