package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// BenchmarkClaimPacking measures what packing by resources adds to a
// claim on the embedded store (issue 26): rounds of 256 ready jobs (half
// of them declaring resources) claimed into 8 workers × 32 slots that
// already run 16 jobs each, once counting slots only (ClaimRequest
// without Resources: each worker's running jobs counted) and once packing
// by resources (each worker's running jobs read, and store.Slots fitting
// every job), alternately, the same work otherwise. It prints both
// claims' time per job and their ratio (target: packing at most 1.10).
func BenchmarkClaimPacking(b *testing.B) {
	const (
		workers = 8
		slots   = 32
		round   = workers * slots
		busy    = 16
	)
	s := openTest(b, filepath.Join(b.TempDir(), "sluice.db"))
	ctx := context.Background()
	now := time.Now()
	ids := make([]string, workers)
	lists := map[string][]string{"test.kind": nil}
	capacity := map[string]int{}
	packs := map[string]store.WorkerResources{}
	for w := range ids {
		ids[w] = fmt.Sprintf("w%02d", w)
		lists["test.kind"] = append(lists["test.kind"], storetest.Slots(ids[w], slots)...)
		capacity[ids[w]] = slots + busy
		packs[ids[w]] = store.WorkerResources{Capacity: contracts.Resources{CPU: 1024, Memory: 1 << 40},
			Defaults: contracts.ResourceDefaults{Share: contracts.Resources{CPU: 0.25, Memory: 64 << 20}}}
	}
	admit := func(n int) {
		reqs := make([]store.AdmitRequest, n)
		for i := range reqs {
			j := storetest.NewJob("acme", now)
			j.ID = uuid.Must(uuid.NewV7()).String()
			if i%2 == 0 {
				j.Resources = &contracts.Resources{CPU: 0.5, Memory: 256 << 20}
			}
			reqs[i] = store.AdmitRequest{Job: j}
		}
		_, err := s.AdmitBatch(ctx, reqs)
		require.NoError(b, err)
	}
	// The jobs every worker runs throughout.
	for _, w := range ids {
		admit(busy)
		got, err := s.Claim(ctx, store.ClaimRequest{Now: now, Slots: map[string][]string{"test.kind": storetest.Slots(w, busy)}})
		require.NoError(b, err)
		require.Len(b, got, busy)
	}
	var took [2]time.Duration // count only, packing
	claims := [2]int{}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		admit(round)
		mode := i % 2
		r := store.ClaimRequest{Now: now, Slots: lists, Capacity: capacity}
		if mode == 1 {
			r.Resources = packs
		}
		b.StartTimer()
		start := time.Now()
		got, err := s.Claim(ctx, r)
		took[mode] += time.Since(start)
		b.StopTimer()
		require.NoError(b, err)
		require.Len(b, got, round)
		claims[mode] += len(got)
		// The round's jobs end, so that every round finds the same load.
		done := make([]string, len(got))
		for k, j := range got {
			done[k] = j.ID
		}
		out, err := s.UpdateEach(ctx, done, func(int, contracts.Job) (store.Change, error) {
			return store.Change{Now: now, State: contracts.StateSucceeded}, nil
		})
		require.NoError(b, err)
		for _, u := range out {
			require.NoError(b, u.Err)
		}
		b.StartTimer()
	}
	if claims[0] == 0 || claims[1] == 0 {
		return
	}
	count := float64(took[0].Nanoseconds()) / float64(claims[0])
	packed := float64(took[1].Nanoseconds()) / float64(claims[1])
	b.ReportMetric(count, "count-ns/job")
	b.ReportMetric(packed, "packed-ns/job")
	b.ReportMetric(packed/count, "packed/count")
	b.Logf("claim of %d jobs into %d workers: count only %.0f ns/job, packing by resources %.0f ns/job, ratio %.3f (target ≤ 1.10)",
		round, workers, count, packed, packed/count)
}
