package kinds

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/internal/limit"
	"github.com/sluicehq/sluice/services/worker/internal/progress"
	"github.com/sluicehq/sluice/services/worker/internal/sandbox"
)

// DefaultKillGrace is how long an exec job's process group has between
// SIGTERM and SIGKILL.
const DefaultKillGrace = 5 * time.Second

// defaultPath is the PATH of a job when the worker has none.
const defaultPath = "/usr/local/bin:/usr/bin:/bin"

// ExecResult is the result of an exec job.
type ExecResult struct {
	ExitCode   int    `json:"exit_code"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	DurationMS int64  `json:"duration_ms"`
}

// ExecPolicy is what the operator lets exec jobs do. Each list is an allow
// list: empty allows nothing.
type ExecPolicy struct {
	// Programs are the argv[0] values a job may run, exactly.
	Programs []string
	// Env are the environment variable names a job may set.
	Env []string
	// Dirs are the roots a job's dir may resolve inside (after symlinks),
	// besides its run's scratch directory.
	Dirs []string
}

// Execer runs the "exec" kind: allow-listed programs, each in its own
// process group, with a minimal environment and bounded output capture.
type Execer struct {
	allow []string
	env   []string
	dirs  []string
	grace time.Duration
	now   func() time.Time
	base  map[string]string
}

// NewExecer returns an exec kind under policy p: it runs only the programs
// p names exactly (names resolved through PATH, or absolute paths), lets a
// job set only the variables p names and work only in its scratch
// directory or under p's roots, gives a process group grace between
// SIGTERM and SIGKILL (DefaultKillGrace when ≤ 0) and reads the time from
// now (time.Now when nil). Jobs start from a base environment of the
// worker's PATH and HOME only, plus SLUICE_SCRATCH_DIR.
func NewExecer(p ExecPolicy, grace time.Duration, now func() time.Time) *Execer {
	if grace <= 0 {
		grace = DefaultKillGrace
	}
	if now == nil {
		now = time.Now
	}
	base := map[string]string{"PATH": os.Getenv("PATH"), "HOME": os.Getenv("HOME")}
	if base["PATH"] == "" {
		base["PATH"] = defaultPath
	}
	if base["HOME"] == "" {
		base["HOME"] = "/"
	}
	return &Execer{allow: slices.Clone(p.Programs), env: slices.Clone(p.Env), dirs: slices.Clone(p.Dirs),
		grace: grace, now: now, base: base}
}

// Run runs payload with no scratch directory (see RunIn).
func (e *Execer) Run(ctx context.Context, payload json.RawMessage) (json.RawMessage, error) {
	return e.RunIn(ctx, Run{Payload: payload})
}

// RunIn is the kind's Func. The program runs in the run's scratch
// directory unless the payload names a dir. A bad payload, or one the
// policy does not allow (program, variable, dir), is an input error; a
// timeout is a timeout error; a non-zero exit is the error "exit status
// N". The result (exit code, the last OutputLimit bytes of stdout and
// stderr, duration) is returned whenever the program started.
func (e *Execer) RunIn(ctx context.Context, r Run) (json.RawMessage, error) {
	spec, err := ParseExecPayload(r.Payload, e.allow)
	if err != nil {
		return nil, &contracts.ClassedError{Class: contracts.ClassInput, Err: err}
	}
	scratch := ""
	if r.Scratch != nil {
		if scratch, err = r.Scratch(); err != nil {
			return nil, err
		}
	}
	if err := e.check(&spec, scratch); err != nil {
		return nil, &contracts.ClassedError{Class: contracts.ClassInput, Err: err}
	}
	var box *sandbox.Box
	if r.Sandbox != nil {
		if box, err = r.Sandbox.Open(r.Name, sandbox.Dirs{Scratch: scratch, Inputs: r.InputDir}); err != nil {
			return nil, fmt.Errorf("exec: %w", err)
		}
		if box != nil {
			defer box.Close()
		}
	}
	runCtx, cancel := context.WithTimeout(ctx, spec.Timeout)
	defer cancel()

	cmd := exec.CommandContext(runCtx, spec.Argv[0], spec.Argv[1:]...)
	if cmd.Err != nil {
		return nil, fmt.Errorf("exec: %w", cmd.Err)
	}
	// A line of output is a sign of life for the job's stall timeout.
	alive := func() { progress.Alive(ctx) }
	stdout, stderr := newTail(OutputLimit, alive), newTail(OutputLimit, alive)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Dir = spec.Dir
	cmd.Env = e.environ(spec.Env, scratch, r.InputEnv, box)
	cmd.SysProcAttr = sysProcAttr()
	cmd.Cancel = func() error { return signalGroup(cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = e.grace
	var launch *sandbox.Launch
	if box != nil {
		if launch, err = box.Launch(cmd); err != nil {
			return nil, fmt.Errorf("exec: %w", err)
		}
	}

	start := e.now()
	var lr *limit.Run
	if r.Enforcer != nil {
		lr, err = r.Enforcer.StartPlan(cmd, limit.Plan{Name: r.Name, Resources: r.Resources, MaxRuntime: r.MaxRuntime,
			SelfLimited: launch != nil})
	} else {
		err = cmd.Start()
	}
	if err != nil {
		if launch != nil {
			launch.Abort()
		}
		return nil, fmt.Errorf("exec: start %s: %w", spec.Argv[0], err)
	}
	pgid := cmd.Process.Pid
	if launch != nil {
		stopRenew := renewLease(box, r.LeaseLeft)
		defer stopRenew()
		var (
			target limit.Target
			rl     []limit.Rlimit
			held   bool
		)
		if lr != nil {
			target, rl, held = lr.Target(), lr.Rlimits(), lr.PidsHeld()
		}
		if err := launch.Begin(target, rl, held); err != nil {
			_ = cmd.Wait()
			_ = signalGroup(pgid, syscall.SIGKILL)
			if lr != nil {
				lr.Finish()
			}
			return nil, fmt.Errorf("exec: start %s: %w", spec.Argv[0], err)
		}
	}
	waitErr := cmd.Wait()
	// Whatever the leader did, nothing it started outlives the job: its
	// process group, and with a cgroup every process in it (and with a
	// uid of its own, every process of that uid: box.Close).
	_ = signalGroup(pgid, syscall.SIGKILL)
	var over limit.Outcome
	if lr != nil {
		over = lr.Finish()
		if r.Usage != nil {
			r.Usage(over.Usage)
		}
	}

	out, err := json.Marshal(ExecResult{
		ExitCode:   cmd.ProcessState.ExitCode(),
		Stdout:     stdout.String(),
		Stderr:     stderr.String(),
		DurationMS: e.now().Sub(start).Milliseconds(),
	})
	if err != nil {
		return nil, fmt.Errorf("exec: encode result: %w", err)
	}
	return out, e.outcome(ctx, runCtx, spec, cmd, waitErr, resourcesOutcome{over, r.Resources, stderr.String()})
}

// resourcesOutcome is how a run stood against its resources.
type resourcesOutcome struct {
	limit.Outcome
	declared contracts.Resources
	stderr   string
}

// overError is the resources: error of a failed run that went past what it
// declared, or nil.
func (o resourcesOutcome) overError() error {
	overMemory := o.OverMemory ||
		(o.Usage.Mechanism == contracts.LimitRlimit && o.declared.Memory > 0 && limit.OutOfMemoryText(o.stderr))
	switch {
	case overMemory:
		return &contracts.ClassedError{Class: contracts.ClassResources, Err: fmt.Errorf(
			"exec: went past its memory of %s (peak %s, %s) and was stopped",
			contracts.FormatMemory(o.declared.Memory), contracts.FormatMemory(o.Usage.PeakMemory), o.Usage.Mechanism)}
	case o.OverCPU:
		return &contracts.ClassedError{Class: contracts.ClassResources, Err: fmt.Errorf(
			"exec: used up its CPU time (%g cores for its max_runtime, %s) and was stopped", o.declared.CPU, o.Usage.Mechanism)}
	}
	return nil
}

// outcome turns how the program ended into the job's error.
func (e *Execer) outcome(ctx, runCtx context.Context, spec ExecSpec, cmd *exec.Cmd, waitErr error, res resourcesOutcome) error {
	var exitErr *exec.ExitError
	switch {
	case waitErr == nil:
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("exec: %w", ctx.Err())
	case errors.Is(runCtx.Err(), context.DeadlineExceeded):
		return &contracts.ClassedError{
			Class: contracts.ClassTimeout,
			Err:   fmt.Errorf("exec: timed out after %s", spec.Timeout),
		}
	case res.overError() != nil:
		return res.overError()
	case errors.As(waitErr, &exitErr):
		return exitErr // "exit status N" or "signal: …"
	case errors.Is(waitErr, exec.ErrWaitDelay) && cmd.ProcessState.Success():
		return nil // it succeeded; a leftover child held its output open
	default:
		return fmt.Errorf("exec: %w", waitErr)
	}
}

// environ is the base environment with the job's variables on top, in a
// stable order, and SLUICE_SCRATCH_DIR when the run has one; every path
// as the run sees it (box: nil for none). A run with a uid of its own has
// its scratch directory as HOME: the worker's is not its own.
func (e *Execer) environ(extra map[string]string, scratch string, inputs map[string]string, box *sandbox.Box) []string {
	env := make(map[string]string, len(e.base)+len(extra)+1+len(inputs))
	for k, v := range e.base {
		env[k] = v
	}
	for k, v := range inputs {
		env[k] = box.Path(v)
	}
	if scratch != "" {
		env[ScratchEnv] = box.Path(scratch)
		if box.UID() != 0 {
			env["HOME"] = box.Path(scratch)
		}
	}
	for k, v := range extra {
		env[k] = v
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k+"="+env[k])
	}
	return out
}

// renewPeriod is how often a run's lease is passed on to the warden.
const renewPeriod = time.Second

// renewLease passes the run's lease on to the warden at once and then
// every renewPeriod, until the returned function is called. Without a
// lease (left nil) the warden bounds nothing but the worker's life.
func renewLease(box *sandbox.Box, left func() (time.Duration, bool)) func() {
	if left == nil {
		return func() {}
	}
	renew := func() {
		if d, ok := left(); ok {
			box.Renew(d)
		}
	}
	renew()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(renewPeriod)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				renew()
			}
		}
	}()
	return func() {
		close(stop)
		<-done
	}
}

// signalGroup sends sig to every process in the group pgid. A group that
// is already gone is not an error.
func signalGroup(pgid int, sig syscall.Signal) error {
	if pgid <= 0 {
		return os.ErrProcessDone
	}
	err := syscall.Kill(-pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// OutputLimit bounds the captured stdout and stderr of an exec job: only
// the last OutputLimit bytes of each are kept.
const OutputLimit = 64 << 10

// tail is an io.Writer keeping only the last limit bytes written to it,
// calling onLine (when set) for every write that ends a line.
type tail struct {
	mu     sync.Mutex
	limit  int
	buf    []byte
	onLine func()
}

func newTail(limit int, onLine func()) *tail { return &tail{limit: limit, onLine: onLine} }

// Write keeps the end of p and of what came before, up to the limit. It
// never fails, so a chatty program is never blocked on its output.
func (t *tail) Write(p []byte) (int, error) {
	if t.onLine != nil && bytes.IndexByte(p, '\n') >= 0 {
		t.onLine()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if n >= t.limit {
		t.buf = append(t.buf[:0], p[n-t.limit:]...)
		return n, nil
	}
	if over := len(t.buf) + n - t.limit; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// String returns the kept bytes.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
