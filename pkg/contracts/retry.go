package contracts

import (
	"errors"
	"time"
)

// MaxRunErrors is how many run errors a job keeps (the latest ones).
const MaxRunErrors = 10

// RunError is the error one run of a job ended with, as the job shows it
// in its errors list.
type RunError struct {
	// Attempt is which run it was (1 for the first): the job's attempt
	// then.
	Attempt int `json:"attempt"`
	// Claim is the claim the run held.
	Claim int64     `json:"claim"`
	Error string    `json:"error"`
	At    time.Time `json:"at"`
}

// AppendRunError adds e to a job's run errors, keeping the latest
// MaxRunErrors.
func AppendRunError(errs []RunError, e RunError) []RunError {
	out := append(append([]RunError(nil), errs...), e)
	if len(out) > MaxRunErrors {
		out = out[len(out)-MaxRunErrors:]
	}
	return out
}

// PermanentError marks a handler error that must not be retried: the job
// fails at once whatever its max_attempts.
type PermanentError struct{ Err error }

// Error implements error with the wrapped message.
func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that the job fails without a retry. A nil err
// stays nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err (or an error it wraps) is Permanent.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// Retryable reports whether a run that ended with the job error msg may
// run again: every class but input (the job itself is wrong), cancelled
// (a user asked) and capacity (it never ran), unless the handler said the
// error is permanent.
func Retryable(msg string, permanent bool) bool {
	if permanent {
		return false
	}
	switch ClassOf(msg) {
	case ClassInput, ClassCancelled, ClassCapacity:
		return false
	}
	return true
}

// RunsAgain is the retry rule for a job whose run failed with msg: it runs
// again while its attempt (run number) is under max_attempts and the
// error is Retryable.
func RunsAgain(j Job, msg string, permanent bool) bool {
	return Retryable(msg, permanent) && j.Attempt < j.MaxAttempts
}
