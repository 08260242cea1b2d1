package contracts

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Change events. Every component that changes a job (the gateway on admit
// and cancel, the scheduler on claim, start, result, requeue and progress)
// publishes one Event after its compare-and-set succeeded. Events are
// notifications, not the record: the store stays the truth, and a reader
// that may have missed events starts from a snapshot read from the store.
//
// The events live in their own JetStream stream (limits retention, so
// readers can resume by stream sequence) under one subject per job:
// sluice.events.<tenant token>.<job id>.
const (
	// EventStreamName is the JetStream stream holding job change events.
	EventStreamName = "SLUICE_EVENTS"
	// EventStreamSubjects is the subject filter of EventStreamName.
	EventStreamSubjects = "sluice.events.>"

	eventPrefix = "sluice.events."
)

// Event types, as the "event:" field of the Server-Sent Events stream.
const (
	// EventSnapshot is the first event of a job's stream: the whole job.
	EventSnapshot = "snapshot"
	// EventState is a change of state (or of attempt, claim or worker).
	EventState = "state"
	// EventProgress is a handler's progress report.
	EventProgress = "progress"
)

// Event is one change of one job. State events carry the job's state,
// attempt (run number), claim, worker and error after the change;
// progress events carry the attempt, the claim and the progress.
type Event struct {
	Type   string `json:"type"`
	JobID  string `json:"job_id"`
	Tenant string `json:"tenant"`
	Kind   string `json:"kind,omitempty"`
	// Parent is set on the events of a fan-out's children: the parent's id.
	Parent string   `json:"parent,omitempty"`
	State  JobState `json:"state,omitempty"`
	// Attempt is the job's run number after the change (Job.Attempt).
	Attempt int `json:"attempt"`
	// Claim is the job's claim after the change (Job.Claim).
	Claim    int64     `json:"claim"`
	Worker   string    `json:"worker,omitempty"`
	Error    string    `json:"error,omitempty"`
	Progress *Progress `json:"progress,omitempty"`
	At       time.Time `json:"at"`
}

// StateEvent describes job as it is after a change.
func StateEvent(job Job) Event {
	at := job.UpdatedAt
	if at.IsZero() {
		at = time.Now().UTC()
	}
	return Event{
		Type: EventState, JobID: job.ID, Tenant: job.Tenant, Kind: job.Kind, Parent: job.Parent,
		State: job.State, Attempt: job.Attempt, Claim: job.Claim, Worker: job.Worker, Error: job.Error, At: at,
	}
}

// Subject is the subject the event is published on.
func (e Event) Subject() string { return EventSubject(e.Tenant, e.JobID) }

// EventSubject is the subject of one job's events, which it shares with
// the tenant's other jobs of the same bucket (eventBuckets per tenant,
// chosen by the job id): a reader of one job keeps the events whose JobID
// is that job's. JetStream keeps state in memory for every subject a
// stream holds, about 400 bytes each: one subject per job grew the NATS
// server by 40 MiB per 100,000 jobs of the stream's retention.
func EventSubject(tenant, jobID string) string {
	// FNV-1a, 32 bits (hash/fnv's New32a), inline: no hasher, no copy of the id.
	h := uint32(2166136261)
	for i := 0; i < len(jobID); i++ {
		h ^= uint32(jobID[i])
		h *= 16777619
	}
	const hex = "0123456789abcdef"
	b := h % eventBuckets
	token := tenantToken(tenant)
	buf := make([]byte, 0, len(eventPrefix)+len(token)+3)
	buf = append(buf, eventPrefix...)
	buf = append(buf, token...)
	buf = append(buf, '.', hex[b>>4], hex[b&0xf])
	return string(buf)
}

// eventBuckets is how many event subjects a tenant's jobs share.
const eventBuckets = 256

// TenantEventSubjects is the filter of every event of one tenant.
func TenantEventSubjects(tenant string) string {
	return eventPrefix + tenantToken(tenant) + ".*"
}

// tenantToken makes a tenant name one subject token. Tenant names may hold
// '.', which separates tokens; it becomes '~', which tenant names may not
// hold, so the mapping is one to one.
func tenantToken(tenant string) string { return strings.ReplaceAll(tenant, ".", "~") }

// ProgressReport is a worker's report of a handler's progress on one
// claim. It applies only while the job is running at that claim on that
// worker.
type ProgressReport struct {
	JobID string `json:"job_id"`
	// Claim is the claim the worker runs the job at; its wire name is
	// WireClaim (WireClaimNext is read too).
	Claim int64 `json:"attempt"`
	claimNext
	// WorkerID must be the worker whose ProgressSubject carries it.
	WorkerID string   `json:"worker_id"`
	Progress Progress `json:"progress"`
}

// Limits of a progress report.
const (
	// MaxProgressStage bounds Progress.Stage in bytes.
	MaxProgressStage = 64
	// MaxProgressMessage bounds Progress.Message in bytes.
	MaxProgressMessage = 512
)

// Check reports whether p is a valid progress: percent in [0, 100], short
// stage and message.
func (p Progress) Check() error {
	if math.IsNaN(p.Percent) || p.Percent < 0 || p.Percent > 100 {
		return fmt.Errorf("progress: percent %v is not within 0..100", p.Percent)
	}
	if len(p.Stage) > MaxProgressStage {
		return fmt.Errorf("progress: stage is %d bytes, at most %d", len(p.Stage), MaxProgressStage)
	}
	if len(p.Message) > MaxProgressMessage {
		return fmt.Errorf("progress: message is %d bytes, at most %d", len(p.Message), MaxProgressMessage)
	}
	return nil
}

// DecodeProgressReport decodes and checks a ProgressReport.
func DecodeProgressReport(data []byte) (ProgressReport, error) {
	var m ProgressReport
	if err := decodeStrict(data, &m); err != nil {
		return m, err
	}
	if err := foldClaim(&m.Claim, &m.claimNext); err != nil {
		return m, err
	}
	if err := checkLease(Lease{JobID: m.JobID, Claim: m.Claim}); err != nil {
		return m, fmt.Errorf("progress report: %w", err)
	}
	if !ValidWorkerID(m.WorkerID) {
		return m, fmt.Errorf("progress report: worker_id %q is not a worker id", m.WorkerID)
	}
	if err := m.Progress.Check(); err != nil {
		return m, fmt.Errorf("progress report: %w", err)
	}
	m.Progress.Percent = RoundPercent(m.Progress.Percent)
	return m, nil
}

// RoundPercent rounds a progress percent to one decimal (30.0003138 →
// 30): what a job records and shows.
func RoundPercent(p float64) float64 {
	return math.Round(p*10) / 10
}

// DecodeEvent decodes and checks an Event read from the event stream.
func DecodeEvent(data []byte) (Event, error) {
	var m Event
	if err := readEvent(&m, func(v any) error { return decodeStrict(data, v) }); err != nil {
		return m, err
	}
	if !ValidJobID(m.JobID) {
		return m, fmt.Errorf("event: job_id %q is not a job id", m.JobID)
	}
	switch m.Type {
	case EventState:
		if !m.State.Valid() {
			return m, fmt.Errorf("event: state %q is not a state", m.State)
		}
	case EventProgress:
		if m.Progress == nil {
			return m, fmt.Errorf("event: progress event without progress")
		}
		if err := m.Progress.Check(); err != nil {
			return m, fmt.Errorf("event: %w", err)
		}
	default:
		return m, fmt.Errorf("event: unknown type %q", m.Type)
	}
	return m, nil
}
