package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Sentinels an *Error matches with errors.Is, by its HTTP status.
var (
	// ErrUnauthorized is a 401: no token, or one the gateway does not know.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrNotFound is a 404: no such job (for this tenant).
	ErrNotFound = errors.New("not found")
	// ErrConflict is a 409: the job is already final.
	ErrConflict = errors.New("conflict")
	// ErrTooLarge is a 413: the body, or the job on the message bus, is too large.
	ErrTooLarge = errors.New("too large")
	// ErrInvalid is a 400 or 422: the request is malformed or invalid.
	ErrInvalid = errors.New("invalid request")
	// ErrRejected is a 429: an admission cap or a rate limit turned the
	// request away; Error.Limit and Error.RetryAfter say which and how long.
	ErrRejected = errors.New("rejected")
)

// Error is an answer of the gateway that is not a success.
type Error struct {
	// Status is the HTTP status.
	Status int
	// Code is the error body's code (contracts.Code*), when there was one.
	Code string
	// Message is the error body's message, or the status text.
	Message string
	// Limit is the limit a 429 hit (contracts.LimitGlobal, LimitTenant,
	// LimitTenantRate or LimitIPRate).
	Limit string
	// RetryAfter is the server's Retry-After; zero when it sent none.
	RetryAfter time.Duration
	// Body is the answer as the server sent it (at most 64 KiB of it for an
	// event stream's error).
	Body []byte
}

// Error implements error.
func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sluice: %s (HTTP %d", e.Message, e.Status)
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.RetryAfter > 0 {
		b.WriteString(", retry after " + e.RetryAfter.String())
	}
	b.WriteString(")")
	return b.String()
}

// Is matches the sentinel of e's status.
func (e *Error) Is(target error) bool {
	switch e.Status {
	case http.StatusUnauthorized:
		return target == ErrUnauthorized
	case http.StatusNotFound:
		return target == ErrNotFound
	case http.StatusConflict:
		return target == ErrConflict
	case http.StatusRequestEntityTooLarge:
		return target == ErrTooLarge
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return target == ErrInvalid
	case http.StatusTooManyRequests:
		return target == ErrRejected
	}
	return false
}

// maxErrorText bounds how much of a body that is not an error body is kept.
const maxErrorText = 200

// newError reads an error answer.
func newError(status int, h http.Header, body []byte) *Error {
	e := &Error{Status: status, Body: body}
	var eb contracts.ErrorBody
	if json.Unmarshal(body, &eb) == nil && eb.Error.Code != "" {
		e.Code, e.Message, e.Limit = eb.Error.Code, eb.Error.Message, eb.Error.Limit
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
		if text := strings.TrimSpace(string(body)); text != "" && e.Code == "" {
			if len(text) > maxErrorText {
				text = text[:maxErrorText] + "…"
			}
			e.Message = strings.TrimSpace(e.Message + ": " + strings.ToValidUTF8(text, "?"))
		}
	}
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}
