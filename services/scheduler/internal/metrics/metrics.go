// Package metrics declares the scheduler's Prometheus collectors.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Offer outcome label values of sluice_scheduler_offers_total besides the
// picker's own (accepted, busy, refused, no_responders, timeout, error).
const (
	// OfferEvicted is an offer whose failure evicted the worker from the view.
	OfferEvicted = "evicted"
)

// DispatchOutcome is a label value of sluice_scheduler_dispatches_total:
// what became of a job a dispatch round looked at.
type DispatchOutcome string

// Dispatch outcomes.
const (
	// DispatchDispatched: the worker whose slot the claim gave the job
	// accepted it.
	DispatchDispatched DispatchOutcome = "dispatched"
	// DispatchOverflow: the worker did not take the job (busy, refused, or
	// no answer), and it went back to pending: a second write.
	DispatchOverflow DispatchOutcome = "overflow"
	// DispatchCapacityFailed: failed at its dispatch deadline.
	DispatchCapacityFailed DispatchOutcome = "capacity_failed"
	// DispatchNoWorker: failed early, no worker runs its kind.
	DispatchNoWorker DispatchOutcome = "no_worker"
	// DispatchTooLarge: failed, too large to be carried to a worker.
	DispatchTooLarge DispatchOutcome = "too_large"
	// DispatchDropped: a due message for a job already dispatched or finished.
	DispatchDropped DispatchOutcome = "dropped"
	// DispatchUnanswered: the worker's answer did not come (timeout, or
	// one that cannot be read); the job stays running on it, confirmed by
	// its heartbeats or requeued by the reaper once its lease is stale.
	DispatchUnanswered DispatchOutcome = "unanswered"
	// DispatchCancelled: claimed with a cancel already asked (it came while
	// the job was being given back or requeued), so it ended cancelled
	// instead of being offered.
	DispatchCancelled DispatchOutcome = "cancelled"
)

// dispatchOutcomes lists every DispatchOutcome.
var dispatchOutcomes = []DispatchOutcome{DispatchDispatched, DispatchOverflow, DispatchCapacityFailed,
	DispatchNoWorker, DispatchTooLarge, DispatchDropped, DispatchUnanswered, DispatchCancelled}

// Heartbeat outcome label values of sluice_scheduler_heartbeat_leases_total.
const (
	// HeartbeatRenewed: a held lease whose heartbeat_at was written.
	HeartbeatRenewed = "renewed"
	// HeartbeatKept: a held lease answered from a read, nothing written.
	HeartbeatKept = "kept"
	// HeartbeatPromoted: the first heartbeat of a claim given back to
	// pending after its offer's answer was lost, which the worker had
	// taken after all: written as running on it again.
	HeartbeatPromoted = "promoted"
	// HeartbeatLost: a lease no longer the worker's, nothing written.
	HeartbeatLost = "lost"
)

// Progress outcome label values of sluice_scheduler_progress_reports_total:
// each report a scheduler receives ends in exactly one of them, except
// ProgressStoreError, which counts the reports a failed write carried (a
// coalesced report stays to be written at the next flush).
const (
	// ProgressApplied: written to the store, on its own (flush period 0)
	// or as the newest report of its claim at a flush.
	ProgressApplied = "applied"
	// ProgressCoalesced: kept in memory and never written on its own: a
	// newer report of its claim replaced it, or the job's result stored
	// it with the job's end.
	ProgressCoalesced = "coalesced"
	// ProgressStale: for a claim that is no longer the job's (an old
	// claim, another worker, a job not running or gone), nothing written.
	ProgressStale = "stale"
	// ProgressMalformed: not a valid report, nothing written.
	ProgressMalformed = "malformed"
	// ProgressStoreError: the store failed to read the job or to write the report.
	ProgressStoreError = "store_error"
)

// Requeue outcome label values of sluice_scheduler_requeues_total.
const (
	// RequeueRequeued: a running job went back to pending (claim + 1).
	RequeueRequeued = "requeued"
	// RequeueRedelivered: a pending job whose due message was lost got a new one.
	RequeueRedelivered = "redelivered"
	// RequeueFailed: the job failed instead (max runtime, or max attempts).
	RequeueFailed = "failed"
	// RequeueCancelled: the job ended cancelled instead: a user had asked
	// to cancel it, and its run stopped.
	RequeueCancelled = "cancelled"
)

// Report label values of sluice_scheduler_refused_reports_total: the kind
// of worker report refused.
const (
	ReportResult    = "result"
	ReportHeartbeat = "heartbeat"
	ReportProgress  = "progress"
	ReportRequeue   = "requeue"
)

// Refusal outcome label values of sluice_scheduler_refused_reports_total:
// why a worker's report was ignored. A report speaks for a job only when
// its subject names a worker (contracts.ReportingWorker), the message
// names the same one, and the job at the report's claim is assigned to
// that worker.
const (
	// RefusedUnbound: the subject names no worker where one is needed (a
	// result on the shared subject of earlier releases, a shutdown
	// requeue on the reaper's subject, a token that is no worker id).
	RefusedUnbound = "unbound"
	// RefusedMismatch: the message names another worker than its subject
	// (worker_id), or is a requeue only the reaper sends.
	RefusedMismatch = "mismatch"
	// RefusedForeign: the job at the report's claim is another worker's.
	RefusedForeign = "foreign"
)

