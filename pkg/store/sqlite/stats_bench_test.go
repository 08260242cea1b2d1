package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// BenchmarkStats measures one Stats call over 100,000 jobs, nine in ten of
// them finished: what a dashboard's poll costs on a store with history.
func BenchmarkStats(b *testing.B) {
	s := openTest(b, filepath.Join(b.TempDir(), "sluice.db"))
	ctx := context.Background()
	now := time.Now()
	var ids []string
	for range 100 {
		reqs := make([]store.AdmitRequest, 1000)
		for i := range reqs {
			j := storetest.NewJob("acme", now)
			j.ID = uuid.Must(uuid.NewV7()).String()
			reqs[i] = store.AdmitRequest{Job: j}
			ids = append(ids, j.ID)
		}
		_, err := s.AdmitBatch(ctx, reqs)
		require.NoError(b, err)
	}
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
