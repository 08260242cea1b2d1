// Package kinds holds the worker's built-in job kinds: "sleep", which waits
// for a while (useful for tests, demos and load generation), and "exec",
// which runs an allow-listed program in its own process group. Each kind is
// a Func over the raw JSON payload; the payload decoders are strict and
// exported so they can be tested and fuzzed on their own. The rules of
// the payloads live in pkg/contracts (DecodeSleepPayload,
// DecodeExecPayload), where the gateway checks them at submit too.
package kinds

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/internal/limit"
	"github.com/sluicehq/sluice/services/worker/internal/sandbox"
)

// Run is one run of a job as a kind sees it: its payload and the scratch
// directory of this run alone (made on the first call of Scratch, removed
// when the run ends).
type Run struct {
	Payload json.RawMessage
	Scratch func() (string, error)
	// InputEnv are the run's pinned inputs: their variables
	// (SLUICE_INPUT_<NAME>) and the paths of the run's own copies.
	InputEnv map[string]string
	// Name names the run among the worker's running runs (its job and
	// claim): the name of its cgroup.
	Name string
	// Resources are what the run may use; Enforcer (nil: none) holds a
	// program to them, sized with MaxRuntime (0: none) for CPU time.
	Resources  contracts.Resources
	MaxRuntime time.Duration
	Enforcer   *limit.Enforcer
	// Usage (nil: nobody asks) receives what the run used.
	Usage func(contracts.Usage)
	// Sandbox (nil: none) walls the run's programs off: their own uid,
	// namespace and a warden that bounds them by the lease. InputDir is
	// the directory of the run's input copies ("" = none), made the
	// run's with its scratch directory.
	Sandbox  *sandbox.Sandbox
	InputDir string
	// LeaseLeft (nil: no lease) says how long the run's lease lasts from
	// now; false once the run holds none. The warden kills the run's
	// programs when it passes without renewal, even if the worker is
	// stopped.
	LeaseLeft func() (time.Duration, bool)
}

// Func runs one job of a kind: it decodes the payload, does the work and
// returns a JSON result. An error that is a *contracts.ClassedError keeps
// its class; a cancelled ctx makes it return ctx's error.
type Func func(ctx context.Context, r Run) (json.RawMessage, error)

// Names of the built-in kinds.
const (
	Sleep = contracts.KindSleep
	Exec  = contracts.KindExec
)

// Names returns every built-in kind, sorted.
func Names() []string { return []string{Exec, Sleep} }

// Known reports whether name is a built-in kind.
func Known(name string) bool { return slices.Contains(Names(), name) }
