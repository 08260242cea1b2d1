package confine

import (
	"os"
	"time"
)

// Stamp is what the file system says of one version of a file, without
// reading it: which file (device and inode), its size, and when its data
// (mtime) and its inode (ctime) last changed. A write, truncate, rename
// over it, chmod or a utimes call that sets the mtime back all move the
// ctime, which only the clock's owner can set; so a file whose stamp is
// unchanged holds the same bytes, but for two writes of the same size
// within one tick of the file system's clock (see Settled).
type Stamp struct {
	// Dev and Ino name the file.
	Dev, Ino uint64
	// Size is its length in bytes.
	Size int64
	// Mtime and Ctime are its last data and inode changes, in Unix
	// nanoseconds.
	Mtime, Ctime int64
}

// settleTime is how long after its last change a file's stamp is
// trusted: beyond any file system's timestamp granularity (a jiffy on
// Linux's local file systems, 1 s on some network ones, 2 s on FAT).
const settleTime = 3 * time.Second

// Settled reports whether the file's last change (mtime and ctime) was at
// least a few seconds before now: a file changed again within the same
// tick of its file system's clock, with the same size, would keep its
// stamp, so only a settled stamp vouches for the bytes behind it.
func (s Stamp) Settled(now time.Time) bool {
	limit := now.Add(-settleTime).UnixNano()
	return s.Mtime < limit && s.Ctime < limit
}

// StampOf is the stamp of the file info describes (from Stat on an open
// file), and whether the platform gives all of it (Linux: device, inode
// and ctime; elsewhere not, and a stamp must not be trusted).
func StampOf(info os.FileInfo) (Stamp, bool) {
	return stampOf(info)
}
