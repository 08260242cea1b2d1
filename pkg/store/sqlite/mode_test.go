package sqlite

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStoreFilesAreTheOwnersAlone: the database and its journal files are
// readable by their owner only, also when an earlier release left them
// open to others: the store holds every tenant's jobs, and a worker's
// runs must not read it.
func TestStoreFilesAreTheOwnersAlone(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sluice.db")
	s, err := Open(context.Background(), path)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	for _, p := range []string{path, path + "-wal"} {
		if _, err := os.Stat(p); err == nil {
			require.NoError(t, os.Chmod(p, 0o644)) // as an earlier release made them
		}
	}
	s, err = Open(context.Background(), path)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		info, err := os.Stat(p)
		if os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), info.Mode().Perm(), p)
	}
}
