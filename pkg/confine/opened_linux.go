//go:build linux

package confine

import (
	"os"
	"strconv"
)

// openedPath is the path the kernel says f was opened at: a directory of
// the path swapped for a symbolic link between the check and the open
// shows here.
func openedPath(f *os.File) (string, bool) {
	rc, err := f.SyscallConn()
	if err != nil {
		return "", false
	}
	var (
		path string
		rerr error
	)
	if err := rc.Control(func(fd uintptr) {
		path, rerr = os.Readlink("/proc/self/fd/" + strconv.FormatUint(uint64(fd), 10))
	}); err != nil || rerr != nil {
		return "", false
	}
	return path, true
}
