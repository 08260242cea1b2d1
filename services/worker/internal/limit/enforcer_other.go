//go:build !linux

package limit

import (
	"errors"
	"os/exec"
	"runtime"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// Options say how to build an Enforcer.
type Options struct {
	// Name is the worker's cgroup name (unused here).
	Name string
	// Want caps the mechanism (only none exists here).
	Want contracts.LimitMechanism
	// Pids bounds a run's processes (unused here).
	Pids int64
}

// Enforcer starts exec jobs' processes; outside Linux it enforces nothing.
type Enforcer struct{}

// New returns an Enforcer that enforces nothing.
func New(Options) *Enforcer { return &Enforcer{} }

// Mechanism is none.
func (l *Enforcer) Mechanism() contracts.LimitMechanism { return contracts.LimitNone }

// Reason says why nothing is enforced.
func (l *Enforcer) Reason() string { return "limits are enforced on Linux only" }

// Close does nothing.
func (l *Enforcer) Close() error { return nil }

// Run is one started process.
type Run struct{ cmd *exec.Cmd }

// Start starts cmd.
func (l *Enforcer) Start(cmd *exec.Cmd, _ string, _ contracts.Resources, _ time.Duration) (*Run, error) {
	return &Run{cmd: cmd}, cmd.Start()
}

// Plan is what Start needs of a run besides its command.
type Plan struct {
	Name        string
	Resources   contracts.Resources
	MaxRuntime  time.Duration
	SelfLimited bool
}

// StartPlan starts cmd.
func (l *Enforcer) StartPlan(cmd *exec.Cmd, _ Plan) (*Run, error) {
	return &Run{cmd: cmd}, cmd.Start()
}

// Rlimit is one resource limit a self-limited command sets on itself.
type Rlimit struct {
	Resource int    `json:"resource"`
	Cur      uint64 `json:"cur"`
	Max      uint64 `json:"max"`
}

// Rlimits are none here.
func (r *Run) Rlimits() []Rlimit { return nil }

// PidsHeld is false here.
func (r *Run) PidsHeld() bool { return false }

// Target is what another process needs to kill a run's tree: nothing here.
type Target struct {
	Mech contracts.LimitMechanism `json:"mech"`
	Dirs map[string]string        `json:"dirs,omitempty"`
}

// Target returns an empty Target.
func (r *Run) Target() Target { return Target{Mech: contracts.LimitNone} }

// Kill reports false: there are no cgroups here.
func (t Target) Kill(...int) bool { return false }

// Kill kills the process.
func (r *Run) Kill() {
	if r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
	}
}

// Outcome is how a finished run stood against its limits.
type Outcome struct {
	Usage      contracts.Usage
	OverMemory bool
	OverCPU    bool
}

// Finish reports the mechanism.
func (r *Run) Finish() Outcome {
	return Outcome{Usage: contracts.Usage{Mechanism: contracts.LimitNone}}
}

// Capacity is the machine's cores (memory unknown here).
func Capacity() contracts.Resources { return contracts.Resources{CPU: float64(runtime.NumCPU())} }

// Sampler measures nothing outside Linux.
type Sampler struct{}

// NewSampler returns a Sampler.
func NewSampler() *Sampler { return &Sampler{} }

// Sample fails: nothing is measured here.
func (s *Sampler) Sample() (Measure, error) {
	return Measure{}, errors.New("limit: use is measured on Linux only")
}
