package contracts

import "strings"

// JetStream stream and consumers. The stream carries the durable messages:
// "due" (a job should be offered), "requeue" (the reaper found a job stale or
// lost, or a worker stopped mid-job) and "result" (a worker finished an
// attempt). It is a work queue: a message is gone once its consumer
// acknowledges it.
const (
	// StreamName is the JetStream stream holding every durable job message.
	StreamName = "SLUICE_JOBS"
	// StreamSubjects is the subject filter of StreamName.
	StreamSubjects = "sluice.jobs.>"

	// SubjectDue announces that a job is ready to be offered to workers.
	SubjectDue = "sluice.jobs.due"
	// SubjectRequeue is where the reaper asks the scheduler to re-dispatch
	// a stale or lost job, or to end one past its max runtime. It names no
	// worker: the scheduler checks the reason against the store, and a
	// shutdown requeue (a worker's, see WorkerRequeueSubject) found here is
	// ignored.
	SubjectRequeue = "sluice.jobs.requeue"
	// LegacySubjectResult is where workers published their results before
	// each worker had subjects of its own (ResultSubject). It binds no
	// worker identity, so the scheduler's result consumer reads it only to
	// empty a stream carried over an upgrade, and applies nothing from it.
	LegacySubjectResult = "sluice.jobs.result"

	// ConsumerDue is the durable pull consumer shared by scheduler replicas for SubjectDue.
	ConsumerDue = "sluice-scheduler-due"
	// ConsumerRequeue is the durable pull consumer of the requeue subjects (ConsumerSubjects).
	ConsumerRequeue = "sluice-scheduler-requeue"
	// ConsumerResult is the durable pull consumer of the result subjects (ConsumerSubjects).
	ConsumerResult = "sluice-scheduler-result"
)

// Core NATS subjects (request-reply and fire-and-forget).
const (
	// SubjectSubmit is the NATS request-reply twin of POST /v1/jobs.
	SubjectSubmit = "sluice.api.submit"
	// SubjectSubmitBatch is the NATS request-reply twin of POST /v1/jobs/batch.
	SubjectSubmitBatch = "sluice.api.submit.batch"
	// SubmitServiceName is the nats micro service name of the gateway's NATS API.
	SubmitServiceName = "sluice-api"

	// SubjectDiscover asks every worker to announce itself at once.
	SubjectDiscover = "sluice.worker.discover"

	// SubjectWake tells the schedulers that ready jobs were admitted, so
	// they claim at once instead of at their next poll. It carries no
	// body and nothing depends on it arriving: the store is the queue.
	SubjectWake = "sluice.dispatch.wake"
	// SubjectScaleRequest carries a scheduler's ScaleRequest: ready jobs of
	// a kind found no free slot, one more worker of it is wanted.
	SubjectScaleRequest = "sluice.scale.request"

	// SubjectRateUsage carries a gateway's RateUsage to the other
	// gateways, so that every replica's buckets count the requests all of
	// them let through.
	SubjectRateUsage = "sluice.ratelimit.usage"

	// QueueScheduler is the queue group scheduler replicas share for
	// heartbeats and progress reports.
	QueueScheduler = "sluice-scheduler"

	// HeaderToken carries an API token on SubjectSubmit requests.
	HeaderToken = "Sluice-Token"
	// HeaderTenant names the tenant on SubjectSubmit requests when no tokens are configured.
	HeaderTenant = "Sluice-Tenant"
)

