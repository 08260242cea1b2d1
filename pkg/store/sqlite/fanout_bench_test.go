package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// BenchmarkAdmitFanout measures the admission of one parent of 100,000
// items (window 1,000): the store's share of a large fan-out's submit.
func BenchmarkAdmitFanout(b *testing.B) {
	s := openTest(b, filepath.Join(b.TempDir(), "sluice.db"))
	ctx := context.Background()
	items := make([]json.RawMessage, 100_000)
	for i := range items {
		items[i] = json.RawMessage(`null`)
	}
	b.ResetTimer()
	for range b.N {
		p := storetest.NewJob("acme", time.Now())
		p.ID = uuid.Must(uuid.NewV7()).String()
		p.Payload, p.Concurrency = nil, 1000
		res, err := s.AdmitBatch(ctx, []store.AdmitRequest{{Job: p, Items: items}})
		require.NoError(b, err)
		require.Equal(b, store.Admitted, res[0].Admission)
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/fan-out")
}

// BenchmarkAdmitBatch measures AdmitBatch of 1,000 plain jobs submitted
// at one time, as the gateway stamps a batch: the store's share of a batch
// submit.
func BenchmarkAdmitBatch(b *testing.B) {
	s := openTest(b, filepath.Join(b.TempDir(), "sluice.db"))
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		reqs := make([]store.AdmitRequest, 1000)
		now := time.Now()
		for i := range reqs {
			j := storetest.NewJob("acme", now)
			j.ID = uuid.Must(uuid.NewV7()).String()
			reqs[i] = store.AdmitRequest{Job: j}
		}
		_, err := s.AdmitBatch(ctx, reqs)
		require.NoError(b, err)
	}
	b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkAdmitItems measures the admission of one request of n items (a
// fan-out of n-1 items, window 1): what SLUICE_GATEWAY_MAX_ITEMS_PER_REQUEST
// bounds. Up to the store's chunk (2,000 children) it is one write
// transaction, the time the writer is held; above, the children are
// staged a chunk per transaction (see stage.go).
func BenchmarkAdmitItems(b *testing.B) {
	for _, n := range []int{1000, 2000, 5000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s := openTest(b, filepath.Join(b.TempDir(), "sluice.db"))
			ctx := context.Background()
			items := make([]json.RawMessage, n-1)
			for i := range items {
				items[i] = json.RawMessage(fmt.Sprint(i))
			}
			b.ResetTimer()
			for range b.N {
				p := storetest.NewJob("acme", time.Now())
				p.ID = uuid.Must(uuid.NewV7()).String()
				p.Payload, p.Concurrency = nil, 1
				res, err := s.AdmitBatch(ctx, []store.AdmitRequest{{Job: p, Items: items}})
				require.NoError(b, err)
				require.Equal(b, store.Admitted, res[0].Admission)
			}
			ms := float64(b.Elapsed().Microseconds()) / 1000 / float64(b.N)
			b.ReportMetric(ms, "ms/request")
			txns := 1
			if n-1 > defaultFanoutChunk {
				txns += (n - 1 + defaultFanoutChunk - 1) / defaultFanoutChunk
			}
			fmt.Printf("store: one request of %d items admitted in %.1f ms (%d write transactions)\n", n, ms, txns)
		})
	}
}
