package dial

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOpenMongoUnreachableHidesPassword(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	// Nothing listens on port 1.
	_, err := Open(ctx, Env{Store: "mongodb://sluice:s3cret@127.0.0.1:1/sluice?serverSelectionTimeoutMS=200&connectTimeoutMS=200"})
	if err == nil {
		t.Fatal("Open succeeded without a server")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error shows the password: %v", err)
	}
	if !strings.Contains(err.Error(), "open MongoDB store") {
		t.Fatalf("error does not say what failed: %v", err)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for store, ok := range map[string]bool{
		"":                           true,
		"mongodb://localhost/sluice": true,
		"mongodb+srv://cluster.example.com/sluice": true,
		"sqlite:///tmp/x.db":                       true,
		"postgres://localhost/x":                   false,
	} {
		err := Env{Store: store, DataDir: "./.sluice"}.Validate()
		if (err == nil) != ok {
			t.Errorf("Validate(%q) = %v, want ok=%v", store, err, ok)
		}
	}
}

func TestOpenRetryWaitsForTheStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	blocker := filepath.Join(dir, "not-a-dir")
	require.NoError(t, os.WriteFile(blocker, nil, 0o600)) // the data dir is a file: Open fails
	var tries atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		s, err := OpenRetry(ctx, Env{DataDir: filepath.Join(blocker, "data")}, func(error, time.Duration) {
			if tries.Add(1) == 2 {
				cancel()
			}
		})
		if s != nil {
			_ = s.Close()
		}
		done <- err
	}()
	require.Error(t, <-done, "gives up only when ctx ends")
	require.GreaterOrEqual(t, tries.Load(), int32(2))

	s, err := OpenRetry(context.Background(), Env{DataDir: filepath.Join(dir, "ok")}, nil)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	_, err = OpenRetry(context.Background(), Env{Store: "postgres://x"}, nil)
	require.ErrorContains(t, err, "SLUICE_STORE", "a bad setting is not retried")
}

// TestEmbeddedDataDirIsNotListable: opening the embedded store leaves its
// data directory listable and writable by its owner alone, and passable
// as before (a worker's runs reach their scratch directories by path).
func TestEmbeddedDataDirIsNotListable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	s, err := Open(t.Context(), Env{DataDir: dir})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	info, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o711), info.Mode().Perm())
}
