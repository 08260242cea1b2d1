package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/pkg/confine"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/internal/limit"
)

// Dirs are a run's own directories, made by the worker: they become the
// run's (owned by its uid) and, in a namespace, are bound at fixed paths.
type Dirs struct {
	// Scratch is the run's scratch directory ("" = none).
	Scratch string
	// Inputs holds the run's copies of its pinned inputs ("" = none):
	// the run's own, read-only until it changes their modes.
	Inputs string
}

// Box is one run's walls: its identity, its paths and its watch. Open it
// before the run's program starts, Close it once the program's whole
// tree is gone.
type Box struct {
	sb    *Sandbox
	name  string
	uid   uint32 // 0: the worker's
	lock  *os.File
	binds []bind
	// watch is what the warden knows of the run (under sb.mu).
	watch wardenMsg
	// watched: the warden was told of the run (under sb.mu).
	watched bool
}

// Open gives the run name (unique among the worker's live runs) its
// walls: a uid of its own when the sandbox has them, which then owns
// dirs. The run's programs start through Launch.
func (s *Sandbox) Open(name string, dirs Dirs) (*Box, error) {
	b := &Box{sb: s, name: name}
	if s.pool != nil {
		uid, lock, err := s.pool.acquire()
		if err != nil {
			return nil, err
		}
		b.uid, b.lock = uid, lock
		if err := dirs.own(uid); err != nil {
			b.free()
			return nil, err
		}
	}
	if s.iso == contracts.IsolationNamespace {
		if dirs.Scratch != "" {
			b.binds = append(b.binds, bind{From: dirs.Scratch, To: runScratch})
		}
		if dirs.Inputs != "" {
			b.binds = append(b.binds, bind{From: dirs.Inputs, To: runInputs})
		}
		b.binds = append(b.binds, s.shared...)
	}
	b.watch = wardenMsg{Op: opWatch, Run: name, UID: b.uid}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		b.free()
		return nil, errClosed
	}
	if _, ok := s.boxes[name]; ok {
		b.free()
		return nil, fmt.Errorf("sandbox: run %s is already open", name)
	}
	s.boxes[name] = b
	return b, nil
}

// own gives the directories to uid: the scratch directory (0700) and the
// inputs directory (0500) with the copies in it, which stay read-only
// until the run chmods one (what it then writes reaches no other run).
func (d Dirs) own(uid uint32) error {
	give := func(path string, mode os.FileMode) error {
		if err := os.Lchown(path, int(uid), int(uid)); err != nil {
			return fmt.Errorf("sandbox: give %s to the run: %w", path, err)
		}
		if mode != 0 {
			if err := os.Chmod(path, mode); err != nil {
				return fmt.Errorf("sandbox: give %s to the run: %w", path, err)
			}
		}
		return nil
	}
	if d.Scratch != "" {
		if err := give(d.Scratch, 0o700); err != nil {
			return err
		}
	}
	if d.Inputs == "" {
		return nil
	}
	if err := give(d.Inputs, 0o500); err != nil {
		return err
	}
	copies, err := os.ReadDir(d.Inputs)
	if err != nil {
		return fmt.Errorf("sandbox: give the input copies to the run: %w", err)
	}
	for _, c := range copies {
		if err := give(filepath.Join(d.Inputs, c.Name()), 0); err != nil {
			return err
		}
	}
	return nil
}

// UID is the run's own uid (0: it has the worker's, or b is nil).
func (b *Box) UID() uint32 {
	if b == nil {
		return 0
	}
	return b.uid
}

// Path is where the run sees a path of the worker's: a bound directory's
// contents at their bind, anything else where it is (everything, for a
// nil box).
func (b *Box) Path(real string) string {
	if b == nil {
		return real
	}
	for _, m := range b.binds {
		if confine.Within(real, m.From) {
			rel, err := filepath.Rel(m.From, real)
			if err == nil {
				return filepath.Join(m.To, rel)
			}
		}
	}
	return real
}

// Launch prepares cmd (made with exec.Command, not started) to start its
// program through the launcher, behind the box's walls. Start cmd with
// the run's limits (limit.Plan.SelfLimited), then call Begin; if it does
// not start, call Abort.
func (b *Box) Launch(cmd *exec.Cmd) (*Launch, error) {
	path := cmd.Path
	if !filepath.IsAbs(path) && cmd.Dir != "" {
		path = filepath.Join(cmd.Dir, path)
	}
	spec := enterSpec{
		Path: path, Argv: cmd.Args, Env: cmd.Env, UID: b.uid, GID: b.uid,
		Namespace: b.sb.iso == contracts.IsolationNamespace, Binds: b.binds, Parent: os.Getpid(),
	}
	if cmd.Dir != "" {
		spec.Dir = b.Path(cmd.Dir)
	}
	cmd.Path, cmd.Args, cmd.Env, cmd.Dir = selfExe, []string{enterArg0}, helperEnv(), ""
	l, err := newLaunch(cmd, spec, spec.Namespace)
	if err != nil {
		return nil, err
	}
	l.box = b
	return l, nil
}

// Launch is a run's program on its way through the launcher.
type Launch struct {
	box  *Box
	cmd  *exec.Cmd
	spec enterSpec
	// The worker's ends of the spec and status pipes, and the launcher's
	// (closed once it started).
	specW, statusR, specR, statusW *os.File
}

