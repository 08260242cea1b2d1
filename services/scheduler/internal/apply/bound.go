package apply

import (
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/services/scheduler/internal/metrics"
)

// A worker's report (result, heartbeat, progress, shutdown requeue) speaks
// for the worker its subject names (contracts.ReportingWorker), never for
// the worker its body names: a NATS identity of a worker may publish on
// its own subjects only (pkg/bus.WorkerPermissions, the per-worker users of
// an outside server's configuration), so the subject is the identity the
// server checked. The body must name the same worker, and the job must be
// that worker's at the report's claim. Anything else is refused: ignored,
// counted (sluice_scheduler_refused_reports_total) and logged here, so
// that one worker's credentials cannot end, renew or report on another
// worker's jobs.

// Verdict is what CheckReport decides about one report.
type Verdict string

const (
	// VerdictApplies: the report speaks for the job: its worker holds
	// the job at the report's claim.
	VerdictApplies Verdict = "applies"
	// VerdictStale: the job is no longer at the report's claim (or no
	// longer active): a late report of a run that is over, ignored as it
	// always was.
	VerdictStale Verdict = "stale"
	// VerdictUnbound: the subject names no worker (metrics.RefusedUnbound).
	VerdictUnbound Verdict = metrics.RefusedUnbound
	// VerdictMismatch: the body names another worker than the subject
	// (metrics.RefusedMismatch).
	VerdictMismatch Verdict = metrics.RefusedMismatch
	// VerdictForeign: the job at the report's claim is another worker's
	// (metrics.RefusedForeign).
	VerdictForeign Verdict = metrics.RefusedForeign
)

// Refused reports whether v refuses the report as not its worker's.
func (v Verdict) Refused() bool {
	return v == VerdictUnbound || v == VerdictMismatch || v == VerdictForeign
}

// Reporter is the worker a report on subject speaks for: the one the
// subject names, provided the body names the same (named; "" when the
// body names none, as a requeue's). Otherwise the verdict that refuses
// it (VerdictUnbound, VerdictMismatch).
func Reporter(subject, named string) (string, Verdict) {
	worker, ok := contracts.ReportingWorker(subject)
	switch {
	case !ok:
		return "", VerdictUnbound
	case named != "" && named != worker:
		return worker, VerdictMismatch
	}
	return worker, VerdictApplies
}

// CheckReport decides whether a report of claim, carried on subject and
// naming the worker named in its body, speaks for job as the store holds
// it: the subject and the body must name the same worker (Reporter), and
// the job must be active at that claim and, once running, on that worker.
// A job pending at the claim holds the dispatch claim a worker accepted
// before its answer was lost (the claim was given back, which clears the
// job's worker): its first heartbeat or its result confirms it, from the
// worker that reports it, as before.
func CheckReport(job contracts.Job, claim int64, subject, named string) Verdict {
	worker, v := Reporter(subject, named)
	if v != VerdictApplies {
		return v
	}
	if !job.State.Active() || job.Claim != claim {
		return VerdictStale
	}
	if job.State == contracts.StateRunning && job.Worker != worker {
		return VerdictForeign
	}
	return VerdictApplies
}

// refusal is what is logged of a refused report: the subject (which names
// the reporting worker), the job and claim it was for, the worker its body
// named and, when read, the worker the job is on.
type refusal struct {
	subject, jobID string
	claim          int64
	named, holder  string
}

// refuse counts a refused report of kind (metrics.ReportResult, …) and
// logs it.
func (a *Applier) refuse(kind string, v Verdict, r refusal) {
	a.m.Refused.WithLabelValues(kind, string(v)).Inc()
	ev := a.log.Warn().Str("report", kind).Str("outcome", string(v)).Str(observe.FieldSubject, r.subject)
	if r.jobID != "" {
		ev = ev.Str(observe.FieldJobID, r.jobID).Int64(observe.FieldClaim, r.claim)
	}
	if r.named != "" {
		ev = ev.Str("named_worker", r.named)
	}
	if r.holder != "" {
		ev = ev.Str(observe.FieldWorkerID, r.holder)
	}
	ev.Msg(refusedMessage(v))
}

// refusedMessage says why a report was refused.
func refusedMessage(v Verdict) string {
	switch v {
	case VerdictUnbound:
		return "worker report refused: its subject names no worker (a worker of an earlier release, or a forged subject)"
	case VerdictMismatch:
		return "worker report refused: the message names another worker than its subject"
	default:
		return "worker report refused: the job is another worker's"
	}
}
