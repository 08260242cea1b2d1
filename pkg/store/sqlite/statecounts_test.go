package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// skewable is a Store whose counters of jobs by state the conformance
// suite may corrupt (storetest.StateCountSkewer).
type skewable struct{ *Store }

// SkewStateCount adds by to tenant's counter of state behind the store's back.
func (s skewable) SkewStateCount(ctx context.Context, tenant string, state contracts.JobState, by int) error {
	return s.write(ctx, store.WriteOther, "skew a count", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO job_counts (tenant, state, n) VALUES (?, ?, ?)
			ON CONFLICT (tenant, state) DO UPDATE SET n = n + excluded.n`, tenant, string(state), by)
		return err
	})
}

// TestStateCountsBuiltOnOpen: a store of the previous release (jobs, no
// counters of jobs by state) gets its counters built once when opened,
// and they follow every write from then on.
func TestStateCountsBuiltOnOpen(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "sluice.db")
	s, err := Open(ctx, path)
	require.NoError(t, err)
	now := time.Now()
	var last contracts.Job
	for i := range 5 {
		last, _, err = s.Admit(ctx, storetest.NewJob([]string{"acme", "beta"}[i%2], now), store.Caps{})
		require.NoError(t, err)
	}
	_, err = s.Transition(ctx, store.Expect{ID: last.ID, State: contracts.StatePending},
		store.Change{Now: now, State: contracts.StateCancelled})
	require.NoError(t, err)
	// What the previous release left: no counts of jobs by state.
	_, err = s.w.ExecContext(ctx, `DROP TABLE job_counts`)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	s = openTest(t, path)
	c, err := s.Stats(ctx)
	require.NoError(t, err)
	want := store.ZeroStates()
	want[contracts.StatePending], want[contracts.StateCancelled] = 4, 1
	require.Equal(t, want, c.ByState)
	got, err := s.TenantCounts(ctx, "acme")
	require.NoError(t, err)
	want[contracts.StatePending], want[contracts.StateCancelled] = 2, 1
	require.Equal(t, want, got)
	drift, err := s.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, drift)
}
