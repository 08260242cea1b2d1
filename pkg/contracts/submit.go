package contracts

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
)

// SubmitRequest is the body of POST /v1/jobs and of a SubjectSubmit request.
type SubmitRequest struct {
	Kind        string          `json:"kind"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	Key         string          `json:"key,omitempty"`
	Priority    int             `json:"priority,omitempty"`
	Deadline    string          `json:"deadline,omitempty"`
	MaxAttempts int             `json:"max_attempts,omitempty"`
	// Items make the job a fan-out parent: one child job per item (see
	// fanout.go), at most Concurrency (the window) running at once.
	Items       json.RawMessage `json:"items,omitempty"`
	Concurrency int             `json:"concurrency,omitempty"`
	FailFast    bool            `json:"fail_fast,omitempty"`
	// RunAt delays the job: an RFC 3339 time or a Go duration from now, at
	// most MaxRunAhead ahead.
	RunAt string `json:"run_at,omitempty"`
	// ConcurrencyKey and ConcurrencyLimit: at most ConcurrencyLimit of the
	// tenant's jobs with this key run at once; the others wait pending.
	ConcurrencyKey   string `json:"concurrency_key,omitempty"`
	ConcurrencyLimit int    `json:"concurrency_limit,omitempty"`
	// StallTimeout stops a run that reports no progress for that long;
	// MaxRuntime stops a run that takes longer (Go durations).
	StallTimeout string `json:"stall_timeout,omitempty"`
	MaxRuntime   string `json:"max_runtime,omitempty"`
	// Inputs are the files the run needs, pinned by digest (inputs.go).
	Inputs []InputRef `json:"inputs,omitempty"`
	// Resources are what the job needs, {"cpu": 0.5, "memory": "512MiB"}
	// (see Resources); kept raw so that Validate names a bad member in a
	// *FieldError (HTTP 422).
	Resources json.RawMessage `json:"resources,omitempty"`
}

// SubmitReply is the answer on SubjectSubmit: the HTTP status the same
// request would have had, and the job or the error.
type SubmitReply struct {
	Status       int          `json:"status"`
	RetryAfterMS int64        `json:"retry_after_ms,omitempty"`
	Job          *Job         `json:"job,omitempty"`
	Error        *ErrorDetail `json:"error,omitempty"`
}

// Limits bound what a submit request may ask for.
type Limits struct {
	// MaxDispatchDeadline is the longest a job may wait for a worker.
	MaxDispatchDeadline time.Duration
	// DefaultMaxAttempts applies when the request gives none.
	DefaultMaxAttempts int
	// DefaultStallTimeout applies when the request gives none (0 = off).
	DefaultStallTimeout time.Duration
	// MaxRuntime bounds max_runtime (0 = no bound).
	MaxRuntime time.Duration
}

// Submission is a validated SubmitRequest, ready to be admitted.
type Submission struct {
	Kind             string
	Payload          json.RawMessage
	Key              string
	Priority         int
	MaxAttempts      int
	DispatchDeadline time.Time
	// RunAt is when the job may run at the earliest; nil means now.
	RunAt            *time.Time
	ConcurrencyKey   string
	ConcurrencyLimit int
	// Items, when set, make the job a fan-out parent with window
	// Concurrency (see fanout.go).
	Items       []json.RawMessage
	Concurrency int
	FailFast    bool
	// Limits are the run's stall timeout and maximum runtime.
	Limits RunLimits
	// Inputs are the run's pinned inputs; a digest may still be PinDigest.
	Inputs []InputRef
	// Resources are what the job declared it needs; nil: none declared.
	Resources *Resources
}

// Bounds of submit fields.
const (
	MaxKeyLen      = 256
	MinPriority    = 0
	MaxPriority    = 9
	MaxMaxAttempts = 100
	// MaxConcurrencyKeyLen bounds concurrency_key in bytes.
	MaxConcurrencyKeyLen = 128
	// MaxConcurrencyLimit bounds concurrency_limit.
	MaxConcurrencyLimit = 100_000
	// MaxRunAhead is how far ahead run_at may be.
	MaxRunAhead = 30 * 24 * time.Hour
)

// ValidKind reports whether k is a job kind: 1–64 lowercase letters, digits,
// '_', '.' or '-', starting with a letter or digit.
func ValidKind(k string) bool {
	if len(k) < 1 || len(k) > 64 || !(isLower(k[0]) || isDigit(k[0])) {
		return false
	}
	for i := 1; i < len(k); i++ {
		if c := k[i]; !isLower(c) && !isDigit(c) && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}

// FieldError is a submit field that failed validation (HTTP 422).
type FieldError struct {
	Field  string
	Reason string
}

// Error implements error as "field: reason".
func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// DecodeSubmit strictly decodes a submit body: one JSON object, no unknown
// fields, no trailing data. Its errors are *DecodeError (HTTP 400).
func DecodeSubmit(data []byte) (SubmitRequest, error) {
	var r SubmitRequest
	trimmed := strings.TrimSpace(string(data))
	if trimmed == "" {
		return r, &DecodeError{Reason: "empty body, want a JSON object"}
	}
	if trimmed[0] != '{' {
		return r, &DecodeError{Reason: "the body must be a JSON object"}
	}
	if err := decodeStrict(data, &r); err != nil {
		return r, err
	}
	return r, nil
}

// Validate checks a decoded request against the limits at time now and
// fills defaults. Its errors are *FieldError (HTTP 422), or a *DecodeError
// (HTTP 400) for a duplicate key found where a member is decoded further
// (a built-in kind's payload, resources: "payload.ARGV: duplicate key
// (the same field as argv)").
func (r SubmitRequest) Validate(now time.Time, lim Limits) (Submission, error) {
	s := Submission{Kind: r.Kind, Key: r.Key, Priority: r.Priority, MaxAttempts: r.MaxAttempts}
	if r.Kind == "" {
		return s, &FieldError{"kind", "is required"}
	}
	if !ValidKind(r.Kind) {
		return s, &FieldError{"kind", "must be 1-64 lowercase letters, digits, '_', '.' or '-'"}
	}
	if len(r.Key) > MaxKeyLen {
		return s, &FieldError{"key", fmt.Sprintf("is longer than %d bytes", MaxKeyLen)}
	}
	if !printable(r.Key) {
		return s, &FieldError{"key", "must be printable text"}
	}
	if err := r.validateConcurrency(&s); err != nil {
		return s, err
	}
	if r.Priority < MinPriority || r.Priority > MaxPriority {
		return s, &FieldError{"priority", fmt.Sprintf("must be between %d and %d", MinPriority, MaxPriority)}
	}
	switch {
	case r.MaxAttempts == 0:
		s.MaxAttempts = lim.DefaultMaxAttempts
		if s.MaxAttempts <= 0 {
			s.MaxAttempts = 1
		}
	case r.MaxAttempts < 1 || r.MaxAttempts > MaxMaxAttempts:
		return s, &FieldError{"max_attempts", fmt.Sprintf("must be between 1 and %d", MaxMaxAttempts)}
	}
	if err := r.validateFanout(&s); err != nil {
		return s, err
	}
	stall, err := parseRunLimit("stall_timeout", r.StallTimeout, 0)
	if err != nil {
		return s, err
	}
	if r.StallTimeout == "" {
		stall = Duration(lim.DefaultStallTimeout)
	}
	maxRun, err := parseRunLimit("max_runtime", r.MaxRuntime, lim.MaxRuntime)
	if err != nil {
		return s, err
	}
	s.Limits = RunLimits{StallTimeout: stall, MaxRuntime: maxRun}
	if s.Inputs, err = validateInputs(r.Inputs); err != nil {
		return s, err
	}
	if s.Resources, err = decodeResources(r.Resources); err != nil {
		return s, err
	}
	if len(r.Payload) > 0 {
		if s.Payload, err = CompactPayload(r.Payload); err != nil {
			return s, &FieldError{"payload", err.Error()}
		}
	}
	if len(s.Items) == 0 {
		if err := validateBuiltinAt(r.Kind, payloadField, s.Payload); err != nil {
			return s, err
		}
	}
	// The dispatch deadline counts from run_at.
	from := now
	if r.RunAt != "" {
		at, err := parseRunAt(r.RunAt, now)
		if err != nil {
			return s, &FieldError{"run_at", err.Error()}
		}
		if at.After(now) {
			s.RunAt = &at
			from = at
		}
	}
	maxWait := lim.MaxDispatchDeadline
	if maxWait <= 0 {
		maxWait = 100 * 365 * 24 * time.Hour // no limit configured
	}
	limit := from.Add(maxWait)
	s.DispatchDeadline = limit
	if r.Deadline != "" {
		at, err := parseDeadline(r.Deadline, from)
		if err != nil {
			return s, &FieldError{"deadline", err.Error()}
		}
		if !at.After(now) {
			return s, &FieldError{"deadline", "is in the past"}
		}
		if !at.After(from) {
			return s, &FieldError{"deadline", "is not after run_at"}
		}
		if at.After(limit) {
			return s, &FieldError{"deadline", fmt.Sprintf("is later than the maximum dispatch deadline (%s)", lim.MaxDispatchDeadline)}
		}
		s.DispatchDeadline = at
	}
	return s, nil
}

// decodeResources reads a submit's resources member: nil when absent or
// null, else a valid declaration; its errors are *FieldError naming the
// member ("resources.memory"), but for a duplicate key: a *DecodeError.
func decodeResources(raw json.RawMessage) (*Resources, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var r Resources
	if err := DecodeWithin("resources", raw, &r); err != nil {
		var de *DecodeError
		if errors.As(err, &de) && de.dup {
			return nil, de
		}
		if errors.As(err, &de) {
			return nil, &FieldError{Field: de.Path, Reason: de.Reason}
		}
		return nil, &FieldError{Field: "resources", Reason: err.Error()}
	}
	return &r, nil
}

// parseDeadline reads a Go duration ("90s", relative to now) or an RFC 3339 time.
func parseDeadline(v string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil {
		if d <= 0 {
			return time.Time{}, errors.New("must be a positive duration")
		}
		if d > 100*365*24*time.Hour {
			return time.Time{}, errors.New("is absurdly far in the future")
		}
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, errors.New("must be a Go duration like \"90s\" or an RFC 3339 time")
	}
	return t, nil
}

// validateConcurrency checks concurrency_key and concurrency_limit, which
// come together.
func (r SubmitRequest) validateConcurrency(s *Submission) error {
	switch {
	case r.ConcurrencyKey == "" && r.ConcurrencyLimit == 0:
		return nil
	case r.ConcurrencyKey == "":
		return &FieldError{"concurrency_key", "is required with concurrency_limit"}
	case len(r.ConcurrencyKey) > MaxConcurrencyKeyLen:
		return &FieldError{"concurrency_key", fmt.Sprintf("is longer than %d bytes", MaxConcurrencyKeyLen)}
	case !printable(r.ConcurrencyKey):
		return &FieldError{"concurrency_key", "must be printable text"}
	case r.ConcurrencyLimit < 1 || r.ConcurrencyLimit > MaxConcurrencyLimit:
		return &FieldError{"concurrency_limit", fmt.Sprintf("must be between 1 and %d with concurrency_key", MaxConcurrencyLimit)}
	}
	s.ConcurrencyKey, s.ConcurrencyLimit = r.ConcurrencyKey, r.ConcurrencyLimit
	return nil
}

// validateFanout checks items, concurrency and fail_fast, which make a
// fan-out parent.
func (r SubmitRequest) validateFanout(s *Submission) error {
	if len(r.Items) == 0 {
		switch {
		case r.Concurrency != 0:
			return &FieldError{"concurrency", "is the window of a fan-out: it needs items"}
		case r.FailFast:
			return &FieldError{"fail_fast", "applies to a fan-out: it needs items"}
		}
		return nil
	}
	if len(r.Payload) > 0 {
		return &FieldError{"payload", "cannot go with items: each item is its child's payload"}
	}
	items, err := SplitItems(r.Items)
	if err != nil {
		return err
	}
	switch {
	case r.Concurrency == 0:
		s.Concurrency = DefaultWindow
	case r.Concurrency < 1 || r.Concurrency > MaxWindow:
		return &FieldError{"concurrency", fmt.Sprintf("must be between 1 and %d", MaxWindow)}
	default:
		s.Concurrency = r.Concurrency
	}
	for i, it := range items {
		if err := validateBuiltinAt(r.Kind, fmt.Sprintf("items[%d]", i), it); err != nil {
			return err
		}
	}
	s.Items, s.FailFast = items, r.FailFast
	return nil
}

// printable reports whether v is printable text.
func printable(v string) bool {
	for _, c := range v {
		if !unicode.IsPrint(c) || c == unicode.ReplacementChar {
			return false
		}
	}
	return true
}

// parseRunAt reads run_at: a Go duration from now ("0s" or more) or an RFC
// 3339 time, at most MaxRunAhead ahead. A time in the past means now.
func parseRunAt(v string, now time.Time) (time.Time, error) {
	var at time.Time
	if d, err := time.ParseDuration(v); err == nil {
		if d < 0 {
			return time.Time{}, errors.New("must not be a negative duration")
		}
		if d > MaxRunAhead {
			return time.Time{}, fmt.Errorf("is more than %s ahead", MaxRunAhead)
		}
		at = now.Add(d)
	} else {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return time.Time{}, errors.New("must be a Go duration like \"90s\" or an RFC 3339 time")
		}
		at = t
	}
	if at.Sub(now) > MaxRunAhead {
		return time.Time{}, fmt.Errorf("is more than %s ahead", MaxRunAhead)
	}
	return at, nil
}
