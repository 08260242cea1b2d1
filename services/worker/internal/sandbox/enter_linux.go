package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/services/worker/internal/limit"
)

// The launcher ("sluice-run-enter") is the first process of a run: the
// worker starts it inside the run's cgroups, its own process group and,
// where it may, new mount and IPC namespaces; it reads what to do from
// fd 3 (written once the warden watches the run), sets the run's walls
// up as root, drops to the run's identity and execs the program. If
// anything fails it writes why to fd 4 and exits 127; on exec, fd 4
// closes with nothing written (close-on-exec), which the worker reads as
// "started".

// Where a run in a mount namespace of its own sees its directories: under
// its private /tmp, so no mount point is made on the host.
const (
	runRoot       = "/tmp/sluice"
	runScratch    = runRoot + "/scratch"
	runInputs     = runRoot + "/inputs"
	maxEnterSpec  = 4 << 20
	enterSpecFD   = 3
	enterStatusFD = 4
	enterFailCode = 127
)

// privateDirs get an empty tmpfs of their own in a run's mount namespace:
// nothing one run leaves there reaches another.
var privateDirs = []string{"/tmp", "/var/tmp", "/dev/shm"}

// enterSpec is what the launcher is told to do.
type enterSpec struct {
	// Path is the program (absolute), Argv its arguments (argv[0] too),
	// Env its whole environment, Dir its working directory as the run
	// sees it ("" = the launcher's).
	Path string   `json:"path"`
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir,omitempty"`
	// UID and GID are the run's identity (0: keep the worker's).
	UID uint32 `json:"uid,omitempty"`
	GID uint32 `json:"gid,omitempty"`
	// Namespace: the launcher is in mount and IPC namespaces of its own
	// and sets up the private directories, Binds and /proc.
	Namespace bool   `json:"namespace,omitempty"`
	Binds     []bind `json:"binds,omitempty"`
	// Rlimits are set right before the exec.
	Rlimits []limit.Rlimit `json:"rlimits,omitempty"`
	// Parent is the worker's pid: a launcher whose parent is gone stops.
	Parent int `json:"parent"`
}

// bind makes a directory of the host visible to a run at another path.
type bind struct {
	From     string `json:"from"`
	To       string `json:"to"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// enterMain is the launcher's main (probe: set everything up, then exit 0
// instead of the exec: how New finds out what the host allows).
func enterMain(probe bool) int {
	// One thread does everything, from the namespace to the exec: the
	// identity, the parent-death signal and no_new_privs are set on it
	// alone, and it is the one the program replaces.
	runtime.LockOSThread()
	status := os.NewFile(enterStatusFD, "status")
	fail := func(err error) int {
		_, _ = io.WriteString(status, err.Error())
		return enterFailCode
	}
	if status == nil {
		return enterFailCode
	}
	unix.CloseOnExec(enterStatusFD)
	spec, err := readSpec()
	if err != nil {
		return fail(err)
	}
	if err := spec.enter(); err != nil {
		return fail(err)
	}
	if probe {
		return 0
	}
	for _, r := range spec.Rlimits {
		if err := unix.Setrlimit(r.Resource, &unix.Rlimit{Cur: r.Cur, Max: r.Max}); err != nil {
			return fail(fmt.Errorf("set limit %d: %w", r.Resource, err))
		}
	}
	err = syscall.Exec(spec.Path, spec.Argv, spec.Env)
	return fail(fmt.Errorf("%s: %w", spec.Path, err))
}

// readSpec reads and decodes the spec from fd 3.
func readSpec() (enterSpec, error) {
	var spec enterSpec
	f := os.NewFile(enterSpecFD, "spec")
	if f == nil {
		return spec, errors.New("no spec")
	}
	data, err := io.ReadAll(io.LimitReader(f, maxEnterSpec))
	_ = f.Close()
	if err != nil {
		return spec, fmt.Errorf("read spec: %w", err)
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		return spec, fmt.Errorf("decode spec: %w", err)
	}
	if len(spec.Argv) == 0 {
		spec.Argv = []string{spec.Path}
	}
	return spec, nil
}

// enter puts the launcher behind the run's walls: namespace set-up, the
// run's identity, death with the worker, no new privileges, its
// directory.
func (s enterSpec) enter() error {
	if s.Parent != 0 && os.Getppid() != s.Parent {
		return errors.New("the worker is gone")
	}
	if s.Namespace {
		if err := s.mount(); err != nil {
			return err
		}
	}
	if s.UID != 0 {
		// The calling thread's credentials only (raw system calls, not
		// the runtime's all-threads ones): it is the thread that execs,
		// and the program keeps just its credentials.
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			return fmt.Errorf("drop groups: %w", e)
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(s.GID), uintptr(s.GID), uintptr(s.GID)); e != 0 {
			return fmt.Errorf("set gid %d: %w", s.GID, e)
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(s.UID), uintptr(s.UID), uintptr(s.UID)); e != 0 {
			return fmt.Errorf("set uid %d: %w", s.UID, e)
		}
	}
	// A change of identity clears the parent-death signal: set it again,
	// then make sure the parent did not die in between.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("parent-death signal: %w", err)
	}
	if s.Parent != 0 && os.Getppid() != s.Parent {
		return errors.New("the worker is gone")
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no new privileges: %w", err)
	}
	if s.Dir != "" {
		if err := os.Chdir(s.Dir); err != nil {
			return fmt.Errorf("dir: %w", err)
		}
	}
	return nil
}

// mount sets up the run's mount namespace (private already: the worker
// started the launcher with CLONE_NEWNS, which makes / private): an empty
// tmpfs on each private directory, the binds under runRoot, and a /proc
// in which the run sees only its own processes (hidepid=2, a mount
// option of its own instance since Linux 5.8).
func (s enterSpec) mount() error {
	// The binds' sources are opened first: a tmpfs over /tmp hides those
	// under it.
	srcs := make([]int, len(s.Binds))
	for i, b := range s.Binds {
		fd, err := unix.Open(b.From, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", b.From, err)
		}
		defer unix.Close(fd)
		srcs[i] = fd
	}
	for _, d := range privateDirs {
		if info, err := os.Stat(d); err != nil || !info.IsDir() {
			if d == "/tmp" {
				return errors.New("no /tmp to mount a private one on")
			}
			continue
		}
		if err := unix.Mount("tmpfs", d, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
			return fmt.Errorf("mount a private %s: %w", d, err)
		}
	}
	for i, b := range s.Binds {
		if err := os.MkdirAll(b.To, 0o755); err != nil {
			return fmt.Errorf("bind %s: %w", b.To, err)
		}
		src := filepath.Join("/proc/self/fd", fmt.Sprint(srcs[i]))
		if err := unix.Mount(src, b.To, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", b.To, err)
		}
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_NOSUID | unix.MS_NODEV)
		if b.ReadOnly {
			flags |= unix.MS_RDONLY
		}
		if err := unix.Mount("", b.To, "", flags, ""); err != nil {
			return fmt.Errorf("bind %s: %w", b.To, err)
		}
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "hidepid=2"); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	return nil
}
