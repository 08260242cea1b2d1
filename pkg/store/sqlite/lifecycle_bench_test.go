package sqlite

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// resultsPerMessage is how many results BenchmarkLifecycle applies with
// one UpdateEach, as the scheduler applies a message of results.
const resultsPerMessage = 64

// BenchmarkLifecycle measures the store's share of one job's life as the
// scheduler drives it under load: claims of 256 jobs, one start heartbeat
// promoting them, and their results applied in messages of 64 at once
// (group-committed), over a backlog of 20,000 pending jobs. It reports the
// writer's time per job, fsyncs included.
func BenchmarkLifecycle(b *testing.B) {
	const round = 256
	s := openTest(b, filepath.Join(b.TempDir(), "sluice.db"))
	ctx := context.Background()
	now := time.Now()
	admitN := func(n int) { admitJobs(b, s, n, now) }
	admitN(20000)
	b.ResetTimer()
	done := 0
	for done < b.N {
		b.StopTimer()
		admitN(round)
		b.StartTimer()
		claimed, err := s.Claim(ctx, store.ClaimRequest{Now: now, Slots: map[string][]string{"test.kind": storetest.Slots("w1", round)}})
		require.NoError(b, err)
		leases := make([]contracts.Lease, len(claimed))
		for i, j := range claimed {
			leases[i] = contracts.Lease{JobID: j.ID, Claim: j.Claim}
		}
		out, err := s.Heartbeat(ctx, "w1", leases, now, 0)
		require.NoError(b, err)
		require.Len(b, out.Promoted, len(leases))
		var wg sync.WaitGroup
		for chunk := range slices.Chunk(leases, resultsPerMessage) {
			wg.Go(func() {
				ids := make([]string, len(chunk))
				for i, l := range chunk {
					ids[i] = l.JobID
				}
				out, err := s.UpdateEach(ctx, ids, func(int, contracts.Job) (store.Change, error) {
					return store.Change{Now: now, State: contracts.StateSucceeded}, nil
				})
				if err != nil {
					b.Error(err)
					return
				}
				for _, u := range out {
					if u.Err != nil {
						b.Error(u.Err)
					}
				}
			})
		}
		wg.Wait()
		done += len(claimed)
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(done), "us/job")
}

// BenchmarkAdmitConcurrent measures single admissions from 64 goroutines at
// once, as 64 HTTP clients drive them: the store's share of single-submit
// admission, group commit and fsync included.
func BenchmarkAdmitConcurrent(b *testing.B) {
	const clients = 64
	s := openTest(b, filepath.Join(b.TempDir(), "sluice.db"))
	ctx := context.Background()
	caps := store.Caps{Global: 1 << 30, Tenant: 1 << 30}
	var next atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				j := storetest.NewJob("acme", time.Now())
				j.ID = uuid.Must(uuid.NewV7()).String()
				if _, adm, err := s.Admit(ctx, j, caps); err != nil || adm != store.Admitted {
					b.Error(adm, err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "admits/s")
}

// admitJobs admits n pending jobs of tenant acme created at now, in
// batches of 1,000, and returns their ids in admission order.
func admitJobs(b *testing.B, s *Store, n int, now time.Time) []string {
	b.Helper()
	var ids []string
	for n > 0 {
		k := min(n, 1000)
		reqs := make([]store.AdmitRequest, k)
		for i := range reqs {
			j := storetest.NewJob("acme", now)
			j.ID = uuid.Must(uuid.NewV7()).String() // time-ordered, as the gateway makes them
			reqs[i] = store.AdmitRequest{Job: j}
			ids = append(ids, j.ID)
		}
		_, err := s.AdmitBatch(context.Background(), reqs)
		require.NoError(b, err)
		n -= k
	}
	return ids
}

// BenchmarkRenewSingleLeases measures heartbeats of one lease each from
// 1,000 workers at once, as a swarm of single-slot workers sends them:
// the store's share of keeping their runs alive.
func BenchmarkRenewSingleLeases(b *testing.B) {
	const workers = 1000
	s := openTest(b, filepath.Join(b.TempDir(), "sluice.db"))
	ctx := context.Background()
	now := time.Now()
	admitJobs(b, s, workers, now)
	claimed, err := s.Claim(ctx, store.ClaimRequest{Now: now, Slots: map[string][]string{"test.kind": storetest.Slots("w1", workers)}})
	require.NoError(b, err)
	leases := make([]contracts.Lease, len(claimed))
	for i, j := range claimed {
		leases[i] = contracts.Lease{JobID: j.ID, Claim: j.Claim}
		_, err := s.Heartbeat(ctx, workerName(i), leases[i:i+1], now, 0)
		require.NoError(b, err)
	}
	var next atomic.Int64
	b.ResetTimer()
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				k := (int(i)*64 + w) % len(leases)
				out, err := s.Heartbeat(ctx, workerName(k), leases[k:k+1], now.Add(time.Second), 0)
				if err != nil || len(out.Renewed) != 1 {
					b.Errorf("renew %d: %v %+v", k, err, out)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "renewals/s")
}

// workerName is the name of the i-th simulated worker.
func workerName(i int) string { return "w" + strconv.Itoa(i) }
