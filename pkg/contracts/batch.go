package contracts

import (
	"encoding/json"
	"fmt"
	"strings"
)

// MaxBatchJobs bounds the jobs of one batch submit.
const MaxBatchJobs = 1000

// BatchRequest is the body of POST /v1/jobs/batch and of a
// SubjectSubmitBatch request: 1 to MaxBatchJobs submit bodies, each
// admitted or refused on its own.
type BatchRequest struct {
	Jobs []json.RawMessage `json:"jobs"`
}

// BatchReply answers a batch submit: one result per submitted job, in
// order. Each is what a single submit of that body would have answered
// (status 202, 200, 429 or 4xx, with the job or the error); the jobs come
// without their payloads, which the caller already has.
type BatchReply struct {
	Results []SubmitReply `json:"results"`
}

// DecodeBatch strictly decodes a batch body: one JSON object with a "jobs"
// array of 1 to MaxBatchJobs elements, no other field, no trailing data.
// The elements are decoded later, each on its own (DecodeSubmit). Its
// errors are a *DecodeError (HTTP 400) or a *FieldError for the count
// (HTTP 422).
func DecodeBatch(data []byte) (BatchRequest, error) {
	var r BatchRequest
	trimmed := strings.TrimSpace(string(data))
	if trimmed == "" || trimmed[0] != '{' {
		return r, &DecodeError{Reason: `the body must be a JSON object {"jobs":[…]}`}
	}
	// Each job is decoded strictly on its own later (DecodeSubmit), its
	// duplicate keys then refused for it alone.
	if err := decodeStrictSkip(data, &r, true); err != nil {
		return r, err
	}
	switch {
	case r.Jobs == nil:
		return r, &FieldError{"jobs", "is required: an array of submit bodies"}
	case len(r.Jobs) == 0:
		return r, &FieldError{"jobs", "is empty"}
	case len(r.Jobs) > MaxBatchJobs:
		return r, &FieldError{"jobs", fmt.Sprintf("has %d jobs, at most %d", len(r.Jobs), MaxBatchJobs)}
	}
	return r, nil
}