// launchWait bounds the wait for the launcher to exec the program.
const launchWait = 30 * time.Second

// newLaunch gives cmd (the launcher) its spec and status pipes, and the
// namespaces when ns.
func newLaunch(cmd *exec.Cmd, spec enterSpec, ns bool) (*Launch, error) {
	specR, specW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("sandbox: pipe: %w", err)
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		_, _ = specR.Close(), specW.Close()
		return nil, fmt.Errorf("sandbox: pipe: %w", err)
	}
	cmd.ExtraFiles = []*os.File{specR, statusW}
	if ns {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.Unshareflags |= syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC
	}
	return &Launch{cmd: cmd, spec: spec, specW: specW, statusR: statusR, specR: specR, statusW: statusW}, nil
}

// Abort releases what Launch made when cmd did not start.
func (l *Launch) Abort() {
	for _, f := range []*os.File{l.specW, l.statusR, l.specR, l.statusW} {
		_ = f.Close()
	}
}

// Begin lets the started launcher go on: the warden learns of the run
// (its cgroups from target, its process group, its uid) before the
// program runs, then the launcher gets its spec with rlimits (and
// RLIMIT_NPROC of the run's uid when pidsHeld is false), and Begin waits
// until it exec'd the program. An error means the program did not start
// (the launcher exits; wait for cmd as always).
func (l *Launch) Begin(target limit.Target, rlimits []limit.Rlimit, pidsHeld bool) error {
	if l.box != nil {
		pgid := l.cmd.Process.Pid
		l.box.sb.watch(l.box, func(m *wardenMsg) { m.Target, m.PGID = target, pgid })
		if l.box.uid != 0 && !pidsHeld && l.box.sb.pids > 0 {
			n := uint64(l.box.sb.pids)
			rlimits = append(rlimits, limit.Rlimit{Resource: unix.RLIMIT_NPROC, Cur: n, Max: n})
		}
	}
	l.spec.Rlimits = rlimits
	return l.begin()
}

// begin writes the spec and reads the launcher's status.
func (l *Launch) begin() error {
	_, _ = l.specR.Close(), l.statusW.Close()
	data, err := json.Marshal(l.spec)
	if err == nil {
		_, err = l.specW.Write(data)
	}
	_ = l.specW.Close()
	defer l.statusR.Close()
	if err != nil {
		return fmt.Errorf("sandbox: hand the launcher its spec: %w", err)
	}
	_ = l.statusR.SetReadDeadline(time.Now().Add(launchWait))
	msg, err := io.ReadAll(io.LimitReader(l.statusR, 4096))
	switch {
	case len(msg) > 0:
		return &LaunchError{Reason: string(msg)}
	case errors.Is(err, os.ErrDeadlineExceeded):
		_ = l.cmd.Process.Kill()
		return fmt.Errorf("sandbox: the launcher did not start the program within %s", launchWait)
	case err != nil:
		return fmt.Errorf("sandbox: launcher status: %w", err)
	}
	return nil
}

// LaunchError is why the launcher could not start a run's program (its
// directory, its identity, the exec).
type LaunchError struct{ Reason string }

// Error implements error.
func (e *LaunchError) Error() string { return e.Reason }

// Renew tells the warden the run's lease now lasts left more (left ≤ 0:
// it has passed; the warden kills the run).
func (b *Box) Renew(left time.Duration) {
	until := bootNow() + int64(left)
	b.sb.watch(b, func(m *wardenMsg) { m.Until = until })
}

// Close makes sure nothing of the run is left, tells the warden it ended
// and frees its uid. A run held in cgroups is gone once they were killed
// (its uid may not leave them); one without is swept by its uid: every
// process of that uid is killed.
func (b *Box) Close() {
	s := b.sb
	s.mu.Lock()
	target := b.watch.Target
	s.mu.Unlock()
	sweep(b.uid, target)
	s.mu.Lock()
	delete(s.boxes, b.name)
	if b.watched && s.w != nil && s.w.alive() {
		_ = s.w.send(wardenMsg{Op: opDone, Run: b.name}, nil)
	}
	s.mu.Unlock()
	b.free()
}

// free releases the box's uid lock.
func (b *Box) free() {
	if b.lock != nil {
		_ = b.lock.Close()
		b.lock = nil
	}
}

// watch changes what the warden knows of b with change and tells it,
// starting the warden (again, after it died: every open box is told
// again) when needed. The warden's trouble is no run's: the worker still
// stops its runs itself, so errors are dropped here.
func (s *Sandbox) watch(b *Box, change func(*wardenMsg)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	change(&b.watch)
	b.watch.Op = opWatch
	if s.closed {
		return
	}
	if s.w == nil || !s.w.alive() {
		if s.w != nil {
			_ = s.w.close()
		}
		w, err := startWarden(s.onExpired)
		if err != nil {
			s.w = nil
			return
		}
		s.w = w
		// A new warden learns of every open run again, each with its
		// uid's lock.
		for _, o := range s.boxes {
			if o.watched {
				o.watched = w.send(o.watch, o.lock) == nil
				if o == b {
					return
				}
			}
		}
	}
	if !b.watched {
		b.watched = s.w.send(b.watch, b.lock) == nil
		return
	}
	_ = s.w.send(b.watch, nil)
}
