//go:build linux

package limit

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// cpuPeriod is the CFS period of a run's cgroup, in microseconds.
const cpuPeriod = 100_000

// Options say how to build an Enforcer.
type Options struct {
	// Name is the cgroup, one per worker, under which the runs' cgroups
	// are made (a directory name: the worker id is a good one).
	Name string
	// Want caps the mechanism: "" (or cgroup-v2) takes the strongest the
	// host allows, cgroup-v1 skips v2, rlimit skips cgroups, none
	// enforces nothing.
	Want contracts.LimitMechanism
	// Pids bounds the processes and threads of one run (0: no bound):
	// pids.max of its cgroup where the pids controller is there. Without
	// it the caller bounds them (RLIMIT_NPROC of a run's own uid).
	Pids int64
}

// Enforcer starts exec jobs' processes inside limits. Build it with New;
// it is safe for concurrent use.
type Enforcer struct {
	mech contracts.LimitMechanism
	// why says why no stronger mechanism applies ("" with cgroups).
	why string
	// v2 is the parent of the runs' cgroups under cgroup v2.
	v2 string
	// v1 are the parents of the runs' cgroups by v1 controller, v1self
	// the worker's own cgroups there (where a starting thread returns).
	v1, v1self map[string]string
	// pids is Options.Pids; pidsHeld says the runs' cgroups bound it.
	pids     int64
	pidsHeld bool
}

// New detects the strongest mechanism allowed (see Options.Want) and
// makes the worker's parent cgroup for it. It never fails: a host that
// allows no cgroup gets rlimit, and Reason says why.
func New(o Options) *Enforcer {
	return newEnforcer(realHost, o)
}

func newEnforcer(h hostFS, o Options) *Enforcer {
	if o.Want == contracts.LimitNone {
		return &Enforcer{mech: contracts.LimitNone, why: "enforcement turned off", pids: o.Pids}
	}
	name := parentName(o.Name)
	var whys []string
	if o.Want == contracts.LimitRlimit {
		return &Enforcer{mech: contracts.LimitRlimit, why: "cgroups not wanted", pids: o.Pids}
	}
	m, err := h.readMounts()
	if err != nil {
		return &Enforcer{mech: contracts.LimitRlimit, why: err.Error(), pids: o.Pids}
	}
	self, err := h.readSelf(m)
	if err != nil {
		return &Enforcer{mech: contracts.LimitRlimit, why: err.Error(), pids: o.Pids}
	}
	if o.Want == "" || o.Want == contracts.LimitCgroupV2 {
		dir, pids, err := setupV2(self.v2, o.Name, name)
		if err == nil {
			return &Enforcer{mech: contracts.LimitCgroupV2, v2: dir, pids: o.Pids, pidsHeld: pids}
		}
		whys = append(whys, "cgroup v2: "+err.Error())
	}
	parents, err := setupV1(self.v1, o.Name, name)
	if err == nil {
		_, pids := parents["pids"]
		return &Enforcer{mech: contracts.LimitCgroupV1, v1: parents, v1self: self.v1, pids: o.Pids, pidsHeld: pids}
	}
	whys = append(whys, "cgroup v1: "+err.Error())
	return &Enforcer{mech: contracts.LimitRlimit, why: strings.Join(whys, "; "), pids: o.Pids}
}

// parentName names the parent cgroup of one Enforcer's runs:
// sluice-<worker id>.<pid>.<random>, unique even among workers of one id
// (one process may run several), and telling whose process made it.
func parentName(worker string) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("sluice-%s.%d.%s", worker, os.Getpid(), hex.EncodeToString(b[:]))
}

// sweep removes the parent cgroups under dir left by dead processes of a
// worker of this id (killed before they could remove them): those whose
// process is gone, with their runs' cgroups, when nothing runs in them.
func sweep(dir, worker string) {
	prefix := "sluice-" + worker + "." // a worker id has no '.'
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.IsDir() {
			continue
		}
		pid, _, ok := strings.Cut(rest, ".")
		if !ok || pid == "" || exists(filepath.Join("/proc", pid)) {
			continue
		}
		old := filepath.Join(dir, e.Name())
		runs, _ := os.ReadDir(old)
		for _, r := range runs {
			if r.IsDir() {
				_ = unix.Rmdir(filepath.Join(old, r.Name()))
			}
		}
		_ = unix.Rmdir(old)
	}
}

