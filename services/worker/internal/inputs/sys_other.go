//go:build !linux

package inputs

import (
	"errors"
	"os"
)

// clone is a reflink where the platform has one; here it has not.
func clone(_, _ *os.File) error { return errors.ErrUnsupported }
