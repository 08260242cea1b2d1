package sqlite

import (
	"context"
	"encoding/json"
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
// scheduler drives it under load: claims of 256 jobs straight into
// running (the worker's accept writes nothing, and a lease is renewed
// lazily: no heartbeat write), and their results applied in messages of 64 at once
// (group-committed), over a backlog of 20,000 pending jobs. It reports the
// writer's time per job, fsyncs included (us/job), and apart from it the
// time the admission of those jobs took (admit-us/job), for payloads of
// several sizes: users' payloads are not empty, and every write of a job
// that carries its payload along pays for it.
func BenchmarkLifecycle(b *testing.B) {
	for _, size := range []struct {
		name  string
		bytes int
	}{{"payload=0", 0}, {"payload=1KiB", 1 << 10}, {"payload=16KiB", 16 << 10}} {
		b.Run(size.name, func(b *testing.B) { benchLifecycle(b, benchPayload(size.bytes)) })
	}
}

// benchLifecycle is BenchmarkLifecycle with jobs of payload.
func benchLifecycle(b *testing.B, payload json.RawMessage) {
	const round = 256
	s := openTest(b, filepath.Join(b.TempDir(), "sluice.db"))
	ctx := context.Background()
	now := time.Now()
	var admitting time.Duration
	admitN := func(n int) {
		start := time.Now()
		admitJobsOf(b, s, n, now, payload)
		admitting += time.Since(start)
	}
	admitN(20000)
	admitted := 20000
	b.ResetTimer()
	done := 0
	for done < b.N {
		b.StopTimer()
		admitN(round)
		admitted += round
		b.StartTimer()
		claimed, err := s.Claim(ctx, store.ClaimRequest{Now: now, Slots: map[string][]string{"test.kind": storetest.Slots("w1", round)}})
		require.NoError(b, err)
		leases := make([]contracts.Lease, len(claimed))
		for i, j := range claimed {
			leases[i] = contracts.Lease{JobID: j.ID, Claim: j.Claim}
		}
		require.Len(b, claimed, round)
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
	b.ReportMetric(float64(admitting.Microseconds())/float64(admitted), "admit-us/job")
}

// distinct is payload made the i-th job's own: its first letters are i's
// digits (users' payloads differ from job to job, and a store may treat a
// column that holds one value in every row of a batch apart). Nil stays
// nil.
func distinct(payload json.RawMessage, i int) json.RawMessage {
	if payload == nil {
		return nil
	}
	const at = len(`{"data":"`)
	digits := strconv.Itoa(i)
	if len(payload) < at+len(digits)+2 {
		return payload
	}
	out := append(json.RawMessage(nil), payload...)
	copy(out[at:], digits)
	return out
}

// benchPayload is a JSON payload of about n bytes (none for 0): an object
// with one string of varied letters.
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
	return admitJobsOf(b, s, n, now, storetest.NewJob("acme", now).Payload)
}

// admitJobsOf is admitJobs of jobs with payload.
func admitJobsOf(b *testing.B, s *Store, n int, now time.Time, payload json.RawMessage) []string {
	b.Helper()
	var ids []string
	for n > 0 {
		k := min(n, 1000)
		reqs := make([]store.AdmitRequest, k)
		for i := range reqs {
			j := storetest.NewJob("acme", now)
			j.ID = uuid.Must(uuid.NewV7()).String() // time-ordered, as the gateway makes them
			j.Payload = distinct(payload, len(ids))
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
