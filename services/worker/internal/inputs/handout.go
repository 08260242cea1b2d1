package inputs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/sluicehq/sluice/pkg/confine"
)

// Handing out. A run never gets the cached file itself: a run that chmods
// and rewrites the path it was handed would change what every later run
// with the same pin reads. Each run gets its own copy in a directory of
// its own, made from the cached file by a reflink where the filesystem
// shares blocks (btrfs, XFS: no bytes copied) and by a kernel copy
// (copy_file_range) where it refuses (ext4, tmpfs, cache and run directory
// on two filesystems).
//
// The cache stamps each file it checked (device, inode, size, mode, mtime,
// ctime) and compares the stamp before and after every copy. A file
// changed behind the cache's back (a chmod, a write, a truncate, a rename
// over it) has a new ctime: it is hashed again, and handed out only if it
// still matches its digest (made read-only again and stamped anew);
// otherwise it is evicted and fetched again. Hashing every copy instead
// would check the same and cost a SHA-256 of the input per run: see
// BenchmarkHandOut.

// copyRound is how much one copy_file_range round copies before the
// run's context is looked at again.
const copyRound = 64 << 20

var (
	// errChanged says a cached file is not as the cache last checked it.
	errChanged = errors.New("cached input changed since it was checked")
	// errDiffers says a cached file no longer hashes to its digest.
	errDiffers = errors.New("cached input differs from its digest")
	// errGone says a cached file was removed behind the cache's back.
	errGone = errors.New("cached input has gone")
)

// stamp is what a file's metadata said when the cache last knew its bytes
// were right: confine's stamp of the file (device, inode, size, mtime,
// ctime), and its mode, which the cache keeps read-only.
type stamp struct {
	confine.Stamp
	mode fs.FileMode
}

// stampOf is what info says of a file's identity and last change (its
// ctime moves on every write, chmod, truncate or link; where the platform
// has none, the mode and mtime are what is left to compare).
func stampOf(info os.FileInfo) stamp {
	s, _ := confine.StampOf(info)
	return stamp{Stamp: s, mode: info.Mode()}
}

// handout is how one copy was made.
type handout int

const (
	// handoutReflink shares the cached file's blocks.
	handoutReflink handout = iota
	// handoutCopy copied the bytes.
	handoutCopy
)

// openCached opens a cached file for reading without following a link or
// blocking on a FIFO (either would be something that replaced the file).
func openCached(path string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, nil, errGone
	case errors.Is(err, syscall.ELOOP):
		return nil, nil, errChanged
	case err != nil:
		return nil, nil, fmt.Errorf("inputs: %w", err)
	}
	info, err := f.Stat()
	if err == nil && !info.Mode().IsRegular() {
		err = errChanged
	}
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	return f, info, nil
}

// place writes a private, read-only (0444) copy of the cached file src
// to dst, which must not exist. It answers errChanged if src is not as
// stamped before or after the copy, errGone if it is missing; on any
// error dst is removed.
func place(ctx context.Context, src, dst string, stamped stamp) (handout, error) {
	in, info, err := openCached(src)
	if err != nil {
		return 0, err
	}
	defer func() { _ = in.Close() }()
	if stampOf(info) != stamped {
		return 0, errChanged
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return 0, fmt.Errorf("inputs: %w", err)
	}
	how, err := fill(ctx, out, in)
	if err == nil {
		// Changed while it was copied: the copy may hold anything.
		if info, serr := in.Stat(); serr != nil || stampOf(info) != stamped {
			err = errChanged
		}
	}
	if err == nil {
		err = out.Chmod(0o444)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(dst)
		return 0, err
	}
	return how, nil
}

// fill makes out a copy of in: a reflink, else a kernel copy in rounds
// that stop when ctx ends.
func fill(ctx context.Context, out, in *os.File) (handout, error) {
	if clone(out, in) == nil {
		return handoutReflink, nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return 0, context.Cause(ctx)
		}
		n, err := io.CopyN(out, in, copyRound)
		if errors.Is(err, io.EOF) || (err == nil && n < copyRound) {
			return handoutCopy, nil
		}
		if err != nil {
			return 0, fmt.Errorf("inputs: copy to %s: %w", out.Name(), err)
		}
	}
}

// recheck hashes the cached file at path again after its stamp changed:
// if it still matches digest it is made read-only again and its new
// stamp returned; errDiffers (or errGone) means it must go.
func recheck(ctx context.Context, path, digest string) (stamp, error) {
	f, _, err := openCached(path)
	if errors.Is(err, errChanged) {
		return stamp{}, errDiffers // a link or a FIFO is not the content
	}
	if err != nil {
		return stamp{}, err
	}
	defer func() { _ = f.Close() }()
	// Read-only first, then stamp, hash and stamp again: a change while
	// it is hashed shows as two stamps.
	if err := f.Chmod(0o444); err != nil {
		return stamp{}, fmt.Errorf("inputs: %w", err)
	}
	before, err := f.Stat()
	if err != nil {
		return stamp{}, fmt.Errorf("inputs: %w", err)
	}
	h := sha256.New()
	if err := copyCtx(ctx, h, f); err != nil {
		return stamp{}, fmt.Errorf("inputs: hash %s: %w", path, err)
	}
	after, err := f.Stat()
	if err != nil {
		return stamp{}, fmt.Errorf("inputs: %w", err)
	}
	if hex.EncodeToString(h.Sum(nil)) != digest || stampOf(before) != stampOf(after) {
		return stamp{}, errDiffers
	}
	return stampOf(after), nil
}

// copyCtx copies r to w until EOF or ctx ends.
func copyCtx(ctx context.Context, w io.Writer, r io.Reader) error {
	buf := make([]byte, 1<<20)
	for {
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx)
		}
		k, rerr := r.Read(buf)
		if k > 0 {
			if _, err := w.Write(buf[:k]); err != nil {
				return err
			}
		}
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}
