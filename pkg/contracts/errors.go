package contracts

import (
	"errors"
	"strings"
)

// ErrorClass is the prefix of a failed job's error. It tells a user at a
// glance why the job ended: it never ran for lack of capacity, ran out of
// time, was cancelled, lost its worker too often, failed in its handler,
// was given bad input, or went past the resources it declared.
type ErrorClass string

// The error classes, in the order a job meets them.
const (
	ClassCapacity  ErrorClass = "capacity"
	ClassTimeout   ErrorClass = "timeout"
	ClassCancelled ErrorClass = "cancelled"
	ClassStale     ErrorClass = "stale"
	ClassHandler   ErrorClass = "handler"
	ClassInput     ErrorClass = "input"
	// ClassResources: the run went past its declared memory (or CPU
	// time) and its worker stopped it; retried like a handler failure.
	ClassResources ErrorClass = "resources"
)

var classes = []ErrorClass{ClassCapacity, ClassTimeout, ClassCancelled, ClassStale, ClassHandler, ClassInput, ClassResources}

// CancelledByRequest is the error of a job that ended cancelled because a
// user asked for it.
var CancelledByRequest = JobError(ClassCancelled, "cancelled by request")

// JobError formats a job error message with its class: "capacity: …".
func JobError(class ErrorClass, msg string) string {
	return string(class) + ": " + msg
}

// ClassOf returns the class a job error message starts with, or "" when it
// has none.
func ClassOf(msg string) ErrorClass {
	for _, c := range classes {
		if strings.HasPrefix(msg, string(c)+":") {
			return c
		}
	}
	return ""
}

// ClassedError is an error that carries its own job error class, so a
// handler can say "input: …" instead of the default "handler: …".
type ClassedError struct {
	Class ErrorClass
	Err   error
}

// Error implements error as "class: message".
func (e *ClassedError) Error() string { return JobError(e.Class, e.Err.Error()) }

// Unwrap returns the wrapped error.
func (e *ClassedError) Unwrap() error { return e.Err }

// Classify turns a handler error into a job error message. Errors that carry
// a class (a *ClassedError, or a message already starting with a class)
// keep it; anything else is a handler error.
func Classify(err error) string {
	if err == nil {
		return ""
	}
	var ce *ClassedError
	if errors.As(err, &ce) {
		return ce.Error()
	}
	msg := err.Error()
	if ClassOf(msg) != "" {
		return msg
	}
	return JobError(ClassHandler, msg)
}

// HTTP and NATS API error codes: the "code" of an ErrorBody.
const (
	CodeBadRequest       = "bad_request"
	CodeInvalidJSON      = "invalid_json"
	CodeTooLarge         = "payload_too_large"
	CodeUnsupportedMedia = "unsupported_media_type"
	CodeValidation       = "validation_failed"
	CodeUnknownKind      = "unknown_kind"
	CodeUnauthorized     = "unauthorized"
	CodeForbidden        = "forbidden"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeConflict         = "conflict"
	CodeGlobalCap        = "global_cap_reached"
	CodeTenantCap        = "tenant_cap_reached"
	CodeRateLimited      = "rate_limited"
	CodeUnavailable      = "unavailable"
	CodeInternal         = "internal"
)

// ErrorDetail is the inside of an API error: a stable machine code and a
// message for people.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Limit names the limit that was hit (one of ErrorLimits): on a 429 the
	// admission cap ("global", "tenant", "tenant_items"), a share of
	// things held at once ("tenant_streams", "tenant_pins") or a rate
	// limit ("tenant_rate", "ip_rate" or "tenant_read_rate", code
	// rate_limited); on a 413 the bound
	// the request is over for good ("request_items", or "tenant_rate" for a
	// request costing more than the rate limit's burst).
	Limit string `json:"limit,omitempty"`
}

// ErrorBody is the JSON body of every HTTP error: {"error":{"code","message"}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}