// Scheduler holds every collector the scheduler updates.
type Scheduler struct {
	// Evictions counts workers dropped from the view after repeated failures.
	Evictions prometheus.Counter
	// Dispatches counts dispatch outcomes (dispatched, overflow, capacity_failed, no_worker, too_large, dropped).
	Dispatches *prometheus.CounterVec
	// Claims counts dispatch claims taken from the ready queue.
	Claims prometheus.Counter
	// CapacityFailures counts jobs failed with a capacity: error at their dispatch deadline.
	CapacityFailures prometheus.Counter
	// Results counts worker results by outcome (applied, retried: a failed
	// run that goes back to pending for another, stale).
	Results *prometheus.CounterVec
	// Heartbeats counts heartbeat leases by outcome (HeartbeatRenewed,
	// HeartbeatKept, HeartbeatPromoted, HeartbeatLost).
	Heartbeats *prometheus.CounterVec
	// Progress counts workers' progress reports by outcome (ProgressApplied,
	// ProgressCoalesced, ProgressStale, ProgressMalformed, ProgressStoreError).
	Progress *prometheus.CounterVec
	// ScaleRequests counts scale requests by kind and outcome (published,
	// command_failed).
	ScaleRequests *prometheus.CounterVec
	// Dropped counts the heartbeats and progress reports the scheduler
	// dropped because its buffer for them was full, by subject.
	Dropped *prometheus.CounterVec
	// Refused counts worker reports ignored because they do not speak for
	// their worker, by report (ReportResult, …) and outcome
	// (RefusedUnbound, RefusedMismatch, RefusedForeign).
	Refused *prometheus.CounterVec

	offers    *prometheus.CounterVec
	queueWait prometheus.Histogram
	runTime   *prometheus.HistogramVec
	requeues  *prometheus.CounterVec
}