// setupV2 makes the worker's parent cgroup under its own v2 cgroup, with
// the memory and cpu controllers given to the runs' cgroups below it, and
// the pids controller when the host has it (pids reports whether it does).
func setupV2(self, worker, name string) (dir string, pids bool, err error) {
	if self == "" {
		return "", false, fmt.Errorf("%w: not mounted", errNoCgroup)
	}
	ctrl, err := os.ReadFile(filepath.Join(self, "cgroup.controllers"))
	if err != nil {
		return "", false, fmt.Errorf("%w: %w", errNoCgroup, err)
	}
	have := strings.Fields(string(ctrl))
	if !slices.Contains(have, "memory") || !slices.Contains(have, "cpu") {
		return "", false, fmt.Errorf("%w: the worker's cgroup %s has no memory and cpu controllers (has %q)", errNoCgroup, self, have)
	}
	if err := enableV2(self); err != nil {
		return "", false, err
	}
	sweep(self, worker)
	dir = filepath.Join(self, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", false, fmt.Errorf("%w: %w", errNoCgroup, err)
	}
	if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+memory +cpu"); err != nil {
		_ = os.Remove(dir)
		return "", false, fmt.Errorf("%w: %w", errNoCgroup, err)
	}
	if slices.Contains(have, "pids") {
		pids = writeFile(filepath.Join(self, "cgroup.subtree_control"), "+pids") == nil &&
			writeFile(filepath.Join(dir, "cgroup.subtree_control"), "+pids") == nil
	}
	return dir, pids, nil
}

// enableV2 gives the memory and cpu controllers to self's children. A v2
// cgroup that holds processes cannot (no internal processes): the worker
// then moves itself into a leaf of its own first.
func enableV2(self string) error {
	control := filepath.Join(self, "cgroup.subtree_control")
	cur, _ := os.ReadFile(control)
	if f := strings.Fields(string(cur)); slices.Contains(f, "memory") && slices.Contains(f, "cpu") {
		return nil
	}
	err := writeFile(control, "+memory +cpu")
	if err == nil || !errors.Is(err, syscall.EBUSY) {
		if err != nil {
			return fmt.Errorf("%w: %w", errNoCgroup, err)
		}
		return nil
	}
	leaf := filepath.Join(self, "sluice-worker")
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%w: %w", errNoCgroup, err)
	}
	if err := writeFile(filepath.Join(leaf, "cgroup.procs"), strconv.Itoa(os.Getpid())); err != nil {
		return fmt.Errorf("%w: %w", errNoCgroup, err)
	}
	if err := writeFile(control, "+memory +cpu"); err != nil {
		// Other processes share the cgroup: go back where we were.
		_ = writeFile(filepath.Join(self, "cgroup.procs"), strconv.Itoa(os.Getpid()))
		_ = os.Remove(leaf)
		return fmt.Errorf("%w: %w", errNoCgroup, err)
	}
	return nil
}

// setupV1 makes the worker's parent cgroups in the v1 memory and cpu
// hierarchies, and in cpuacct (CPU seconds), freezer (a kill no fork can
// escape) and pids (a bound on forks) when each is mounted on a hierarchy
// of its own.
func setupV1(self map[string]string, worker, name string) (map[string]string, error) {
	if self["memory"] == "" || self["cpu"] == "" {
		return nil, fmt.Errorf("%w: the memory and cpu controllers are not both mounted", errNoCgroup)
	}
	parents := map[string]string{}
	used := map[string]bool{}
	for _, c := range []string{"memory", "cpu", "cpuacct", "freezer", "pids"} {
		optional := c != "memory" && c != "cpu"
		if self[c] == "" || used[self[c]] {
			continue // not mounted, or mounted together with another one
		}
		sweep(self[c], worker)
		dir := filepath.Join(self[c], name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			if optional {
				continue
			}
			for _, d := range parents {
				_ = os.Remove(d)
			}
			return nil, fmt.Errorf("%w: %w", errNoCgroup, err)
		}
		used[self[c]] = true
		parents[c] = dir
	}
	return parents, nil
}

