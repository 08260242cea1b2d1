//go:build linux

package confine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOpenedPath: the kernel's path of an open file is its real path, so
// a file reached through a link is seen where it lies.
func TestOpenedPath(t *testing.T) {
	t.Parallel()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	file := filepath.Join(dir, "data")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	require.NoError(t, os.Symlink(dir, filepath.Join(dir, "link")))
	f, err := os.Open(filepath.Join(dir, "link", "data"))
	require.NoError(t, err)
	defer f.Close()
	got, ok := openedPath(f)
	require.True(t, ok)
	require.Equal(t, file, got)
	require.False(t, under(got, []string{filepath.Join(dir, "link")}))
}
