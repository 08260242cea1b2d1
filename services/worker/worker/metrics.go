package worker

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Label values of the worker's metrics.
const (
	outcomeAccepted = "accepted"
	outcomeBusy     = "busy"
	outcomeRefused  = "refused"

	heartbeatAcked  = "acked"
	heartbeatFailed = "failed"

	deliveryDelivered = "delivered"
	deliveryRetried   = "retried"
	deliveryAbandoned = "abandoned"

	jobRequeued  = "requeued"  // given back on shutdown
	jobFenced    = "fenced"    // lease lost or unacknowledged: nothing reported
	jobUnclaimed = "unclaimed" // the start heartbeat was never acknowledged

	fenceLost           = "lost"           // the scheduler answered that the lease is gone
	fenceUnacknowledged = "unacknowledged" // no heartbeat acknowledged for too long
	fenceWarden         = "warden"         // the run warden killed a run whose lease passed (the worker was stopped or stuck)
)

// metrics are the worker's Prometheus series.
type metrics struct {
	slotsUsed  prometheus.Gauge
	slotsTotal prometheus.Gauge
	offers     *prometheus.CounterVec
	jobs       *prometheus.CounterVec
	heartbeats *prometheus.CounterVec
	deliveries *prometheus.CounterVec
	progress   *prometheus.CounterVec
	// handlerSeconds observes handler run times by kind (kinds are the
	// handlers registered in code, so the label is bounded).
	handlerSeconds *prometheus.HistogramVec
	// fenced counts leases whose handler was cancelled, by reason.
	fenced *prometheus.CounterVec
	// cpu and memory are the worker's capacity and what its running jobs
	// declared of it; pressure is 1 while measured use is above a target.
	cpuCapacity, cpuDeclared       prometheus.Gauge
	memoryCapacity, memoryDeclared prometheus.Gauge
	pressure                       prometheus.Gauge
}

// newMetrics registers the worker's series on reg. Series another worker
// already registered there are shared.
func newMetrics(reg prometheus.Registerer, workerID string) (*metrics, error) {
	used, err := register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_worker_slots_used",
		Help: "Job slots in use (jobs accepted and not yet finished).",
	}, []string{"worker_id"}))
	if err != nil {
		return nil, err
	}
	total, err := register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_worker_slots_capacity",
		Help: "Job slots of the worker; 0 means no limit.",
	}, []string{"worker_id"}))
	if err != nil {
		return nil, err
	}
	offers, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_worker_offers_total",
		Help: "Offers answered, by outcome (accepted, busy, refused).",
	}, []string{"outcome"}))
	if err != nil {
		return nil, err
	}
	jobs, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_worker_jobs_total",
		Help: "Attempts finished, by state (succeeded, failed, cancelled, requeued, fenced, unclaimed).",
	}, []string{"state"}))
	if err != nil {
		return nil, err
	}
	heartbeats, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_worker_heartbeats_total",
		Help: "Heartbeat requests, by outcome (acked, failed).",
	}, []string{"outcome"}))
	if err != nil {
		return nil, err
	}
	deliveries, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_worker_deliveries_total",
		Help: "Durable publishes of results and requeues, by outcome (delivered, retried, abandoned).",
	}, []string{"outcome"}))
	if err != nil {
		return nil, err
	}
	progress, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_worker_progress_reports_total",
		Help: "Progress reports published after throttling, by outcome (sent, dropped).",
	}, []string{"outcome"}))
	if err != nil {
		return nil, err
	}
	handlerSeconds, err := register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_worker_handler_duration_seconds",
		Help:    "Time a job handler ran (its return, panic or cancellation included), by kind.",
		Buckets: prometheus.ExponentialBuckets(0.001, 3, 14),
	}, []string{"kind"}))
	if err != nil {
		return nil, err
	}
	fenced, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_worker_leases_fenced_total",
		Help: "Leases whose handler the worker cancelled itself, by reason (lost: the scheduler said the lease is gone; unacknowledged: heartbeats went unanswered too long).",
	}, []string{"reason"}))
	if err != nil {
		return nil, err
	}
	var gauges [5]*prometheus.GaugeVec
	for i, opts := range []prometheus.GaugeOpts{
		{Name: "sluice_worker_cpu_capacity_cores", Help: "CPU cores the declared resources of the worker's running jobs may add up to (SLUICE_WORKER_CPU)."},
		{Name: "sluice_worker_cpu_declared_cores", Help: "CPU cores the worker's running jobs declared (or got by default)."},
		{Name: "sluice_worker_memory_capacity_bytes", Help: "Memory the declared resources of the worker's running jobs may add up to (SLUICE_WORKER_MEMORY)."},
		{Name: "sluice_worker_memory_declared_bytes", Help: "Memory the worker's running jobs declared (or got by default)."},
		{Name: "sluice_worker_over_target", Help: "1 while the worker's measured memory or CPU use is above its target (SLUICE_WORKER_TARGET_MEMORY, SLUICE_WORKER_TARGET_CPU) and it answers busy, else 0."},
	} {
		g, err := register(reg, prometheus.NewGaugeVec(opts, []string{"worker_id"}))
		if err != nil {
			return nil, err
		}
		gauges[i] = g
	}
	// Start every known series at zero so dashboards see them before the first event.
	for _, o := range []string{"sent", "dropped"} {
		progress.WithLabelValues(o)
	}
	for _, s := range []string{string(contracts.StateSucceeded), string(contracts.StateFailed), string(contracts.StateCancelled), jobRequeued, jobFenced, jobUnclaimed} {
		jobs.WithLabelValues(s)
	}
	for _, r := range []string{fenceLost, fenceUnacknowledged, fenceWarden} {
		fenced.WithLabelValues(r)
	}
	for _, o := range []string{outcomeAccepted, outcomeBusy, outcomeRefused} {
		offers.WithLabelValues(o)
	}
	for _, o := range []string{heartbeatAcked, heartbeatFailed} {
		heartbeats.WithLabelValues(o)
	}
	for _, o := range []string{deliveryDelivered, deliveryRetried, deliveryAbandoned} {
		deliveries.WithLabelValues(o)
	}
	return &metrics{
		slotsUsed:  used.WithLabelValues(workerID),
		slotsTotal: total.WithLabelValues(workerID),
		offers:     offers,
		jobs:       jobs,
		heartbeats: heartbeats,
		deliveries: deliveries,
		progress:   progress,

		handlerSeconds: handlerSeconds,
		fenced:         fenced,

		cpuCapacity:    gauges[0].WithLabelValues(workerID),
		cpuDeclared:    gauges[1].WithLabelValues(workerID),
		memoryCapacity: gauges[2].WithLabelValues(workerID),
		memoryDeclared: gauges[3].WithLabelValues(workerID),
		pressure:       gauges[4].WithLabelValues(workerID),
	}, nil
}

// register adds c to reg, or returns the equal collector registered before.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("register metrics: %w", err)
}
