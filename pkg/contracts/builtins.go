package contracts

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// The payloads of the built-in kinds ("sleep" and "exec", which every
// worker can run). Their rules are written once, here: the gateway checks
// a submitted payload with them (ValidateBuiltinPayload, a 422 naming the
// field), and the worker decodes the payload it runs with the same
// functions, so a payload the gateway admitted never fails a run for its
// shape. What only the worker knows (the programs, variables and
// directories its operator allows) is checked by the worker alone. The
// payloads of other kinds are their handlers' business.

// Names of the built-in kinds.
const (
	KindSleep = "sleep"
	KindExec  = "exec"
)

// MaxSleepMS is the longest a sleep job may ask for: one day.
const MaxSleepMS = 86_400_000

// Bounds of an exec payload.
const (
	// MaxExecArgs is the most argv entries an exec job may have.
	MaxExecArgs = 256
	// MaxExecArgBytes bounds each argv entry, env value and the dir.
	MaxExecArgBytes = 4096
	// MaxExecEnv is the most env entries an exec job may set.
	MaxExecEnv = 256
	// DefaultExecTimeout applies when the payload gives no timeout.
	DefaultExecTimeout = 10 * time.Minute
	// MaxExecTimeout is the longest timeout an exec job may ask for.
	MaxExecTimeout = 24 * time.Hour
)

// payloadField is the path of a payload in a submit body, which the
// errors below start with.
const payloadField = "payload"

// SleepPayload is the payload of a sleep job: {"ms": N}.
type SleepPayload struct {
	MS int64 `json:"ms"`
}

// Duration is how long the job sleeps.
func (p SleepPayload) Duration() time.Duration { return time.Duration(p.MS) * time.Millisecond }

// DecodeSleepPayload decodes a sleep payload {"ms": N} with 0 ≤ N ≤
// MaxSleepMS. A missing or null payload means 0 ms. Unknown fields,
// fractions and trailing data are errors; each is a *FieldError naming
// the field ("payload.ms").
func DecodeSleepPayload(data []byte) (SleepPayload, error) {
	var p SleepPayload
	if payloadAbsent(data) {
		return p, nil
	}
	if err := decodePayload(data, &p); err != nil {
		return SleepPayload{}, err
	}
	if p.MS < 0 || p.MS > MaxSleepMS {
		return SleepPayload{}, &FieldError{payloadField + ".ms", fmt.Sprintf("must be between 0 and %d, got %d", MaxSleepMS, p.MS)}
	}
	return p, nil
}

// ExecPayload is the payload of an exec job:
// {"argv":[...],"timeout":"30s","dir":"...","env":{"K":"V"}}.
type ExecPayload struct {
	// Argv is the program and its arguments.
	Argv []string `json:"argv"`
	// Timeout is a Go duration bounding the run (DefaultExecTimeout when
	// empty).
	Timeout string `json:"timeout,omitempty"`
	// Dir is the working directory; empty means the run's scratch one.
	Dir string `json:"dir,omitempty"`
	// Env is added to the run's environment.
	Env map[string]string `json:"env,omitempty"`
}

// envNameRE is a portable environment variable name.
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// ValidEnvName reports whether k is a portable environment variable name.
func ValidEnvName(k string) bool { return envNameRE.MatchString(k) }

// DecodeExecPayload strictly decodes an exec payload and checks its shape:
// argv has 1 to MaxExecArgs entries of at most MaxExecArgBytes without NUL
// bytes and names a program, the timeout is a positive Go duration of at
// most MaxExecTimeout (DefaultExecTimeout when not given), dir and the
// env values are bounded text, and env names are plain variable names
// that do not steer the dynamic loader (LD_*, DYLD_*). It returns the
// payload and its timeout; its errors are *FieldError naming the field
// ("payload.argv"). Whether the worker allows the program, the variables
// and the dir is the worker's own check.
func DecodeExecPayload(data []byte) (ExecPayload, time.Duration, error) {
	var p ExecPayload
	if payloadAbsent(data) {
		return p, 0, &FieldError{payloadField, `is required for kind exec: {"argv":["program", …]}`}
	}
	if err := decodePayload(data, &p); err != nil {
		return ExecPayload{}, 0, err
	}
	if err := checkArgv(p.Argv); err != nil {
		return ExecPayload{}, 0, err
	}
	timeout, err := execTimeout(p.Timeout)
	if err != nil {
		return ExecPayload{}, 0, err
	}
	if err := checkExecText(payloadField+".dir", p.Dir); err != nil {
		return ExecPayload{}, 0, err
	}
	if err := checkExecEnv(p.Env); err != nil {
		return ExecPayload{}, 0, err
	}
	return p, timeout, nil
}

