package mongo

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// BenchmarkStats measures one Stats call on FerretDB over many jobs (10,000
// by default, SLUICE_BENCH_JOBS to change it), nine in ten of them
// finished, of ten tenants: what a dashboard's poll costs on a store with
// history. The jobs are written straight into the collection, then the
// store is opened as a store of the previous release would be (no
// counters of jobs by state: Open builds them).
func BenchmarkStats(b *testing.B) {
	jobs := 10_000
	if v := os.Getenv("SLUICE_BENCH_JOBS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(b, err)
		jobs = n
	}
	ctx := context.Background()
	uri := ferretServer(b)("sluice")
	s, err := Open(ctx, uri)
	require.NoError(b, err)
	now := time.Now().UTC().Truncate(time.Millisecond)
	batch := make([]any, 0, fanoutBatch)
	for i := range jobs {
		j := storetest.NewJob(fmt.Sprintf("tenant%d", i%10), now)
		j.ID = fmt.Sprintf("job%07d", i)
		d := newJobDoc(j)
		if i%10 != 0 {
			d.State = string(contracts.StateCancelled)
			d.FinishedAt = &now
		}
		batch = append(batch, d)
		if len(batch) == cap(batch) || i == jobs-1 {
			_, err := s.jobs.InsertMany(ctx, batch)
			require.NoError(b, err)
			batch = batch[:0]
		}
	}
	require.NoError(b, s.db.Collection("job_counts").Drop(ctx))
	require.NoError(b, s.Close())
	s = open(b, uri, WithTimeout(10*time.Minute)) // counting every job takes long on FerretDB
	b.ResetTimer()
	for b.Loop() {
		c, err := s.Stats(ctx)
		require.NoError(b, err)
		require.Equal(b, jobs-jobs/10, c.ByState[contracts.StateCancelled])
	}
}
