package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/internal/kinds"
)

// Job is one claim of a job, as a handler sees it.
type Job struct {
	ID     string
	Tenant string
	Kind   string
	// Claim is the job's dispatch claim this run holds: the fencing token
	// of its heartbeats and result (the API's "claim"). It is not the run
	// number: claims that never ran (a busy worker, a lost offer) count
	// too. (Named Attempt before 0.13.)
	Claim    int64
	Payload  json.RawMessage
	Key      string
	Priority int
	// scratch makes (once) and returns the run's scratch directory.
	scratch func() (string, error)
	// RunLimits are what the run may take: the worker stops it after
	// StallTimeout without a progress report, or after MaxRuntime.
	contracts.RunLimits
	// Inputs are the run's pinned inputs; InputPaths are their local,
	// read-only copies by name, checked against their digests. The copies
	// are this run's own (removed when it ends): what a run does to them
	// reaches no other run.
	Inputs     []contracts.InputRef
	InputPaths map[string]string
	// Resources are what the run takes of the worker's: its declaration,
	// else its kind's default, else one slot's share.
	Resources contracts.Resources
	// usage records what the run used (set by the worker).
	usage func(contracts.Usage)
	// inputDir holds InputPaths (set by the worker).
	inputDir string
}

// jobFromSpec copies an offered job spec into a Job that takes need.
func jobFromSpec(s contracts.JobSpec, need contracts.Resources) Job {
	return Job{
		ID: s.ID, Tenant: s.Tenant, Kind: s.Kind, Claim: s.Claim,
		Payload: s.Payload, Key: s.Key, Priority: s.Priority, RunLimits: s.RunLimits, Inputs: s.Inputs,
		Resources: need,
	}
}

// Scratch returns a fresh directory for this run alone, made on the first
// call and removed when the run ends, whatever the outcome.
func (j Job) Scratch() (string, error) {
	if j.scratch == nil {
		return "", errors.New("worker: no scratch directory outside a run")
	}
	return j.scratch()
}

// Lease returns the run's fencing token: the job and its claim.
func (j Job) Lease() contracts.Lease { return contracts.Lease{JobID: j.ID, Claim: j.Claim} }

// Result is a handler's JSON result. Empty means none.
type Result json.RawMessage

// JSON encodes v as a Result.
func JSON(v any) (Result, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode result: %w", err)
	}
	return Result(data), nil
}

// Handler runs one job. It must return when ctx ends (the lease was lost,
// the job was cancelled, or the worker is shutting down). ctx.Err reads
// the clock against the lease too: a handler that checks it before each
// step that acts on the world never acts after its lease passed, even
// right after its worker resumes from a freeze. A returned error
// fails the job with contracts.Classify(err), so a handler may return a
// *contracts.ClassedError to choose the class (for example input). A
// failed job runs again after a backoff until it has run max_attempts
// times, unless the error's class is input or cancelled or the handler
// wraps it with contracts.Permanent. A result returned together with an
// error is kept. A panic fails the job
// with "handler: panic: …" and never crashes the worker.
type Handler func(ctx context.Context, job Job) (Result, error)

// registerBuiltins registers the built-in kinds listed in Config.Kinds.
func (w *Worker) registerBuiltins() error {
	for _, name := range w.cfg.Kinds {
		var run kinds.Func
		switch name {
		case kinds.Sleep:
			run = func(ctx context.Context, r kinds.Run) (json.RawMessage, error) { return kinds.RunSleep(ctx, r.Payload) }
		case kinds.Exec:
			run = kinds.NewExecer(kinds.ExecPolicy{Programs: w.cfg.ExecAllow, Env: w.cfg.ExecEnvAllow, Dirs: w.cfg.ExecDirs},
				w.cfg.ExecGrace, w.now).RunIn
		default:
			return fmt.Errorf("worker: %q is not a built-in kind", name)
		}
		if err := w.Handle(name, w.adapt(run)); err != nil {
			return err
		}
	}
	return nil
}

// adapt turns a payload-level kind into a Handler.
func (w *Worker) adapt(run kinds.Func) Handler {
	return func(ctx context.Context, job Job) (Result, error) {
		env := map[string]string{}
		for _, in := range job.Inputs {
			if p, ok := job.InputPaths[in.Name]; ok {
				env[in.EnvName()] = p
			}
		}
		l := job.Lease()
		out, err := run(ctx, kinds.Run{
			Payload: job.Payload, Scratch: job.Scratch, InputEnv: env, InputDir: job.inputDir,
			Name: job.ID + "-" + strconv.FormatInt(job.Claim, 10), Resources: job.Resources,
			MaxRuntime: time.Duration(job.MaxRuntime), Enforcer: w.limits, Usage: job.usage,
			Sandbox: w.sandbox,
			LeaseLeft: func() (time.Duration, bool) {
				return w.leases.Left(l, w.now(), w.fenceAfter())
			},
		})
		return Result(out), err
	}
}
