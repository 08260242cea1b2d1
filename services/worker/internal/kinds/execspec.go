package kinds

import (
	"fmt"
	"slices"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Bounds of an exec payload (see contracts.DecodeExecPayload).
const (
	// MaxExecArgs is the most argv entries an exec job may have.
	MaxExecArgs = contracts.MaxExecArgs
	// MaxExecArgBytes bounds each argv entry, env value and the dir.
	MaxExecArgBytes = contracts.MaxExecArgBytes
	// MaxExecEnv is the most env entries an exec job may set.
	MaxExecEnv = contracts.MaxExecEnv
	// DefaultExecTimeout applies when the payload gives no timeout.
	DefaultExecTimeout = contracts.DefaultExecTimeout
	// MaxExecTimeout is the longest timeout an exec job may ask for.
	MaxExecTimeout = contracts.MaxExecTimeout
)

// ValidEnvName reports whether k is a portable environment variable name.
func ValidEnvName(k string) bool { return contracts.ValidEnvName(k) }

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

// ParseExecPayload strictly decodes an exec payload
// {"argv":[...],"timeout":"30s","dir":"...","env":{"K":"V"}} and checks it
// by the rule the gateway checks it with at submit
// (contracts.DecodeExecPayload: argv, timeout, dir and env names), then
// checks that argv[0] equals an entry of allow exactly (an empty allow
// list refuses everything).
func ParseExecPayload(data []byte, allow []string) (ExecSpec, error) {
	p, timeout, err := contracts.DecodeExecPayload(data)
	if err != nil {
		return ExecSpec{}, fmt.Errorf("exec: %w", err)
	}
	if !slices.Contains(allow, p.Argv[0]) {
		return ExecSpec{}, fmt.Errorf("exec: program %q is not allowed", p.Argv[0])
	}
	return ExecSpec{Argv: p.Argv, Timeout: timeout, Dir: p.Dir, Env: p.Env}, nil
}