// Mechanism is how runs are held to their declarations.
func (l *Enforcer) Mechanism() contracts.LimitMechanism { return l.mech }

// Reason says why no stronger mechanism applies ("" with cgroups).
func (l *Enforcer) Reason() string { return l.why }

// closeWait bounds Close's wait for the cgroups of runs whose last
// process is still dying (a killed process leaves its cgroup once its
// parent reaps it, which may be an init process slow to do so).
const closeWait = 10 * time.Second

// Close removes the worker's parent cgroups (once every run finished),
// with the runs' cgroups that could not be removed yet.
func (l *Enforcer) Close() error {
	var errs []error
	parents := []string{l.v2}
	for _, d := range l.v1 {
		parents = append(parents, d)
	}
	for _, p := range parents {
		if p == "" {
			continue
		}
		runs, _ := os.ReadDir(p)
		for _, r := range runs {
			if r.IsDir() {
				errs = append(errs, removeCgroupWithin(filepath.Join(p, r.Name()), closeWait))
			}
		}
		errs = append(errs, removeCgroupWithin(p, closeWait))
	}
	return errors.Join(errs...)
}

// Run is one started process tree inside its limits.
type Run struct {
	l       *Enforcer
	mech    contracts.LimitMechanism
	cmd     *exec.Cmd
	limits  contracts.Resources
	cpuSecs uint64 // RLIMIT_CPU, 0 = none
	// selfLimited: the command sets its own rlimits (Rlimits) before it
	// runs the program.
	selfLimited bool
	// dirs are the run's cgroups (v2: one; v1: by controller).
	dirs map[string]string
	// parked is closed by Finish to end a starting thread that could not
	// leave the run's cgroups (see startV1).
	parked chan struct{}
}

// Plan is what Start needs of a run besides its command.
type Plan struct {
	// Name names the run's cgroup (unique among the worker's running runs).
	Name string
	// Resources are the run's limits; an amount of 0 is not limited.
	Resources contracts.Resources
	// MaxRuntime (0 = none) sizes RLIMIT_CPU.
	MaxRuntime time.Duration
	// SelfLimited says the command applies Run.Rlimits to itself before
	// it runs the program (a launcher that execs it): under rlimit, Start
	// then neither wraps it in a shell nor sets them afterwards.
	SelfLimited bool
}

// Start starts cmd (not started yet) inside limits sized from r: name
// names the run's cgroup (unique among the worker's running runs);
// maxRuntime (0 = none) sizes RLIMIT_CPU. An amount of 0 in r is not
// limited. On error nothing is left behind and cmd did not start.
func (l *Enforcer) Start(cmd *exec.Cmd, name string, r contracts.Resources, maxRuntime time.Duration) (*Run, error) {
	return l.StartPlan(cmd, Plan{Name: name, Resources: r, MaxRuntime: maxRuntime})
}

// StartPlan is Start with the whole plan of the run.
func (l *Enforcer) StartPlan(cmd *exec.Cmd, p Plan) (*Run, error) {
	r := p.Resources
	run := &Run{l: l, mech: l.mech, cmd: cmd, limits: r, parked: make(chan struct{}), selfLimited: p.SelfLimited}
	if l.mech == contracts.LimitRlimit && r.CPU > 0 && p.MaxRuntime > 0 {
		run.cpuSecs = uint64(max(1, r.CPU*p.MaxRuntime.Seconds()+0.999))
	}
	switch l.mech {
	case contracts.LimitCgroupV2:
		return run, run.startV2(p.Name)
	case contracts.LimitCgroupV1:
		return run, run.startV1(p.Name)
	case contracts.LimitRlimit:
		if p.SelfLimited {
			return run, cmd.Start()
		}
		if sh, err := exec.LookPath("/bin/sh"); err == nil {
			run.wrapInLimits(sh)
			return run, cmd.Start()
		}
		if err := cmd.Start(); err != nil {
			return run, err
		}
		if err := run.setRlimits(); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return run, err
		}
		return run, nil
	default:
		return run, cmd.Start()
	}
}

