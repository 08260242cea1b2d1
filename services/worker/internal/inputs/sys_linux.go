package inputs

import (
	"os"

	"golang.org/x/sys/unix"
)

// clone makes dst share src's blocks (a reflink: FICLONE); filesystems
// that cannot (ext4, tmpfs, two filesystems) refuse and dst is unchanged.
func clone(dst, src *os.File) error {
	return unix.IoctlFileClone(int(dst.Fd()), int(src.Fd()))
}
