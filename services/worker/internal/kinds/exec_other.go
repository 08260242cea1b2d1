//go:build !linux

package kinds

import "syscall"

// sysProcAttr puts an exec job in its own process group, so a cancel or
// timeout signals everything it started. (Only Linux can also tie the job's
// life to the worker's.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
