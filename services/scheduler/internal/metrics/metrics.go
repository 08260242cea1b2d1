// Package metrics declares the scheduler's Prometheus collectors.
package metrics

import "github.com/prometheus/client_golang/prometheus"

// Scheduler holds every collector the scheduler updates.
type Scheduler struct {
	// Offers counts offers by outcome (accepted, busy, refused, no_responders, timeout, error).
	Offers *prometheus.CounterVec
	// Evictions counts workers dropped from the view after repeated failures.
	Evictions prometheus.Counter
	// Dispatches counts due messages by outcome (dispatched, overflow, capacity_failed, dropped).
	Dispatches *prometheus.CounterVec
	// OffersPerDispatch observes how many offers one dispatched job took.
	OffersPerDispatch prometheus.Histogram
	// QueueWait observes submit → accepted.
	QueueWait prometheus.Histogram
	// RunTime observes accepted → result.
	RunTime prometheus.Histogram
	// Results counts worker results by outcome (applied, stale).
	Results *prometheus.CounterVec
	// Requeues counts applied requeues by reason.
	Requeues *prometheus.CounterVec
	// Heartbeats counts heartbeat leases by outcome (renewed, promoted, lost).
	Heartbeats *prometheus.CounterVec
}

// New registers the collectors on reg.
func New(reg prometheus.Registerer) *Scheduler {
	m := &Scheduler{
		Offers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_scheduler_offers_total", Help: "Offers sent to workers, by outcome.",
		}, []string{"outcome"}),
		Evictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_scheduler_worker_evictions_total", Help: "Workers evicted from the view after repeated failed offers.",
		}),
		Dispatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_scheduler_dispatches_total", Help: "Due messages handled, by outcome.",
		}, []string{"outcome"}),
		OffersPerDispatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_scheduler_offers_per_dispatch", Help: "Offers one dispatched job took.",
			Buckets: []float64{1, 2, 3, 4, 6, 8, 16, 32},
		}),
		QueueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_job_queue_wait_seconds", Help: "Time from submit to acceptance by a worker.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}),
		RunTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "sluice_job_run_seconds", Help: "Time from start to result.",
			Buckets: prometheus.ExponentialBuckets(0.001, 3, 14),
		}),
		Results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_scheduler_results_total", Help: "Worker results, by outcome (applied, stale).",
		}, []string{"outcome"}),
		Requeues: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_scheduler_requeues_total", Help: "Requeue events applied, by reason.",
		}, []string{"reason"}),
		Heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_scheduler_heartbeat_leases_total", Help: "Heartbeat leases, by outcome.",
		}, []string{"outcome"}),
	}
	if reg != nil {
		reg.MustRegister(m.Offers, m.Evictions, m.Dispatches, m.OffersPerDispatch, m.QueueWait, m.RunTime,
			m.Results, m.Requeues, m.Heartbeats)
	}
	return m
}
