package inputs

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// clone makes dst share src's blocks (a reflink: FICLONE); filesystems
// that cannot (ext4, tmpfs, two filesystems) refuse and dst is unchanged.
func clone(dst, src *os.File) error {
	return unix.IoctlFileClone(int(dst.Fd()), int(src.Fd()))
}

// stampOf is what info says of a file's identity and last change. Its
// ctime moves on every write, chmod, truncate or link and cannot be set
// back by anyone but the clock's owner.
func stampOf(info os.FileInfo) stamp {
	s := stamp{size: info.Size(), mode: info.Mode(), mtime: info.ModTime().UnixNano()}
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		s.dev, s.ino = st.Dev, st.Ino
		s.ctime = st.Ctim.Nano()
	}
	return s
}
