package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// warden is the worker's end of its warden process.
type warden struct {
	conn *net.UnixConn
	cmd  *exec.Cmd
	// gone is closed once the warden's socket closed (it died, or close).
	gone chan struct{}
	// read is closed when the reading goroutine returned.
	read chan struct{}
}

// wardenExitWait bounds close's wait for the warden to exit.
const wardenExitWait = 5 * time.Second

// startWarden starts a warden process and the goroutine that reads what
// it says (runs it killed, to onExpired) until its socket closes.
func startWarden(onExpired func(string)) (*warden, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox: warden socket: %w", err)
	}
	local, remote := os.NewFile(uintptr(fds[0]), "warden"), os.NewFile(uintptr(fds[1]), "warden-remote")
	defer remote.Close()
	c, err := net.FileConn(local)
	_ = local.Close()
	if err != nil {
		return nil, fmt.Errorf("sandbox: warden socket: %w", err)
	}
	conn := c.(*net.UnixConn)
	cmd := exec.Command(selfExe)
	cmd.Args = []string{wardenArg0}
	cmd.Env = helperEnv()
	cmd.ExtraFiles = []*os.File{remote}
	// Its own process group: a signal to the worker's group (a terminal's
	// ^Z, say) does not stop the warden with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("sandbox: start the run warden: %w", err)
	}
	w := &warden{conn: conn, cmd: cmd, gone: make(chan struct{}), read: make(chan struct{})}
	go w.readLoop(onExpired)
	return w, nil
}

// readLoop passes on the warden's notices until its socket closes.
func (w *warden) readLoop(onExpired func(string)) {
	defer close(w.read)
	defer close(w.gone)
	buf := make([]byte, maxWardenMsg)
	for {
		n, _, _, _, err := w.conn.ReadMsgUnix(buf, nil)
		if err != nil || n == 0 {
			return
		}
		var m wardenMsg
		if json.Unmarshal(buf[:n], &m) == nil && m.Op == opExpired && onExpired != nil {
			onExpired(m.Run)
		}
	}
}

// alive reports whether the warden's socket is still open.
func (w *warden) alive() bool {
	select {
	case <-w.gone:
		return false
	default:
		return true
	}
}

// send sends one message, with lock's descriptor when not nil.
func (w *warden) send(m wardenMsg, lock *os.File) error {
	data, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("sandbox: encode: %w", err)
	}
	var oob []byte
	if lock != nil {
		oob = unix.UnixRights(int(lock.Fd()))
	}
	if _, _, err := w.conn.WriteMsgUnix(data, oob, nil); err != nil {
		return fmt.Errorf("%w: %w", errWardenGone, err)
	}
	return nil
}

// close closes the socket (the warden then kills what it still watches
// and exits) and waits for the warden to exit, killing it after a while.
func (w *warden) close() error {
	err := w.conn.CloseWrite()
	done := make(chan error, 1)
	go func() { done <- w.cmd.Wait() }()
	select {
	case werr := <-done:
		if err == nil && werr != nil {
			err = fmt.Errorf("sandbox: run warden: %w", werr)
		}
	case <-time.After(wardenExitWait):
		_ = w.cmd.Process.Kill()
		<-done
		err = errors.New("sandbox: the run warden did not exit in time")
	}
	_ = w.conn.Close()
	<-w.read
	return err
}
