package kinds

import "syscall"

// sysProcAttr puts an exec job in its own process group (so a cancel or
// timeout signals everything it started) and has the kernel SIGKILL the
// job's process when the worker dies (kill -9 included), so the job does not
// run on while the reaper hands it to another worker. The death signal
// reaches the process the worker started; what that process started in
// turn is only stopped if it exits with its parent.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
