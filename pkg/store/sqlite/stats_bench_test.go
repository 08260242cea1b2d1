package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// BenchmarkStats measures one Stats call over 100,000 jobs, nine in ten of
// them finished: what a dashboard's poll costs on a store with history.
func BenchmarkStats(b *testing.B) {
	s := openTest(b, filepath.Join(b.TempDir(), "sluice.db"))
	ctx := context.Background()
	now := time.Now()
	ids := admitJobs(b, s, 100_000, now)
	for _, id := range ids[:90_000] {
		_, err := s.Update(ctx, id, func(j contracts.Job) (store.Change, error) {
			return store.Change{Now: now, State: contracts.StateCancelled}, nil
		})
		require.NoError(b, err)
	}
	b.ResetTimer()
	for b.Loop() {
		c, err := s.Stats(ctx)
		require.NoError(b, err)
		require.Equal(b, 90_000, c.ByState[contracts.StateCancelled])
	}
}