// New registers the collectors on reg (nil registers nowhere).
func New(reg prometheus.Registerer) *Scheduler {
	m := &Scheduler{
		offers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_scheduler_offers_total",
			Help: "Jobs offered to workers, by what became of each (accepted, busy, refused, no_responders, timeout, error); evicted counts the requests whose failure evicted the worker.",
		}, []string{"outcome"}),
		Evictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_scheduler_worker_evictions_total",
			Help: "Workers evicted from the view after repeated failed offers.",
		}),
		Dispatches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_scheduler_dispatches_total",
			Help: "Dispatch outcomes: dispatched (the worker whose slot the claim gave the job accepted it), overflow (the worker did not take it, busy, refused, or nobody listened: the job went back to pending, a second write), capacity_failed (dispatch deadline), no_worker (no worker runs the kind), too_large (cannot be carried), dropped (a due message for a job already dispatched or finished), unanswered (no answer came: the job stays running on the worker, confirmed by its heartbeats or requeued by the reaper once its lease is stale).",
		}, []string{"outcome"}),
		Claims: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_scheduler_claims_total",
			Help: "Ready jobs claimed into a free worker slot (running on it from the claim), each followed by an offer to that worker.",
		}),
		CapacityFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_scheduler_capacity_failures_total",
			Help: "Jobs failed with a capacity: error because no worker accepted them before their dispatch deadline.",
		}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_scheduler_queue_wait_seconds",
			Help:    "Time from submit (created_at) to running (started_at), observed when the worker a claim gave the job accepts it (or its heartbeat confirms one given back after a lost answer); a requeued job counts again from its original submit.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}),
		runTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_scheduler_run_duration_seconds",
			Help:    "Time from running (started_at) to the final state, observed when a worker's result is applied, by final state.",
			Buckets: prometheus.ExponentialBuckets(0.001, 3, 14),
		}, []string{"state"}),
		Results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_scheduler_results_total",
			Help: "Worker results, by outcome (applied, retried: a failed run that goes back to pending for another after a backoff, stale: for an old claim and ignored).",
		}, []string{"outcome"}),
		requeues: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_scheduler_requeues_total",
			Help: "Requeue events that changed a job, by reason (stale, lost, timeout, shutdown) and outcome (requeued, redelivered, failed, cancelled).",
		}, []string{"reason", "outcome"}),
		Heartbeats: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_scheduler_heartbeat_leases_total",
			Help: "Leases in worker heartbeats, by outcome (renewed: held, its lease written; kept: held, answered from a read without a write as its stored heartbeat is younger than SLUICE_SCHEDULER_LEASE_RENEW_AFTER; promoted: a heartbeat for a job given back to pending that its worker had taken after all, written as running again; lost: no longer the worker's, nothing written).",
		}, []string{"outcome"}),
	}
	// Every known series exists from the start, so dashboards and alerts
	// see zeros rather than gaps.
	for _, o := range []string{"accepted", "busy", "refused", "no_responders", "timeout", "error", OfferEvicted} {
		m.offers.WithLabelValues(o)
	}
	for _, o := range dispatchOutcomes {
		m.Dispatches.WithLabelValues(string(o))
	}
	for _, o := range []string{"applied", "retried", "stale"} {
		m.Results.WithLabelValues(o)
	}
	for _, o := range []string{HeartbeatRenewed, HeartbeatKept, HeartbeatPromoted, HeartbeatLost} {
		m.Heartbeats.WithLabelValues(o)
	}
	for _, rq := range [][2]string{
		{string(contracts.ReasonStale), RequeueRequeued}, {string(contracts.ReasonStale), RequeueFailed},
		{string(contracts.ReasonShutdown), RequeueRequeued}, {string(contracts.ReasonLost), RequeueRedelivered},
		{string(contracts.ReasonTimeout), RequeueFailed},
	} {
		m.requeues.WithLabelValues(rq[0], rq[1])
	}
	m.Progress = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_scheduler_progress_reports_total",
		Help: "Workers' progress reports, by outcome (applied: written to the store, each report at flush period 0, else the newest of its claim once per SLUICE_SCHEDULER_PROGRESS_FLUSH; coalesced: replaced by a newer report of its claim or stored with the job's result, never written on its own; stale: for a claim no longer the job's; malformed; store_error: the job could not be read or the write failed).",
	}, []string{"outcome"})
	for _, o := range []string{ProgressApplied, ProgressCoalesced, ProgressStale, ProgressMalformed, ProgressStoreError} {
		m.Progress.WithLabelValues(o)
	}
	m.ScaleRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_scheduler_scale_requests_total",
		Help: "Requests for one more worker (ready jobs of a kind found no free slot), by kind and outcome (published; command_failed when SLUICE_SCHEDULER_SPAWN=command and the command failed).",
	}, []string{"kind", "outcome"})
	m.Dropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_scheduler_dropped_messages_total",
		Help: "Heartbeats and progress reports dropped because the scheduler's buffer for them was full (a dropped heartbeat is answered by none: the worker sends the next one), by subject.",
	}, []string{"subject"})
	for _, subj := range []string{contracts.HeartbeatSubjects, contracts.ProgressSubjects} {
		m.Dropped.WithLabelValues(subj)
	}
	m.Refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_scheduler_refused_reports_total",
		Help: "Worker reports ignored because they do not speak for the worker that holds the job, by report (result, heartbeat, progress, requeue) and outcome (unbound: the subject names no worker, e.g. a result on the shared subject of an earlier release; mismatch: the message names another worker than its subject; foreign: the job at that claim is another worker's). A heartbeat for another worker's lease is answered lost and counted in sluice_scheduler_heartbeat_leases_total.",
	}, []string{"report", "outcome"})
	for _, r := range []string{ReportResult, ReportHeartbeat, ReportProgress, ReportRequeue} {
		for _, o := range []string{RefusedUnbound, RefusedMismatch, RefusedForeign} {
			m.Refused.WithLabelValues(r, o)
		}
	}
	if reg != nil {
		reg.MustRegister(m.Progress, m.ScaleRequests, m.Dropped, m.Refused)
		reg.MustRegister(m.offers, m.Evictions, m.Dispatches, m.Claims, m.CapacityFailures,
			m.queueWait, m.runTime, m.Results, m.requeues, m.Heartbeats)
	}
	return m
}

// Offer counts one offer by its outcome; an offer whose failure evicted the
// worker counts as evicted (and as one eviction) instead.
func (m *Scheduler) Offer(outcome string, evicted bool) {
	if evicted {
		m.offers.WithLabelValues(OfferEvicted).Inc()
		m.Evictions.Inc()
		return
	}
	m.offers.WithLabelValues(outcome).Inc()
}

// Dispatch counts one dispatch outcome.
func (m *Scheduler) Dispatch(o DispatchOutcome) { m.Dispatches.WithLabelValues(string(o)).Inc() }

// Started observes the queue wait of jobs a claim or a heartbeat just started
// running: started_at − created_at. Jobs without either time are skipped; a
// negative wait (clock skew between gateway and scheduler hosts) counts as 0.
func (m *Scheduler) Started(jobs []contracts.Job) {
	for _, j := range jobs {
		if j.StartedAt == nil || j.CreatedAt.IsZero() {
			continue
		}
		m.queueWait.Observe(max(j.StartedAt.Sub(j.CreatedAt), 0).Seconds())
	}
}

// Finished observes the run time of a job whose result moved it from
// running (since startedAt) to state at now. A job that never ran (nil
// startedAt) is skipped.
func (m *Scheduler) Finished(state contracts.JobState, startedAt *time.Time, now time.Time) {
	if startedAt == nil {
		return
	}
	m.runTime.WithLabelValues(string(state)).Observe(max(now.Sub(*startedAt), 0).Seconds())
}

// Requeue counts one requeue event that changed a job: reason is the
// event's (a contracts.Reason* value), outcome one of the Requeue* values.
func (m *Scheduler) Requeue(reason contracts.RequeueReason, outcome string) {
	m.requeues.WithLabelValues(string(reason), outcome).Inc()
}
