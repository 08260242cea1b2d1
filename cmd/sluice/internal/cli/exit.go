package cli

import (
	"context"
	"errors"
	"net/http"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Exit codes of every command.
const (
	// ExitOK: the job succeeded, or the command did what it was asked.
	ExitOK = 0
	// ExitFailed: the job failed, or talking to the server did.
	ExitFailed = 1
	// ExitUsage: the command line was wrong.
	ExitUsage = 2
	// ExitCancelled: the job was cancelled.
	ExitCancelled = 3
	// ExitRejected: the server shed the job at admission (429).
	ExitRejected = 4
	// ExitInterrupted: the user interrupted a command that follows a job
	// (the shell's convention for SIGINT); the job itself goes on.
	ExitInterrupted = 130
)

// usageError is a mistake on the command line (exit 2).
type usageError struct{ msg string }

// Error implements error.
func (e *usageError) Error() string { return e.msg }

// errInterrupted means the user stopped a command with Ctrl-C or SIGTERM.
var errInterrupted = errors.New("interrupted")

// outcomeCode is the exit code of a job that ended in state s.
func outcomeCode(s contracts.JobState) int {
	switch s {
	case contracts.StateSucceeded:
		return ExitOK
	case contracts.StateCancelled:
		return ExitCancelled
	default:
		return ExitFailed
	}
}

// errorCode is the exit code of a command that ended with err.
func errorCode(err error) int {
	var ue *usageError
	var ae *APIError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ue):
		return ExitUsage
	case errors.Is(err, errInterrupted), errors.Is(err, context.Canceled):
		return ExitInterrupted
	case errors.As(err, &ae) && ae.Status == http.StatusTooManyRequests:
		return ExitRejected
	}
	return ExitFailed
}
