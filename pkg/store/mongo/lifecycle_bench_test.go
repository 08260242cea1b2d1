package mongo

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// BenchmarkLifecycle measures the driver's share of a job's life on
// FerretDB, as the scheduler drives it: claims of 64 jobs straight into
// running and their results applied in one UpdateEach, over a backlog of
// 1,000 pending jobs (FerretDB scans whole tables on non-_id filters:
// the backlog stays small), for payloads of several sizes. It reports
// the time per job (us/job) and apart from it the admission's
// (admit-us/job): what a document carrying its payload through every
// update costs, against which a write-once body document would be
// judged (see docs/performance.md).
func BenchmarkLifecycle(b *testing.B) {
	fresh := freshDatabase(ferretServer(b))
	for _, size := range []struct {
		name  string
		bytes int
	}{{"payload=0", 0}, {"payload=1KiB", 1 << 10}, {"payload=16KiB", 16 << 10}} {
		b.Run(size.name, func(b *testing.B) { benchLifecycle(b, fresh(), benchPayload(size.bytes)) })
	}
}

// benchLifecycle is BenchmarkLifecycle with jobs of payload.
func benchLifecycle(b *testing.B, uri string, payload json.RawMessage) {
	const round, backlog = 64, 1000
	s := open(b, uri)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	var admitting time.Duration
	admitN := func(n int) {
		reqs := make([]store.AdmitRequest, n)
		for i := range reqs {
			j := storetest.NewJob("acme", now)
			j.ID = uuid.Must(uuid.NewV7()).String()
			j.Payload = payload
			reqs[i] = store.AdmitRequest{Job: j}
		}
		start := time.Now()
		_, err := s.AdmitBatch(ctx, reqs)
		require.NoError(b, err)
		admitting += time.Since(start)
	}
	admitN(backlog)
	admitted := backlog
	b.ResetTimer()
	done := 0
	for done < b.N {
		b.StopTimer()
		admitN(round)
		admitted += round
		b.StartTimer()
		claimed, err := s.Claim(ctx, store.ClaimRequest{Now: now, Slots: map[string][]string{"test.kind": storetest.Slots("w1", round)}})
		require.NoError(b, err)
		require.Len(b, claimed, round)
		ids := make([]string, len(claimed))
		for i, j := range claimed {
			ids[i] = j.ID
		}
		out, err := s.UpdateEach(ctx, ids, func(int, contracts.Job) (store.Change, error) {
			return store.Change{Now: now, State: contracts.StateSucceeded}, nil
		})
		require.NoError(b, err)
		for _, u := range out {
			require.NoError(b, u.Err)
		}
		done += len(claimed)
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(done), "us/job")
	b.ReportMetric(float64(admitting.Microseconds())/float64(admitted), "admit-us/job")
}

// benchPayload is a JSON payload of about n bytes (none for 0).
func benchPayload(n int) json.RawMessage {
	if n == 0 {
		return nil
	}
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	buf := make([]byte, 0, n)
	buf = append(buf, `{"data":"`...)
	for i := 0; len(buf) < n-2; i++ {
		buf = append(buf, letters[(i*7+i/61)%len(letters)])
	}
	return append(buf, `"}`...)
}