// Rlimit is one resource limit a self-limited command sets on itself
// (setrlimit) before it runs the program.
type Rlimit struct {
	Resource int    `json:"resource"`
	Cur      uint64 `json:"cur"`
	Max      uint64 `json:"max"`
}

// Rlimits are the limits the run's program must start under when the
// mechanism is rlimit (address space, CPU time), else none.
func (r *Run) Rlimits() []Rlimit {
	if r.mech != contracts.LimitRlimit {
		return nil
	}
	var out []Rlimit
	if r.limits.Memory > 0 {
		out = append(out, Rlimit{Resource: unix.RLIMIT_AS, Cur: uint64(r.limits.Memory), Max: uint64(r.limits.Memory)})
	}
	if r.cpuSecs > 0 {
		out = append(out, Rlimit{Resource: unix.RLIMIT_CPU, Cur: r.cpuSecs, Max: r.cpuSecs + 1})
	}
	return out
}

// PidsHeld reports whether the run's cgroup bounds its processes
// (Options.Pids with the pids controller); when not, a caller that wants
// the bound sets it another way.
func (r *Run) PidsHeld() bool { return r.l.pidsHeld && r.l.pids > 0 }

// wrapInLimits makes the run's command a shell (sh) that sets the run's
// address-space and CPU-time limits on itself and then execs the program,
// which so runs under them from its first instruction (the process, its
// group and its pid stay the same). A limit the shell cannot set fails the
// run before the program starts (exit 126).
func (r *Run) wrapInLimits(sh string) {
	script := ""
	if r.limits.Memory > 0 {
		script += fmt.Sprintf("ulimit -v %d || exit 126; ", (r.limits.Memory+1023)/1024)
	}
	if r.cpuSecs > 0 {
		script += fmt.Sprintf("ulimit -H -t %d && ulimit -S -t %d || exit 126; ", r.cpuSecs+1, r.cpuSecs)
	}
	args := append([]string{"sh", "-c", script + `exec "$@"`, "sh", r.cmd.Path}, r.cmd.Args[1:]...)
	r.cmd.Path, r.cmd.Args = sh, args
}

// setRlimits applies the run's address-space and CPU-time limits to its
// process (prlimit) where no shell can set them before the program runs
// (wrapInLimits): the program started a moment before, too early to have
// done much, though a program that allocates at once may be past them.
func (r *Run) setRlimits() error {
	pid := r.cmd.Process.Pid
	if r.limits.Memory > 0 {
		lim := unix.Rlimit{Cur: uint64(r.limits.Memory), Max: uint64(r.limits.Memory)}
		if err := unix.Prlimit(pid, unix.RLIMIT_AS, &lim, nil); err != nil {
			return fmt.Errorf("limit: RLIMIT_AS: %w", err)
		}
	}
	if r.cpuSecs > 0 {
		lim := unix.Rlimit{Cur: r.cpuSecs, Max: r.cpuSecs + 1}
		if err := unix.Prlimit(pid, unix.RLIMIT_CPU, &lim, nil); err != nil {
			return fmt.Errorf("limit: RLIMIT_CPU: %w", err)
		}
	}
	return nil
}

// startV2 makes the run's cgroup and starts the process in it (clone
// into the cgroup).
func (r *Run) startV2(name string) error {
	dir := filepath.Join(r.l.v2, name)
	if err := makeCgroup(dir); err != nil {
		return err
	}
	r.dirs = map[string]string{"": dir}
	fail := func(err error) error {
		_ = removeCgroup(dir)
		return err
	}
	if r.limits.Memory > 0 {
		if err := writeFile(filepath.Join(dir, "memory.max"), strconv.FormatInt(r.limits.Memory, 10)); err != nil {
			return fail(fmt.Errorf("limit: %w", err))
		}
		_ = writeFile(filepath.Join(dir, "memory.swap.max"), "0") // absent without swap accounting
	}
	if r.limits.CPU > 0 {
		quota := max(1000, int64(r.limits.CPU*cpuPeriod))
		if err := writeFile(filepath.Join(dir, "cpu.max"), fmt.Sprintf("%d %d", quota, cpuPeriod)); err != nil {
			return fail(fmt.Errorf("limit: %w", err))
		}
	}
	if r.l.pidsHeld && r.l.pids > 0 {
		if err := writeFile(filepath.Join(dir, "pids.max"), strconv.FormatInt(r.l.pids, 10)); err != nil {
			return fail(fmt.Errorf("limit: %w", err))
		}
	}
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("limit: open cgroup: %w", err))
	}
	defer unix.Close(fd)
	if r.cmd.SysProcAttr == nil {
		r.cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	r.cmd.SysProcAttr.UseCgroupFD = true
	r.cmd.SysProcAttr.CgroupFD = fd
	if err := r.cmd.Start(); err != nil {
		return fail(err)
	}
	return nil
}

