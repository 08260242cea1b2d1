package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// TestBackupWhileRunning takes the online backup docs/operations.md
// describes, VACUUM INTO from a connection of its own, while the store
// keeps admitting jobs, and opens the copy as a store: every job admitted
// before the backup began is in it and its admission counters agree with
// its jobs (Reconcile finds no drift), so the copy is one consistent
// moment of the store.
func TestBackupWhileRunning(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.db")
	s := openTest(t, path)
	caps := store.Caps{Global: 100000, Tenant: 100000}

	before := make([]string, 0, 200)
	for range 200 {
		j, adm, err := s.Admit(ctx, storetest.NewJob("acme", time.Now()), caps)
		require.NoError(t, err)
		require.Equal(t, store.Admitted, adm)
		before = append(before, j.ID)
	}

	// Admissions go on while the backup runs.
	writeCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	var writeErr error
	go func() {
		defer wg.Done()
		for writeCtx.Err() == nil {
			if _, _, err := s.Admit(writeCtx, storetest.NewJob("globex", time.Now()), caps); err != nil && !errors.Is(err, context.Canceled) {
				writeErr = err
				return
			}
		}
	}()

	backup := filepath.Join(dir, "backup.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `VACUUM INTO ?`, backup)
	require.NoError(t, db.Close())
	stop()
	wg.Wait()
	require.NoError(t, err, "VACUUM INTO while the store is open and writing")
	require.NoError(t, writeErr)

	copied := openTest(t, backup)
	for _, id := range before {
		_, err := copied.Get(ctx, id)
		require.NoError(t, err, "job %s admitted before the backup", id)
	}
	drift, err := copied.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, drift, "the backup's admission counters agree with its jobs")
}