// ValidateBuiltinPayload checks payload against the rules of kind when it
// is a built-in kind (nil for every other kind). Its errors are
// *FieldError naming the field.
func ValidateBuiltinPayload(kind string, payload []byte) error {
	var err error
	switch kind {
	case KindSleep:
		_, err = DecodeSleepPayload(payload)
	case KindExec:
		_, _, err = DecodeExecPayload(payload)
	}
	return err
}

// validateBuiltinAt is ValidateBuiltinPayload of a payload found at field
// of a submit body ("payload", or a fan-out's "items[3]").
func validateBuiltinAt(kind, field string, payload []byte) error {
	err := ValidateBuiltinPayload(kind, payload)
	var (
		fe *FieldError
		de *DecodeError
	)
	switch {
	case field == payloadField:
		return err
	case errors.As(err, &fe):
		return &FieldError{field + strings.TrimPrefix(fe.Field, payloadField), fe.Reason}
	case errors.As(err, &de):
		return &DecodeError{Path: field + strings.TrimPrefix(de.Path, payloadField), Reason: de.Reason, dup: de.dup}
	}
	return err
}

// payloadAbsent reports whether a payload was not given: empty or null.
func payloadAbsent(data []byte) bool {
	t := bytes.TrimSpace(data)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// decodePayload strictly decodes a payload object into v; its errors are
// *FieldError at the field they are about, but for a duplicate key: a
// *DecodeError (HTTP 400, as anywhere else in a body).
func decodePayload(data []byte, v any) error {
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' {
		return &FieldError{payloadField, "must be a JSON object"}
	}
	err := DecodeWithin(payloadField, data, v)
	var de *DecodeError
	if errors.As(err, &de) && !de.dup {
		return &FieldError{cmp.Or(de.Path, payloadField), de.Reason}
	}
	return err
}

func checkArgv(argv []string) error {
	const field = payloadField + ".argv"
	switch {
	case len(argv) == 0:
		return &FieldError{field, `is required: the program and its arguments, ["program", …]`}
	case len(argv) > MaxExecArgs:
		return &FieldError{field, fmt.Sprintf("has %d entries, at most %d", len(argv), MaxExecArgs)}
	case argv[0] == "":
		return &FieldError{field + "[0]", "must name a program"}
	}
	for i, a := range argv {
		if err := checkExecText(fmt.Sprintf("%s[%d]", field, i), a); err != nil {
			return err
		}
	}
	return nil
}

func checkExecText(field, s string) error {
	if len(s) > MaxExecArgBytes {
		return &FieldError{field, fmt.Sprintf("is %d bytes, at most %d", len(s), MaxExecArgBytes)}
	}
	if strings.IndexByte(s, 0) >= 0 {
		return &FieldError{field, "contains a NUL byte"}
	}
	return nil
}

func execTimeout(s string) (time.Duration, error) {
	const field = payloadField + ".timeout"
	if s == "" {
		return DefaultExecTimeout, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, &FieldError{field, fmt.Sprintf("%q is not a Go duration like \"30s\"", s)}
	}
	if d <= 0 || d > MaxExecTimeout {
		return 0, &FieldError{field, fmt.Sprintf("%s must be positive and at most %s", d, MaxExecTimeout)}
	}
	return d, nil
}

func checkExecEnv(env map[string]string) error {
	const field = payloadField + ".env"
	if len(env) > MaxExecEnv {
		return &FieldError{field, fmt.Sprintf("has %d entries, at most %d", len(env), MaxExecEnv)}
	}
	for k, v := range env {
		if !envNameRE.MatchString(k) {
			return &FieldError{field, fmt.Sprintf("%q is not a variable name", k)}
		}
		if strings.HasPrefix(k, "LD_") || strings.HasPrefix(k, "DYLD_") {
			return &FieldError{field, fmt.Sprintf("%q is not allowed", k)}
		}
		if err := checkExecText(keyPath(field, k), v); err != nil {
			return err
		}
	}
	return nil
}
