//go:build linux

package confine

import (
	"os"
	"syscall"
)

// stampOf reads device, inode and ctime from the stat the info carries.
func stampOf(info os.FileInfo) (Stamp, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return Stamp{}, false
	}
	return Stamp{
		Dev: st.Dev, Ino: st.Ino, Size: info.Size(),
		Mtime: info.ModTime().UnixNano(), Ctime: st.Ctim.Nano(),
	}, true
}
