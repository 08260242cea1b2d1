package sandbox

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/services/worker/internal/limit"
)

// The warden ("sluice-run-warden") is one process per worker, started on
// the first run that needs it, outside every run's cgroup and process
// group. The worker tells it about each run over a SOCK_SEQPACKET socket
// (fd 3), one JSON message a packet:
//
//	watch   a run: its name, lease deadline, cgroups, uid (with the uid's
//	        lock file the first time, passed along so the uid stays taken
//	        until the warden is done with it) and process group; again
//	        whenever one of them changes (a renewed lease);
//	done    the run ended: make sure nothing of it is left, let go of it.
//
// A deadline is CLOCK_BOOTTIME in nanoseconds (one clock for both
// processes, which goes on while either is stopped). When a run's lease
// passes, the warden kills its whole tree and says so ("expired"), even
// while the worker is frozen; when the socket closes (the worker died or
// closed it), it kills every run it knows and exits.

// wardenMsg is one message between the worker and its warden.
type wardenMsg struct {
	Op  string `json:"op"`
	Run string `json:"run"`
	// Until is the lease deadline (CLOCK_BOOTTIME ns; 0: none).
	Until  int64        `json:"until,omitempty"`
	UID    uint32       `json:"uid,omitempty"`
	PGID   int          `json:"pgid,omitempty"`
	Target limit.Target `json:"target"`
}

// Warden message ops.
const (
	opWatch   = "watch"
	opDone    = "done"
	opExpired = "expired"
)

// wardenSocketFD is the warden's end of its socket to the worker.
const wardenSocketFD = 3

// maxWardenMsg bounds one message.
const maxWardenMsg = 64 << 10

// wardenTick is the longest the warden sleeps between looks at the clock.
const wardenTick = time.Second

// bootNow reads CLOCK_BOOTTIME in nanoseconds.
func bootNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return time.Now().UnixNano()
	}
	return ts.Nano()
}

// watched is a run the warden knows.
type watched struct {
	wardenMsg
	lock   *os.File
	killed bool
}

// wardenMain is the warden's main.
func wardenMain() int {
	f := os.NewFile(wardenSocketFD, "worker")
	if f == nil {
		return 2
	}
	c, err := net.FileConn(f)
	_ = f.Close()
	conn, ok := c.(*net.UnixConn)
	if err != nil || !ok {
		return 2
	}
	worker := os.Getppid()
	msgs := make(chan watched)
	go readWatches(conn, msgs)
	runs := map[string]*watched{}
	timer := time.NewTimer(wardenTick)
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				for _, w := range runs {
					w.kill(worker)
					w.release()
				}
				return 0
			}
			apply(runs, m)
		case <-timer.C:
		}
		now := bootNow()
		next := now + int64(wardenTick)
		for name, w := range runs {
			switch {
			case w.killed || w.Until == 0:
			case w.Until <= now:
				w.kill(worker)
				w.killed = true
				data, _ := json.Marshal(wardenMsg{Op: opExpired, Run: name})
				_, _, _ = conn.WriteMsgUnix(data, nil, nil)
			default:
				next = min(next, w.Until)
			}
		}
		timer.Reset(time.Duration(max(next-now, int64(time.Millisecond))))
	}
}

// readWatches decodes the worker's messages into msgs (with the lock file
// a watch carries) and closes msgs when the socket closes.
func readWatches(conn *net.UnixConn, msgs chan<- watched) {
	defer close(msgs)
	buf := make([]byte, maxWardenMsg)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			return
		}
		var w watched
		w.lock = receivedFile(oob[:oobn])
		if json.Unmarshal(buf[:n], &w.wardenMsg) != nil {
			if w.lock != nil {
				_ = w.lock.Close()
			}
			continue
		}
		msgs <- w
	}
}

// receivedFile is the file descriptor passed in oob, if any.
func receivedFile(oob []byte) *os.File {
	cmsgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	for _, c := range cmsgs {
		fds, err := unix.ParseUnixRights(&c)
		if err != nil {
			continue
		}
		for i, fd := range fds {
			if i > 0 {
				_ = unix.Close(fd)
				continue
			}
			unix.CloseOnExec(fd)
			return os.NewFile(uintptr(fd), "uid-lock")
		}
	}
	return nil
}

// apply applies one message of the worker to runs.
func apply(runs map[string]*watched, m watched) {
	w := runs[m.Run]
	switch m.Op {
	case opWatch:
		if w != nil {
			if m.lock != nil && w.lock == nil {
				w.lock, m.lock = m.lock, nil
			}
			if m.lock != nil {
				_ = m.lock.Close()
			}
			lock, killed := w.lock, w.killed
			*w = m
			w.lock, w.killed = lock, killed
			return
		}
		runs[m.Run] = &m
	case opDone:
		if w != nil {
			sweep(w.UID, w.Target)
			w.release()
			delete(runs, m.Run)
		}
	}
	if m.Op != opWatch && m.lock != nil {
		_ = m.lock.Close()
	}
}

// kill kills every process of the run: its cgroups, every process of its
// uid, its process group. The worker (a thread of which may be inside a
// run's cgroups while it starts one) is spared.
func (w *watched) kill(worker int) {
	w.Target.Kill(worker)
	sweep(w.UID, w.Target)
	if w.PGID > 0 {
		_ = syscall.Kill(-w.PGID, syscall.SIGKILL)
	}
}

// sweep kills what is left of a run of uid (0: the worker's, nothing to
// sweep) when no cgroup held it: a run's uid cannot leave its cgroups,
// whose kill took everything.
func sweep(uid uint32, held limit.Target) {
	if uid != 0 && len(held.Dirs) == 0 {
		killUID(uid)
	}
}

// release lets go of the run's uid.
func (w *watched) release() {
	if w.lock != nil {
		_ = w.lock.Close()
		w.lock = nil
	}
}

// killUID kills every process whose real, effective or saved uid is uid,
// again until none is left (one may fork meanwhile), for at most a while.
// A run's uid is its alone, so this reaches every process it started,
// wherever it went (a new session, another process group).
func killUID(uid uint32) {
	want := strconv.FormatUint(uint64(uid), 10)
	wait := 100 * time.Microsecond
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); wait = min(2*wait, 20*time.Millisecond) {
		if processesOf(want, func(pid int) { _ = syscall.Kill(pid, syscall.SIGKILL) }) == 0 {
			return
		}
		time.Sleep(wait)
	}
}

// processesOf calls fn for every process one of whose uids is uid and
// returns how many it found.
func processesOf(uid string, fn func(pid int)) int {
	dir, err := os.Open("/proc")
	if err != nil {
		return 0
	}
	defer dir.Close()
	names, _ := dir.Readdirnames(-1)
	n := 0
	self := os.Getpid()
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid == self {
			continue
		}
		if uidsOf(pid, uid) {
			fn(pid)
			n++
		}
	}
	return n
}

// uidsOf reports whether a uid of process pid (real, effective, saved,
// file system) is uid.
func uidsOf(pid int, uid string) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.Index(s, "\nUid:")
	if i < 0 {
		return false
	}
	line, _, _ := strings.Cut(s[i+5:], "\n")
	for _, f := range strings.Fields(line) {
		if f == uid {
			return true
		}
	}
	return false
}

// errWardenGone says the warden process is not there to watch a run.
var errWardenGone = errors.New("sandbox: the run warden is gone")
