package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/client"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// APIError is an error the server answered: its status, the error body's
// code, message and limit, and the body itself for --json.
type APIError struct {
	// Status is the HTTP status.
	Status int
	// Code is the error body's machine code (contracts.Code*), when the
	// body was one.
	Code string
	// Message is the error body's message, or a short form of whatever
	// else the server sent.
	Message string
	// Limit names the limit a 429 hit (contracts.LimitGlobal, …).
	Limit string
	// RetryAfter is the server's Retry-After, zero when it gave none.
	RetryAfter time.Duration
	// Body is the server's answer as it came.
	Body []byte
}

// Error implements error: "message (HTTP 404 not_found)".
func (e *APIError) Error() string {
	var b strings.Builder
	b.WriteString(e.Message)
	fmt.Fprintf(&b, " (HTTP %d", e.Status)
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.RetryAfter > 0 {
		b.WriteString(", retry after " + e.RetryAfter.String())
	}
	b.WriteString(")")
	if e.Status == http.StatusUnauthorized {
		b.WriteString("; give the API token with SLUICE_TOKEN or --token")
	}
	return b.String()
}

// JSONBody is the error as JSON for --json output: the server's error body
// when it sent one, otherwise one in the same shape.
func (e *APIError) JSONBody() []byte {
	if e.Code != "" {
		return e.Body
	}
	out, _ := json.Marshal(contracts.ErrorBody{Error: contracts.ErrorDetail{Code: "http_" + strconv.Itoa(e.Status), Message: e.Message}})
	return out
}

// fromClientError is the CLI's form of an answer pkg/client read.
func fromClientError(ce *client.Error) *APIError {
	msg := ce.Message
	if msg == "" {
		msg = "unexpected answer"
	}
	return &APIError{Status: ce.Status, Code: ce.Code, Message: msg, Limit: ce.Limit, RetryAfter: ce.RetryAfter, Body: ce.Body}
}
