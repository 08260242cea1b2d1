package confine_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/confine"
)

// tree is a root with a file, a directory, a FIFO and links in and out
// of it, and a secret outside it.
type tree struct {
	root, outside string
	roots         confine.Roots
}

func setup(t *testing.T) tree {
	t.Helper()
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "sub"), 0o755))
	require.NoError(t, os.MkdirAll(outside, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "sub", "data.txt"), []byte("data\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("secret\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "locked"), []byte("locked\n"), 0o000))
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "escape")))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "escape-dir")))
	require.NoError(t, os.Symlink(filepath.Join(root, "sub", "data.txt"), filepath.Join(root, "inside")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644))
	roots, err := confine.New([]string{root + "/"})
	require.NoError(t, err)
	return tree{root: root, outside: outside, roots: roots}
}

// TestCopy: only regular files under the roots are read, whatever the
// path says; everything else is the one ErrRefused.
func TestCopy(t *testing.T) {
	t.Parallel()
	tr := setup(t)
	for _, tc := range []struct {
		name, path string
		want       string // "" = refused
	}{
		{"a file under the root", tr.root + "/sub/data.txt", "data\n"},
		{"a link inside the root", tr.root + "/inside", "data\n"},
		{"unclean but inside", tr.root + "/sub/../sub/./data.txt", "data\n"},
		{"a file outside", tr.outside + "/secret", ""},
		{"dot-dot out of the root", tr.root + "/../outside/secret", ""},
		{"a link out of the root", tr.root + "/escape", ""},
		{"through a linked directory", tr.root + "/escape-dir/secret", ""},
		{"missing", tr.root + "/sub/missing", ""},
		{"a directory", tr.root + "/sub", ""},
		{"the root itself", tr.root, ""},
		{"a FIFO", tr.root + "/fifo", ""},
		{"relative", "sub/data.txt", ""},
		{"empty", "", ""},
		{"NUL byte", tr.root + "/sub/data.txt\x00", ""},
		{"etc passwd", "/etc/passwd", ""},
		{"a prefix that is not the root", tr.root + "x/data.txt", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			n, err := tr.roots.Copy(context.Background(), tc.path, &out, 1<<20)
			if tc.want == "" {
				require.ErrorIs(t, err, confine.ErrRefused)
				require.Equal(t, confine.ErrRefused.Error(), err.Error(), "the error says nothing of the file")
				require.Zero(t, n)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, out.String())
		})
	}
	if os.Geteuid() != 0 {
		_, err := tr.roots.Copy(context.Background(), tr.root+"/locked", &bytes.Buffer{}, 1<<20)
		require.Equal(t, confine.ErrRefused, err, "unreadable is refused like missing")
	}
}

// TestNoRoots: the zero value reads nothing.
func TestNoRoots(t *testing.T) {
	t.Parallel()
	var none confine.Roots
	require.True(t, none.Empty())
	_, err := none.Copy(context.Background(), "/etc/passwd", &bytes.Buffer{}, 1<<20)
	require.Equal(t, confine.ErrRefused, err)
}

// TestNew: roots must be absolute, existing directories.
func TestNew(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for _, bad := range [][]string{{"relative/dir"}, {filepath.Join(dir, "missing")}, {file}} {
		_, err := confine.New(bad)
		require.Error(t, err, "%v", bad)
		require.Contains(t, err.Error(), bad[0])
	}
	r, err := confine.New([]string{dir, " ", ""})
	require.NoError(t, err)
	require.Equal(t, []string{dir}, r.Dirs())
}

// TestBound: the bound counts the bytes read, not the size the file
// reports (a /proc file says 0), and a context that ends stops the read.
func TestBound(t *testing.T) {
	t.Parallel()
	tr := setup(t)
	n, err := tr.roots.Copy(context.Background(), tr.root+"/sub/data.txt", &bytes.Buffer{}, 4)
	require.ErrorIs(t, err, confine.ErrTooLarge)
	require.LessOrEqual(t, n, int64(4))

	if _, err := os.Stat("/proc/self/pagemap"); err != nil {
		t.Skip("no /proc/self/pagemap here")
	}
	proc, err := confine.New([]string{"/proc"})
	require.NoError(t, err)
	_, err = proc.Copy(context.Background(), "/proc/self/pagemap", &bytes.Buffer{}, 1<<20)
	require.ErrorIs(t, err, confine.ErrTooLarge, "size 0 but endless: the bound holds")

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = proc.Copy(ctx, "/proc/self/pagemap", discard{}, 1<<62)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the context stops an endless read")
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// FuzzResolve: whatever the path, what Resolve lets through lies under a
// root.
func FuzzResolve(f *testing.F) {
	base := f.TempDir()
	root := filepath.Join(base, "root")
	require.NoError(f, os.MkdirAll(filepath.Join(root, "d"), 0o755))
	require.NoError(f, os.WriteFile(filepath.Join(root, "d", "x"), nil, 0o644))
	require.NoError(f, os.Symlink(base, filepath.Join(root, "up")))
	roots, err := confine.New([]string{root})
	require.NoError(f, err)
	root, err = filepath.EvalSymlinks(root)
	require.NoError(f, err)
	for _, s := range []string{root + "/d/x", root + "/up/root/d/x", root + "/../root/d/x", "/etc/passwd", root + "//d/./x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		real, err := roots.Resolve(path)
		if err != nil {
			require.Equal(t, confine.ErrRefused, err)
			return
		}
		require.True(t, real == root || strings.HasPrefix(real, root+"/"), "%q resolved to %q", path, real)
	})
}
