package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// BatchResult is one job's outcome in SubmitBatch: the status a single
// submit would have had (202 admitted, 200 joined, 429, 4xx, 503), with
// the job (without its payload) or the error.
type BatchResult struct {
	Status int
	Job    contracts.Job
	// Err is nil for 202 and 200; otherwise an *Error like Submit's (it
	// matches ErrRejected, ErrInvalid, … and carries RetryAfter).
	Err error
}

// Created reports whether the job was admitted as a new job.
func (r BatchResult) Created() bool { return r.Status == http.StatusAccepted }

// SubmitBatch submits up to contracts.MaxBatchJobs jobs in one request.
// Each is admitted or refused on its own, in order; the results are in
// the same order. An error is returned only when the batch as a whole was
// refused or not answered.
func (c *Client) SubmitBatch(ctx context.Context, reqs []contracts.SubmitRequest) ([]BatchResult, error) {
	if len(reqs) == 0 || len(reqs) > contracts.MaxBatchJobs {
		return nil, fmt.Errorf("client: a batch holds 1 to %d jobs, not %d", contracts.MaxBatchJobs, len(reqs))
	}
	body := contracts.BatchRequest{Jobs: make([]json.RawMessage, len(reqs))}
	for i, r := range reqs {
		b, err := json.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("client: encode jobs[%d]: %w", i, err)
		}
		body.Jobs[i] = b
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("client: encode the batch: %w", err)
	}
	var reply contracts.BatchReply
	if _, err := c.do(ctx, http.MethodPost, "/v1/jobs/batch", data, &reply); err != nil {
		return nil, err
	}
	if len(reply.Results) != len(reqs) {
		return nil, fmt.Errorf("client: the batch of %d jobs got %d results", len(reqs), len(reply.Results))
	}
	out := make([]BatchResult, len(reqs))
	for i, r := range reply.Results {
		out[i] = BatchResult{Status: r.Status}
		if r.Job != nil {
			out[i].Job = *r.Job
		}
		if r.Error != nil {
			e := &Error{Status: r.Status, Code: r.Error.Code, Message: r.Error.Message, Limit: r.Error.Limit}
			if r.RetryAfterMS > 0 {
				e.RetryAfter = time.Duration(r.RetryAfterMS) * time.Millisecond
			}
			out[i].Err = e
		}
	}
	return out, nil
}
