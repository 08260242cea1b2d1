package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// BenchmarkStartHeartbeat measures the store's share of a worker's start
// heartbeat as the burn-down sends it: the leases of one offer of 256
// jobs a claim just wrote running on that worker, confirmed from the read
// pool (no lease needs a write), right after the claim's write, so the
// read finds its pages changed as it does under load. It reports the
// read's time per lease (us/lease); the claims are not timed.
func BenchmarkStartHeartbeat(b *testing.B) {
	const offer = 256
	s := openTest(b, filepath.Join(b.TempDir(), "sluice.db"))
	ctx := context.Background()
	now := time.Now()
	admitJobs(b, s, 20_000, now)
	var leases int
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		claimed, err := s.Claim(ctx, store.ClaimRequest{Now: now, Slots: map[string][]string{"test.kind": storetest.Slots("w1", offer)}})
		require.NoError(b, err)
		if len(claimed) == 0 {
			admitJobs(b, s, 20_000, now)
			b.StartTimer()
			continue
		}
		ls := make([]contracts.Lease, len(claimed))
		for i, j := range claimed {
			ls[i] = contracts.Lease{JobID: j.ID, Claim: j.Claim}
		}
		b.StartTimer()
		out, err := s.Heartbeat(ctx, "w1", ls, now, time.Minute)
		require.NoError(b, err)
		require.Len(b, out.Kept, len(ls))
		leases += len(ls)
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(max(leases, 1)), "us/lease")
}