// startV1 makes the run's cgroups in the v1 hierarchies and starts the
// process in them: the goroutine locks its thread, moves the thread into
// the run's cgroups, forks (the child is born inside them), and moves
// the thread back. A thread that cannot move back stays parked, locked,
// until Finish, so no other goroutine runs in the run's cgroups. When the
// thread cannot move in, the process is moved right after it started.
func (r *Run) startV1(name string) error {
	r.dirs = map[string]string{}
	for c, parent := range r.l.v1 {
		dir := filepath.Join(parent, name)
		if err := makeCgroup(dir); err != nil {
			r.removeDirs()
			return err
		}
		r.dirs[c] = dir
	}
	if dir := r.dirs["memory"]; r.limits.Memory > 0 {
		v := strconv.FormatInt(r.limits.Memory, 10)
		if err := writeFile(filepath.Join(dir, "memory.limit_in_bytes"), v); err != nil {
			r.removeDirs()
			return fmt.Errorf("limit: %w", err)
		}
		_ = writeFile(filepath.Join(dir, "memory.memsw.limit_in_bytes"), v) // absent without swap accounting
	}
	if dir := r.dirs["cpu"]; r.limits.CPU > 0 {
		quota := max(1000, int64(r.limits.CPU*cpuPeriod))
		if err := writeFile(filepath.Join(dir, "cpu.cfs_period_us"), strconv.Itoa(cpuPeriod)); err != nil {
			r.removeDirs()
			return fmt.Errorf("limit: %w", err)
		}
		if err := writeFile(filepath.Join(dir, "cpu.cfs_quota_us"), strconv.FormatInt(quota, 10)); err != nil {
			r.removeDirs()
			return fmt.Errorf("limit: %w", err)
		}
	}
	if dir := r.dirs["pids"]; dir != "" && r.l.pids > 0 {
		if err := writeFile(filepath.Join(dir, "pids.max"), strconv.FormatInt(r.l.pids, 10)); err != nil {
			r.removeDirs()
			return fmt.Errorf("limit: %w", err)
		}
	}
	type started struct {
		err   error
		moved bool
	}
	home := map[string]string{}
	for c := range r.dirs {
		home[c] = r.l.v1self[c]
	}
	done := make(chan started, 1)
	go func() {
		runtime.LockOSThread()
		tid := strconv.Itoa(unix.Gettid())
		var s started
		if s.moved = moveThread(tid, r.dirs); s.moved {
			s.err = r.cmd.Start()
		}
		if !moveThread(tid, home) { // also after a move that failed half-way
			done <- s
			<-r.parked // the thread dies with this goroutine, still locked
			return
		}
		runtime.UnlockOSThread()
		done <- s
	}()
	s := <-done
	if s.err != nil {
		close(r.parked)
		r.removeDirs()
		return s.err
	}
	if !s.moved {
		if err := r.cmd.Start(); err != nil {
			close(r.parked)
			r.removeDirs()
			return err
		}
		pid := strconv.Itoa(r.cmd.Process.Pid)
		for _, dir := range r.dirs {
			if err := writeFile(filepath.Join(dir, "cgroup.procs"), pid); err != nil {
				_ = r.cmd.Process.Kill()
				_ = r.cmd.Wait()
				close(r.parked)
				r.removeDirs()
				return fmt.Errorf("limit: %w", err)
			}
		}
	}
	return nil
}

