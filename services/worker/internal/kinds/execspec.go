package kinds

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

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

// envKeyRE is a portable environment variable name.
var envKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// ValidEnvName reports whether k is a portable environment variable name.
func ValidEnvName(k string) bool { return envKeyRE.MatchString(k) }

// ExecSpec is a validated exec payload.
type ExecSpec struct {
	// Argv is the program (exactly as allow-listed) and its arguments.
	Argv []string
	// Timeout bounds the run; the process group is killed after it.
	Timeout time.Duration
	// Dir is the working directory; empty means the worker's.
	Dir string
	// Env is added to the minimal base environment.
	Env map[string]string
}

type execPayload struct {
	Argv    []string          `json:"argv"`
	Timeout string            `json:"timeout"`
	Dir     string            `json:"dir"`
	Env     map[string]string `json:"env"`
}

// ParseExecPayload strictly decodes an exec payload
// {"argv":[...],"timeout":"30s","dir":"...","env":{"K":"V"}} and checks it:
// argv has 1 to MaxExecArgs entries of at most MaxExecArgBytes without NUL
// bytes, argv[0] equals an entry of allow exactly (an empty allow list
// refuses everything), the timeout is a positive Go duration of at most
// MaxExecTimeout (default DefaultExecTimeout), and env names are plain
// variable names that do not steer the dynamic loader (LD_*, DYLD_*).
func ParseExecPayload(data []byte, allow []string) (ExecSpec, error) {
	var spec ExecSpec
	if isAbsent(data) {
		return spec, errors.New("exec: payload is required")
	}
	var p execPayload
	if err := decodeStrict(data, &p); err != nil {
		return spec, fmt.Errorf("exec: %w", err)
	}
	if err := checkArgv(p.Argv); err != nil {
		return spec, err
	}
	if !slices.Contains(allow, p.Argv[0]) {
		return spec, fmt.Errorf("exec: program %q is not allowed", p.Argv[0])
	}
	timeout, err := parseTimeout(p.Timeout)
	if err != nil {
		return spec, err
	}
	if err := checkText("dir", p.Dir); err != nil {
		return spec, err
	}
	if err := checkEnv(p.Env); err != nil {
		return spec, err
	}
	spec = ExecSpec{Argv: p.Argv, Timeout: timeout, Dir: p.Dir, Env: p.Env}
	return spec, nil
}

func checkArgv(argv []string) error {
	if len(argv) == 0 {
		return errors.New("exec: argv must name a program")
	}
	if len(argv) > MaxExecArgs {
		return fmt.Errorf("exec: argv has %d entries, at most %d", len(argv), MaxExecArgs)
	}
	if argv[0] == "" {
		return errors.New("exec: argv[0] must name a program")
	}
	for i, a := range argv {
		if err := checkText(fmt.Sprintf("argv[%d]", i), a); err != nil {
			return err
		}
	}
	return nil
}

func checkText(what, s string) error {
	if len(s) > MaxExecArgBytes {
		return fmt.Errorf("exec: %s is %d bytes, at most %d", what, len(s), MaxExecArgBytes)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("exec: %s contains a NUL byte", what)
	}
	return nil
}

func parseTimeout(s string) (time.Duration, error) {
	if s == "" {
		return DefaultExecTimeout, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("exec: timeout %q is not a Go duration", s)
	}
	if d <= 0 || d > MaxExecTimeout {
		return 0, fmt.Errorf("exec: timeout %s must be positive and at most %s", d, MaxExecTimeout)
	}
	return d, nil
}

func checkEnv(env map[string]string) error {
	if len(env) > MaxExecEnv {
		return fmt.Errorf("exec: env has %d entries, at most %d", len(env), MaxExecEnv)
	}
	for k, v := range env {
		if !envKeyRE.MatchString(k) {
			return fmt.Errorf("exec: env name %q is not a variable name", k)
		}
		if strings.HasPrefix(k, "LD_") || strings.HasPrefix(k, "DYLD_") {
			return fmt.Errorf("exec: env name %q is not allowed", k)
		}
		if err := checkText("env "+k, v); err != nil {
			return err
		}
	}
	return nil
}
