package contracts

import (
	"encoding/json"
	"fmt"
	"math"
)

// MessageEnvelope is the room every hop keeps on top of a job's own JSON
// for what it adds around the job: the NATS submit reply's status, a
// change event's fields, headers, and what the job gains while it runs
// (worker, times, progress, error).
const MessageEnvelope = 8 << 10

// messageFields bounds the JSON of a job's fields other than its strings,
// payload and result (names, numbers, times, progress).
const messageFields = 4 << 10

// Spec is what a worker is offered of job: the one conversion from a job
// to its offer, used by the scheduler that offers it.
func (j Job) Spec() JobSpec {
	return JobSpec{
		ID: j.ID, Tenant: j.Tenant, Kind: j.Kind, Claim: j.Claim,
		Payload: j.Payload, Key: j.Key, Priority: j.Priority, RunLimits: j.RunLimits, Inputs: j.Inputs,
		Resources: j.Resources,
	}
}

// MessageSize is the size a job takes on the message bus: the larger of
// its JSON (the NATS submit reply and event snapshots carry it whole) and
// its offer, with the largest attempt number, plus MessageEnvelope.
func MessageSize(job Job) (int64, error) {
	doc, err := json.Marshal(job)
	if err != nil {
		return 0, fmt.Errorf("encode job: %w", err)
	}
	spec := job.Spec()
	spec.Claim = math.MaxInt64
	offer, err := json.Marshal(Offer{Job: spec})
	if err != nil {
		return 0, fmt.Errorf("encode offer: %w", err)
	}
	return int64(max(len(doc), len(offer))) + MessageEnvelope, nil
}

// CheckMessageSize returns a *FieldError naming the payload when job could
// not be carried by every hop of a bus whose messages hold at most
// maxPayload bytes (NATS max_payload). Admission refuses such a job, and a
// scheduler fails one that got in anyway instead of offering it: an offer
// that cannot be sent is never a worker's fault.
func CheckMessageSize(job Job, maxPayload int64) error {
	if maxPayload <= 0 {
		return nil
	}
	// Most jobs are far below the limit: a bound on the JSON (every string
	// escaped at worst sixfold, the other fields within messageFields)
	// settles them without encoding anything.
	strs := len(job.ID) + len(job.Tenant) + len(job.Kind) + len(job.Key) + len(job.Error)
	for _, in := range job.Inputs {
		strs += len(in.Name) + len(in.URI) + len(in.SHA256) + len(in.Version) + 64
	}
	if int64(len(job.Payload)+len(job.Result)+6*strs+messageFields+MessageEnvelope) <= maxPayload {
		return nil
	}
	n, err := MessageSize(job)
	if err != nil {
		return err
	}
	if n > maxPayload {
		return &FieldError{Field: "payload", Reason: fmt.Sprintf(
			"the job would take %d bytes on the message bus (with %d bytes of envelope), more than its limit of %d", n, MessageEnvelope, maxPayload)}
	}
	return nil
}