// moveThread writes tid into the tasks file of every dir; false when
// one write fails.
func moveThread(tid string, dirs map[string]string) bool {
	ok := true
	for _, dir := range dirs {
		if writeFile(filepath.Join(dir, "tasks"), tid) != nil {
			ok = false
		}
	}
	return ok
}

// Kill kills every process of the run: the whole cgroup (v2 cgroup.kill,
// else every process it lists until none is left), or the process group.
func (r *Run) Kill() {
	if r.Target().Kill() {
		return
	}
	if r.cmd.Process != nil {
		_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// Target is what another process (of the same privileges) needs to kill
// a run's whole tree: its mechanism and its cgroups.
type Target struct {
	Mech contracts.LimitMechanism `json:"mech"`
	// Dirs are the run's cgroups: v2 under "", v1 by controller.
	Dirs map[string]string `json:"dirs,omitempty"`
}

// Target returns the run's Target.
func (r *Run) Target() Target { return Target{Mech: r.mech, Dirs: r.dirs} }

// Kill kills every process in the target's cgroups but the calling
// process and spare (a worker whose starting thread may be inside), and
// reports whether the target has cgroups to do it with.
func (t Target) Kill(spare ...int) bool {
	switch t.Mech {
	case contracts.LimitCgroupV2:
		dir := t.Dirs[""]
		if dir == "" {
			return false
		}
		if len(spare) == 0 && writeFile(filepath.Join(dir, "cgroup.kill"), "1") == nil {
			return true
		}
		killListed(dir, spare)
		return true
	case contracts.LimitCgroupV1:
		if len(t.Dirs) == 0 {
			return false
		}
		if dir := t.Dirs["freezer"]; dir != "" {
			freezeKill(dir, spare)
		}
		for _, c := range []string{"memory", "cpu", "pids"} {
			if dir := t.Dirs[c]; dir != "" {
				killListed(dir, spare)
			}
		}
		return true
	}
	return false
}

// spared reports whether pid is the calling process or one of spare.
func spared(pid int, spare []int) bool {
	return pid == os.Getpid() || slices.Contains(spare, pid)
}

// freezeKill freezes a v1 freezer cgroup, signals every process in it
// (frozen, none can fork or exit, so no pid is reused meanwhile) and
// thaws it, when they die. It does nothing while a spared process (a
// starting thread of the worker) is inside: killListed does the work then.
func freezeKill(dir string, spare []int) {
	procs := filepath.Join(dir, "cgroup.procs")
	data, err := os.ReadFile(procs)
	if err != nil || len(data) == 0 {
		return
	}
	for _, p := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(p); err == nil && spared(pid, spare) {
			return
		}
	}
	state := filepath.Join(dir, "freezer.state")
	if writeFile(state, "FROZEN") != nil {
		return
	}
	defer func() { _ = writeFile(state, "THAWED") }()
	wait := 50 * time.Microsecond
	for deadline := time.Now().Add(time.Second); ; wait = min(2*wait, 10*time.Millisecond) {
		cur, err := os.ReadFile(state)
		if err != nil || strings.TrimSpace(string(cur)) == "FROZEN" {
			break
		}
		if time.Now().After(deadline) {
			return // not frozen in time: killListed does the work
		}
		time.Sleep(wait)
	}
	if data, err = os.ReadFile(procs); err != nil {
		return
	}
	for _, p := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(p); err == nil && pid > 0 && !spared(pid, spare) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// killListed signals every process dir's cgroup.procs lists but the
// spared ones, again until the list stays empty (a process may fork
// meanwhile), for at most a while.
func killListed(dir string, spare []int) {
	wait := 50 * time.Microsecond
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); wait = min(2*wait, 10*time.Millisecond) {
		data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return
		}
		left := 0
		for _, p := range strings.Fields(string(data)) {
			// The worker's own pid is listed while one of its threads
			// is inside (a starting thread, see startV1): never that.
			if pid, err := strconv.Atoi(p); err == nil && pid > 0 && !spared(pid, spare) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				left++
			}
		}
		if left == 0 {
			return
		}
		time.Sleep(wait)
	}
}

