package contracts

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Duration is a length of time that JSON carries as a Go duration string
// ("90s", "1h30m0s").
type Duration time.Duration

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return errors.New("duration must be a string like \"90s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// MaxRunLimit bounds stall_timeout and max_runtime.
const MaxRunLimit = 7 * 24 * time.Hour

// RunLimits are what a run may take: how long without progress
// (StallTimeout) and how long in all (MaxRuntime); 0 is no limit.
type RunLimits struct {
	StallTimeout Duration `json:"stall_timeout,omitempty"`
	MaxRuntime   Duration `json:"max_runtime,omitempty"`
}

// parseRunLimit reads stall_timeout or max_runtime: a positive Go duration
// of at most MaxRunLimit, and at most max when that is set.
func parseRunLimit(field, v string, max time.Duration) (Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return 0, &FieldError{field, "must be a Go duration like \"90s\""}
	case d <= 0:
		return 0, &FieldError{field, "must be positive"}
	case d > MaxRunLimit:
		return 0, &FieldError{field, fmt.Sprintf("must be at most %s", MaxRunLimit)}
	case max > 0 && d > max:
		return 0, &FieldError{field, fmt.Sprintf("is longer than this server's maximum runtime (%s)", max)}
	}
	return Duration(d), nil
}
