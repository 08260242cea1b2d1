package contracts

// JetStream stream and consumers. The stream carries the durable messages:
// "due" (a job should be offered), "requeue" (the reaper found a job stale or
// lost) and "result" (a worker finished an attempt). It is a work queue: a
// message is gone once its consumer acknowledges it.
const (
	// StreamName is the JetStream stream holding every durable job message.
	StreamName = "SLUICE_JOBS"
	// StreamSubjects is the subject filter of StreamName.
	StreamSubjects = "sluice.jobs.>"

	// SubjectDue announces that a job is ready to be offered to workers.
	SubjectDue = "sluice.jobs.due"
	// SubjectRequeue asks the scheduler to re-dispatch a stale or lost job.
	SubjectRequeue = "sluice.jobs.requeue"
	// SubjectResult carries a worker's outcome for one attempt.
	SubjectResult = "sluice.jobs.result"

	// ConsumerDue is the durable pull consumer shared by scheduler replicas for SubjectDue.
	ConsumerDue = "sluice-scheduler-due"
	// ConsumerRequeue is the durable pull consumer for SubjectRequeue.
	ConsumerRequeue = "sluice-scheduler-requeue"
	// ConsumerResult is the durable pull consumer for SubjectResult.
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

	// SubjectHeartbeat takes a Heartbeat request from a worker and answers a HeartbeatAck.
	SubjectHeartbeat = "sluice.heartbeat"
	// SubjectAnnounce carries Announce messages: a worker's id, kinds and free capacity.
	SubjectAnnounce = "sluice.worker.announce"
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

	// QueueScheduler is the queue group scheduler replicas share for heartbeats.
	QueueScheduler = "sluice-scheduler"

	// HeaderToken carries an API token on SubjectSubmit requests.
	HeaderToken = "Sluice-Token"
	// HeaderTenant names the tenant on SubjectSubmit requests when no tokens are configured.
	HeaderTenant = "Sluice-Tenant"
)

const (
	workerOfferPrefix  = "sluice.worker.offer."
	workerCancelPrefix = "sluice.worker.cancel."
)

// WorkerOfferSubject is where a worker answers offers (request-reply).
func WorkerOfferSubject(workerID string) string { return workerOfferPrefix + workerID }

// WorkerCancelSubject is where a worker receives cancel requests for its jobs.
func WorkerCancelSubject(workerID string) string { return workerCancelPrefix + workerID }