// Per-worker subjects. A worker receives on its own offer and cancel
// subjects and reports on its own heartbeat, progress, announce, result
// and requeue subjects, each ending in its worker id (one subject token,
// ValidWorkerID). A NATS identity of a worker is granted exactly these
// subjects of its own id (pkg/bus.WorkerPermissions, the per-worker users
// of deploy/compose/nats.conf), and the schedulers take the reporting
// worker from the subject (ReportingWorker), never from the message
// alone: one worker's credentials can neither read another worker's offers
// nor report for its jobs.
const (
	workerOfferPrefix   = "sluice.worker.offer."
	workerCancelPrefix  = "sluice.worker.cancel."
	announcePrefix      = "sluice.worker.announce."
	heartbeatPrefix     = "sluice.heartbeat."
	progressPrefix      = "sluice.progress."
	resultPrefix        = LegacySubjectResult + "."
	workerRequeuePrefix = SubjectRequeue + "."

	// AnnounceSubjects is the filter of every worker's AnnounceSubject
	// (the rosters of the gateways and schedulers).
	AnnounceSubjects = announcePrefix + "*"
	// HeartbeatSubjects is the filter of every worker's HeartbeatSubject
	// (the schedulers, in queue group QueueScheduler).
	HeartbeatSubjects = heartbeatPrefix + "*"
	// ProgressSubjects is the filter of every worker's ProgressSubject
	// (the schedulers, in queue group QueueScheduler).
	ProgressSubjects = progressPrefix + "*"
	// ResultSubjects is the filter of every worker's ResultSubject.
	ResultSubjects = resultPrefix + "*"
	// WorkerRequeueSubjects is the filter of every worker's
	// WorkerRequeueSubject.
	WorkerRequeueSubjects = workerRequeuePrefix + "*"
)

// WorkerOfferSubject is where a worker answers offers (request-reply).
func WorkerOfferSubject(workerID string) string { return workerOfferPrefix + workerID }

// WorkerCancelSubject is where a worker receives cancel requests for its jobs.
func WorkerCancelSubject(workerID string) string { return workerCancelPrefix + workerID }

// AnnounceSubject carries worker workerID's Announce messages: its kinds
// and free capacity.
func AnnounceSubject(workerID string) string { return announcePrefix + workerID }

// HeartbeatSubject takes worker workerID's Heartbeat requests and answers a
// HeartbeatAck.
func HeartbeatSubject(workerID string) string { return heartbeatPrefix + workerID }

// ProgressSubject takes worker workerID's ProgressReports (fire and
// forget); the scheduler records them on the job and publishes progress
// events.
func ProgressSubject(workerID string) string { return progressPrefix + workerID }

// ResultSubject carries worker workerID's results (a Result or a
// ResultBatch) into the job stream.
func ResultSubject(workerID string) string { return resultPrefix + workerID }

// WorkerRequeueSubject carries worker workerID's shutdown requeues (a
// Requeue with ReasonShutdown: it stopped before the handler finished)
// into the job stream.
func WorkerRequeueSubject(workerID string) string { return workerRequeuePrefix + workerID }

// ReportingWorker returns the worker a report subject names: the id that
// ends a HeartbeatSubject, ProgressSubject, AnnounceSubject, ResultSubject
// or WorkerRequeueSubject. It is false for any other subject (the legacy
// and reaper subjects among them) and for an id that is not a valid
// worker id.
func ReportingWorker(subject string) (string, bool) {
	for _, p := range [...]string{heartbeatPrefix, progressPrefix, announcePrefix, resultPrefix, workerRequeuePrefix} {
		if id, ok := strings.CutPrefix(subject, p); ok {
			return id, ValidWorkerID(id)
		}
	}
	return "", false
}

// ConsumerSubjects are the subjects the durable consumer named consumer
// reads (nil for an unknown name): ConsumerDue SubjectDue;
// ConsumerResult every worker's ResultSubject and LegacySubjectResult;
// ConsumerRequeue the reaper's SubjectRequeue and every worker's
// WorkerRequeueSubject.
func ConsumerSubjects(consumer string) []string {
	switch consumer {
	case ConsumerDue:
		return []string{SubjectDue}
	case ConsumerResult:
		return []string{ResultSubjects, LegacySubjectResult}
	case ConsumerRequeue:
		return []string{WorkerRequeueSubjects, SubjectRequeue}
	}
	return nil
}
