package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/pkg/confine"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// Options say how to build a Sandbox.
type Options struct {
	// UIDs are the run uids (and gids), one per live run; zero: runs keep
	// the worker's uid.
	UIDs Range
	// LockDir holds the uids' locks ("" = DefaultLockDir); every worker
	// of a host that shares UIDs must share it.
	LockDir string
	// Pids bounds a run's processes through RLIMIT_NPROC of its own uid
	// when its cgroup does not (0: no bound).
	Pids int64
	// Reach are directories runs with their own uid must reach by their
	// real path when no mount namespace binds them (the scratch root):
	// each ancestor must let others through (o+x), or runs keep the
	// worker's uid.
	Reach []string
	// Want caps the isolation: "" takes the strongest the host allows,
	// IsolationUID skips the namespace, IsolationNone gives runs the
	// worker's uid.
	Want contracts.Isolation
	// Shared are directories the operator shares with runs
	// (SLUICE_WORKER_EXEC_DIRS): a run in a namespace of its own sees them
	// at their real paths even under a directory it gets a private copy
	// of (/tmp). What a run may do in them is up to their modes.
	Shared []string
	// OnExpired (nil: nobody) hears of each run the warden killed
	// because its lease passed.
	OnExpired func(run string)
}

// Sandbox gives exec runs their walls (see the package doc). Build it
// with New; it is safe for concurrent use. Close it once no run is left.
type Sandbox struct {
	iso  contracts.Isolation
	why  string
	pool *pool
	pids int64
	// shared are the binds of Options.Shared a namespace needs.
	shared []bind
	// onExpired is Options.OnExpired.
	onExpired func(run string)

	mu     sync.Mutex
	w      *warden
	boxes  map[string]*Box
	closed bool
}

// New finds the strongest isolation the host allows (Isolation, and
// Reason for what it lacks) by trying it: a launcher that sets up a
// namespace and takes a run uid, then exits. It never fails: a host that
// allows nothing gets IsolationNone.
func New(o Options) *Sandbox {
	s := &Sandbox{iso: contracts.IsolationNone, pids: o.Pids, onExpired: o.OnExpired, boxes: map[string]*Box{},
		shared: sharedBinds(o.Shared)}
	if o.UIDs.IsZero() {
		s.why = "SLUICE_WORKER_RUN_UIDS is empty: runs keep the worker's uid"
		return s
	}
	if o.Want == contracts.IsolationNone {
		s.why = "SLUICE_WORKER_ISOLATION is none: runs keep the worker's uid"
		return s
	}
	if missing := missingCaps(identityCaps); len(missing) > 0 {
		s.why = fmt.Sprintf("the worker (uid %d) may not give runs their own uid: it lacks %s", os.Geteuid(), strings.Join(missing, ", "))
		return s
	}
	dir := o.LockDir
	if dir == "" {
		dir = DefaultLockDir
	}
	p, err := openPool(o.UIDs, dir)
	if err != nil {
		s.why = err.Error()
		return s
	}
	var whyNot []string
	if o.Want == contracts.IsolationUID {
		whyNot = append(whyNot, "no mount namespace: SLUICE_WORKER_ISOLATION is uid")
	} else if missing := missingCaps(namespaceCaps); len(missing) > 0 {
		whyNot = append(whyNot, "no mount namespace: the worker lacks "+strings.Join(missing, ", "))
	} else if !kernelAtLeast(5, 8) {
		whyNot = append(whyNot, "no mount namespace: a private /proc needs Linux 5.8")
	} else if err := probe(p, true); err != nil {
		whyNot = append(whyNot, "no mount namespace: "+err.Error())
	} else {
		s.iso, s.pool = contracts.IsolationNamespace, p
		return s
	}
	if err := probe(p, false); err != nil {
		s.why = strings.Join(append(whyNot, "no run uid: "+err.Error()), "; ")
		return s
	}
	for _, d := range o.Reach {
		if err := reachable(d); err != nil {
			s.why = strings.Join(append(whyNot, "no run uid: "+err.Error()), "; ")
			return s
		}
	}
	s.iso, s.pool, s.why = contracts.IsolationUID, p, strings.Join(whyNot, "; ")
	return s
}

