package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// report says what a finished attempt publishes.
type report int

const (
	reportNothing report = iota // fenced: another attempt owns the job
	reportResult                // a Result on its ResultSubject
	reportRequeue               // a Requeue on its WorkerRequeueSubject (shutdown)
)

// verdict is the outcome of an attempt.
type verdict struct {
	report report
	state  contracts.JobState // for reportResult
	err    string             // the job error, with its class
	// permanent: the handler said the failure must not be retried.
	permanent bool
}

// decide turns how a handler ended into what the worker reports. A fenced
// attempt (lease lost or unacknowledged) reports nothing, whatever it did;
// a handler that returned no error succeeded, even if it was asked to stop;
// otherwise a cancel request wins over shutdown (the user wants it
// stopped), shutdown gives the attempt back, and anything else failed.
func decide(err error, fenced, cancelRequested, shutdown bool) verdict {
	switch {
	case fenced:
		return verdict{report: reportNothing}
	case err == nil:
		return verdict{report: reportResult, state: contracts.StateSucceeded}
	case cancelRequested:
		return verdict{report: reportResult, state: contracts.StateCancelled, err: contracts.CancelledByRequest}
	case shutdown:
		return verdict{report: reportRequeue}
	default:
		return verdict{report: reportResult, state: contracts.StateFailed, err: classify(err), permanent: contracts.IsPermanent(err)}
	}
}

// classify is contracts.Classify, except that a bare context deadline is a
// timeout and a bare context cancellation is a cancellation.
func classify(err error) string {
	var ce *contracts.ClassedError
	if errors.As(err, &ce) || contracts.ClassOf(err.Error()) != "" {
		return contracts.Classify(err)
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return contracts.JobError(contracts.ClassTimeout, err.Error())
	case errors.Is(err, context.Canceled):
		return contracts.JobError(contracts.ClassCancelled, err.Error())
	}
	return contracts.Classify(err)
}

// maxErrorBytes bounds a job error message.
const maxErrorBytes = 8 << 10

// truncateError cuts a long job error message, keeping its class prefix.
func truncateError(msg string) string {
	if len(msg) <= maxErrorBytes {
		return msg
	}
	return msg[:maxErrorBytes] + "… (truncated)"
}

// checkResult keeps a result only when it is valid JSON that fits in a
// message of maxBytes; otherwise it drops the result and, if the handler
// succeeded, fails the job with why.
func checkResult(res Result, err error, maxBytes int) (Result, error) {
	if len(res) == 0 {
		return nil, err
	}
	var problem error
	switch {
	case len(res) > maxBytes:
		problem = fmt.Errorf("result is %d bytes, at most %d", len(res), maxBytes)
	case !json.Valid(res):
		problem = errors.New("result is not valid JSON")
	}
	if problem == nil {
		return res, err
	}
	if err == nil {
		err = problem
	}
	return nil, err
}
