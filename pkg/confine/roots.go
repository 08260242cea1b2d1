package confine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrRefused is the one answer for a file that may not be read, whatever
// the reason: outside the roots, missing, unreadable or not a regular
// file. Its text says nothing of the file.
var ErrRefused = errors.New("not a regular file under the allowed roots, or not found")

// ErrTooLarge is returned by Copy when the file holds more bytes than the
// caller's bound.
var ErrTooLarge = errors.New("larger than allowed")

// chunk is the size of one read: the context is checked between reads.
const chunk = 64 << 10

// Roots are the directories files may be read under. The zero value has
// none and refuses every file.
type Roots struct {
	// written are the roots as configured (cleaned), resolved the same
	// directories with their symbolic links resolved.
	written, resolved []string
}

// New checks dirs (each an absolute path to an existing directory) and
// returns them as Roots. Its error names the directory at fault.
func New(dirs []string) (Roots, error) {
	var r Roots
	for _, d := range dirs {
		if d = strings.TrimSpace(d); d == "" {
			continue
		}
		if !filepath.IsAbs(d) {
			return Roots{}, fmt.Errorf("%q is not an absolute path", d)
		}
		clean := filepath.Clean(d)
		real, err := filepath.EvalSymlinks(clean)
		if err != nil {
			return Roots{}, fmt.Errorf("%q is not an existing directory", d)
		}
		info, err := os.Stat(real)
		if err != nil || !info.IsDir() {
			return Roots{}, fmt.Errorf("%q is not an existing directory", d)
		}
		r.written = append(r.written, clean)
		r.resolved = append(r.resolved, real)
	}
	return r, nil
}

// Empty reports whether there are no roots (every file is refused).
func (r Roots) Empty() bool { return len(r.resolved) == 0 }

// Dirs are the roots as configured.
func (r Roots) Dirs() []string { return append([]string(nil), r.written...) }

// under reports whether path lies in one of dirs (or is one of them).
func under(path string, dirs []string) bool {
	for _, d := range dirs {
		if Within(path, d) {
			return true
		}
	}
	return false
}

// Within reports whether path is dir or lies below it; both are clean
// absolute paths, compared as written (resolve links first).
func Within(path, dir string) bool {
	if path == dir {
		return true
	}
	prefix := dir
	if !strings.HasSuffix(prefix, string(filepath.Separator)) {
		prefix += string(filepath.Separator)
	}
	return strings.HasPrefix(path, prefix)
}

// Resolve is the real path of the regular file path names, if it lies
// under the roots both as written and once its symbolic links are
// resolved; otherwise ErrRefused. A path outside the roots as written is
// refused without touching the file system.
func (r Roots) Resolve(path string) (string, error) {
	if r.Empty() || !filepath.IsAbs(path) || strings.ContainsRune(path, 0) {
		return "", ErrRefused
	}
	clean := filepath.Clean(path)
	if !under(clean, r.written) && !under(clean, r.resolved) {
		return "", ErrRefused
	}
	real, err := filepath.EvalSymlinks(clean)
	if err != nil || !under(real, r.resolved) {
		return "", ErrRefused
	}
	return real, nil
}

// Open opens the regular file path names under the roots for reading
// (see Resolve), non-blocking and without following a last symbolic link
// (one swapped in after the check); anything but a regular file is
// refused, and so is a file the kernel says was opened outside the roots
// (a directory swapped for a link between the check and the open; Linux).
func (r Roots) Open(path string) (*os.File, error) {
	f, _, err := r.OpenResolved(path)
	return f, err
}

// OpenResolved is Open, and also says the real path of the file it
// opened (see Resolve): the one name of the file whatever path named it.
func (r Roots) OpenResolved(path string) (*os.File, string, error) {
	real, err := r.Resolve(path)
	if err != nil {
		return nil, "", err
	}
	f, err := os.OpenFile(real, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, "", ErrRefused
	}
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		_ = f.Close()
		return nil, "", ErrRefused
	}
	// Where the kernel opened it must still be under a root.
	if opened, ok := openedPath(f); ok && !under(opened, r.resolved) {
		_ = f.Close()
		return nil, "", ErrRefused
	}
	return f, real, nil
}

// Copy copies the regular file path names under the roots to w and says
// how many bytes it copied: at most limit, else ErrTooLarge (counted on
// the bytes read, not on the size the file reports). It stops with the
// context's error when ctx ends. A file it may not read is ErrRefused; a
// read that fails half-way is an error that names neither the file nor
// the cause.
func (r Roots) Copy(ctx context.Context, path string, w io.Writer, limit int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	f, err := r.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return Read(ctx, f, w, limit)
}

// Read copies what f gives (a file Open returned) to w and says how many
// bytes it copied, with Copy's rules: at most limit, else ErrTooLarge
// (counted on the bytes read); the context's error when ctx ends (checked
// between reads of 64 KiB); ErrReadFailed when a read fails.
func Read(ctx context.Context, f io.Reader, w io.Writer, limit int64) (int64, error) {
	buf := make([]byte, chunk)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		k, rerr := f.Read(buf)
		if k > 0 {
			if n+int64(k) > limit {
				return n, ErrTooLarge
			}
			if _, err := w.Write(buf[:k]); err != nil {
				return n, fmt.Errorf("confine: write: %w", err)
			}
			n += int64(k)
		}
		switch {
		case errors.Is(rerr, io.EOF):
			return n, nil
		case rerr != nil:
			return n, ErrReadFailed
		}
	}
}

// ErrReadFailed is a read that failed after the file was opened.
var ErrReadFailed = errors.New("the read failed")