// Isolation is what New found.
func (s *Sandbox) Isolation() contracts.Isolation { return s.iso }

// Reason says what the host lacks for a stronger isolation ("" with the
// strongest).
func (s *Sandbox) Reason() string { return s.why }

// sharedBinds binds each shared directory under a private one at its own
// path (the others a run sees anyway).
func sharedBinds(dirs []string) []bind {
	var out []bind
	for _, d := range dirs {
		for _, p := range privateDirs {
			if confine.Within(d, p) {
				out = append(out, bind{From: d, To: d})
				break
			}
		}
	}
	return out
}

// probe starts a launcher in probe mode as a run would be (its own uid,
// and a namespace when ns), and reports why it failed.
func probe(p *pool, ns bool) error {
	uid, lock, err := p.acquire()
	if err != nil {
		return err
	}
	defer lock.Close()
	spec := enterSpec{UID: uid, GID: uid, Namespace: ns, Parent: os.Getpid(), Dir: "/"}
	cmd := exec.Command(selfExe)
	cmd.Args = []string{probeArg0}
	cmd.Env = helperEnv()
	l, err := newLaunch(cmd, spec, ns)
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		l.Abort()
		return fmt.Errorf("start: %w", err)
	}
	err = l.begin()
	if werr := cmd.Wait(); err == nil && werr != nil {
		err = werr
	}
	return err
}

// reachable says why a process of another uid could not reach dir by its
// path (an ancestor it may not pass through), or nil.
func reachable(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	for d := abs; ; d = filepath.Dir(d) {
		info, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("%s: %w", d, err)
		}
		if info.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s (mode %#o) does not let other uids through to %s", d, info.Mode().Perm(), abs)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// Capabilities a worker needs to give runs their own uid: switch to it,
// hand it its directories, signal its processes, clean up what it left.
var identityCaps = map[string]int{
	"CAP_SETUID": unix.CAP_SETUID, "CAP_SETGID": unix.CAP_SETGID, "CAP_CHOWN": unix.CAP_CHOWN,
	"CAP_KILL": unix.CAP_KILL, "CAP_DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE, "CAP_FOWNER": unix.CAP_FOWNER,
}

// Capabilities a worker needs for a run's mount namespace.
var namespaceCaps = map[string]int{"CAP_SYS_ADMIN": unix.CAP_SYS_ADMIN}

// missingCaps names the capabilities of want the process's effective set
// lacks, sorted.
func missingCaps(want map[string]int) []string {
	have := effectiveCaps()
	var out []string
	for name, c := range want {
		if have&(1<<uint(c)) == 0 {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// effectiveCaps reads CapEff of /proc/self/status (0 when unreadable).
func effectiveCaps() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "CapEff:"); ok {
			v, err := strconv.ParseUint(strings.TrimSpace(rest), 16, 64)
			if err == nil {
				return v
			}
		}
	}
	return 0
}

// kernelAtLeast reports whether the running kernel is at least
// major.minor.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	rel := unix.ByteSliceToString(u.Release[:])
	a, rest, _ := strings.Cut(rel, ".")
	b, _, _ := strings.Cut(rest, ".")
	ma, err1 := strconv.Atoi(a)
	mi, err2 := strconv.Atoi(strings.TrimFunc(b, func(r rune) bool { return r < '0' || r > '9' }))
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// Close stops the warden: it kills whatever runs it still watches (none,
// once every run ended) and exits.
func (s *Sandbox) Close() error {
	s.mu.Lock()
	s.closed = true
	w := s.w
	s.w = nil
	s.mu.Unlock()
	if w == nil {
		return nil
	}
	return w.close()
}

// errClosed says the sandbox was closed.
var errClosed = errors.New("sandbox: closed")
