//go:build !linux

package inputs

import (
	"errors"
	"os"
)

// clone is a reflink where the platform has one; here it has not.
func clone(_, _ *os.File) error { return errors.ErrUnsupported }

// stampOf is what info says of a file's last change (size, mode, mtime).
func stampOf(info os.FileInfo) stamp {
	return stamp{size: info.Size(), mode: info.Mode(), mtime: info.ModTime().UnixNano()}
}
