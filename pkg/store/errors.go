package store

import "errors"

// Sentinel errors every driver returns (wrapped with context).
var (
	// ErrNotFound means no job has that id.
	ErrNotFound = errors.New("store: job not found")
	// ErrConflict means a compare-and-set missed: the job is no longer at the
	// expected state and claim (or its claim is held).
	ErrConflict = errors.New("store: job changed concurrently")
	// ErrBadTransition means the requested change breaks the state machine.
	ErrBadTransition = errors.New("store: transition not allowed")
	// ErrBadCursor means a list cursor could not be decoded.
	ErrBadCursor = errors.New("store: malformed cursor")
)