// Outcome is how a finished run stood against its limits.
type Outcome struct {
	Usage contracts.Usage
	// OverMemory: the kernel killed a process of the run for going past
	// its memory (a cgroup's OOM kill).
	OverMemory bool
	// OverCPU: the run used up its CPU time (RLIMIT_CPU).
	OverCPU bool
}

// Finish is called once cmd.Wait returned: it kills what is left of the
// run's tree, reads what the run used and removes its cgroups.
func (r *Run) Finish() Outcome {
	close(r.parked)
	r.Kill()
	out := Outcome{Usage: contracts.Usage{Mechanism: r.mech}}
	ps := r.cmd.ProcessState
	if ps != nil {
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			out.Usage.PeakMemory = ru.Maxrss << 10
			out.Usage.CPUSeconds = seconds(ru.Utime) + seconds(ru.Stime)
		}
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGXCPU {
			out.OverCPU = r.cpuSecs > 0
		}
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL &&
			r.cpuSecs > 0 && out.Usage.CPUSeconds >= float64(r.cpuSecs) {
			out.OverCPU = true
		}
	}
	switch r.mech {
	case contracts.LimitCgroupV2:
		dir := r.dirs[""]
		if v, ok := readInt(filepath.Join(dir, "memory.peak")); ok {
			out.Usage.PeakMemory = max(out.Usage.PeakMemory, v)
		}
		if v, ok := readKeyed(filepath.Join(dir, "cpu.stat"), "usage_usec"); ok {
			out.Usage.CPUSeconds = max(out.Usage.CPUSeconds, float64(v)/1e6)
		}
		if v, ok := readKeyed(filepath.Join(dir, "memory.events"), "oom_kill"); ok && v > 0 {
			out.OverMemory = true
		}
	case contracts.LimitCgroupV1:
		if dir := r.dirs["memory"]; dir != "" {
			if v, ok := readInt(filepath.Join(dir, "memory.max_usage_in_bytes")); ok {
				out.Usage.PeakMemory = max(out.Usage.PeakMemory, v)
			}
			if v, ok := readKeyed(filepath.Join(dir, "memory.oom_control"), "oom_kill"); ok && v > 0 {
				out.OverMemory = true
			}
		}
		acct := r.dirs["cpuacct"]
		if acct == "" {
			acct = r.dirs["cpu"]
		}
		if v, ok := readInt(filepath.Join(acct, "cpuacct.usage")); ok {
			out.Usage.CPUSeconds = max(out.Usage.CPUSeconds, float64(v)/1e9)
		}
	}
	r.removeDirs()
	return out
}

func seconds(tv syscall.Timeval) float64 { return float64(tv.Sec) + float64(tv.Usec)/1e6 }

// removeDirs removes the run's cgroups.
func (r *Run) removeDirs() {
	for _, dir := range r.dirs {
		_ = removeCgroup(dir)
	}
}

// makeCgroup makes a run's cgroup. One left by a worker of the same id
// that died (its processes died with it: Pdeathsig) is removed first.
func makeCgroup(dir string) error {
	err := os.Mkdir(dir, 0o755)
	if errors.Is(err, os.ErrExist) {
		killListed(dir, nil)
		if rerr := removeCgroup(dir); rerr != nil {
			return rerr
		}
		err = os.Mkdir(dir, 0o755)
	}
	if err != nil {
		return fmt.Errorf("limit: make cgroup: %w", err)
	}
	return nil
}

// removeCgroup removes a cgroup directory once its last process is gone
// (a killed process leaves it a moment after its death), trying for at
// most a second: what is left then is removed by Close.
func removeCgroup(dir string) error { return removeCgroupWithin(dir, time.Second) }

// removeCgroupWithin is removeCgroup trying for at most within.
func removeCgroupWithin(dir string, within time.Duration) error {
	var err error
	wait := 50 * time.Microsecond
	for deadline := time.Now().Add(within); ; wait = min(2*wait, 10*time.Millisecond) {
		err = unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			break
		}
		time.Sleep(wait)
	}
	return fmt.Errorf("limit: remove cgroup %s: %w", dir, err)
}
