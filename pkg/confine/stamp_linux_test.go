//go:build linux

package confine_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/confine"
)

// stampAt opens path under roots and returns its stamp and real path.
func stampAt(t *testing.T, roots confine.Roots, path string) (confine.Stamp, string) {
	t.Helper()
	f, real, err := roots.OpenResolved(path)
	require.NoError(t, err)
	defer f.Close()
	info, err := f.Stat()
	require.NoError(t, err)
	s, ok := confine.StampOf(info)
	require.True(t, ok, "Linux gives the whole stamp")
	return s, real
}

// TestStamp: a file's stamp stays while it does not change, through any
// path that resolves to it, and moves with its size, its bytes (even
// with the mtime set back) and its inode; a stamp is settled only some
// seconds after its last change.
func TestStamp(t *testing.T) {
	t.Parallel()
	tr := setup(t)
	path := filepath.Join(tr.root, "sub", "data.txt")
	s, real := stampAt(t, tr.roots, path)
	require.Equal(t, path, real)
	again, real := stampAt(t, tr.roots, tr.root+"/inside")
	require.Equal(t, s, again, "the same file through a link")
	require.Equal(t, path, real, "named by its real path")
	require.Equal(t, int64(len("data\n")), s.Size)
	require.NotZero(t, s.Ino)

	require.False(t, s.Settled(time.Unix(0, s.Ctime)), "just changed")
	require.True(t, s.Settled(time.Unix(0, max(s.Ctime, s.Mtime)).Add(time.Minute)))

	mtime := time.Unix(0, s.Mtime)
	require.NoError(t, os.WriteFile(path, []byte("DATA\n"), 0o644))
	require.NoError(t, os.Chtimes(path, time.Time{}, mtime))
	rewritten, _ := stampAt(t, tr.roots, path)
	require.Equal(t, s.Mtime, rewritten.Mtime, "the mtime was set back")
	require.Equal(t, s.Size, rewritten.Size)
	require.NotEqual(t, s, rewritten, "the ctime moved")

	require.NoError(t, os.WriteFile(path+".new", []byte("DATA\n"), 0o644))
	require.NoError(t, os.Rename(path+".new", path))
	replaced, _ := stampAt(t, tr.roots, path)
	require.NotEqual(t, rewritten.Ino, replaced.Ino)
}
