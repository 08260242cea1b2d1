package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// TestGetDoesNotWaitForTheWriter: a single-job read (GET /v1/jobs/{id},
// an event stream's poll) is answered while a write transaction holds the
// write connection, so a flood of reads never queues ahead of the writes.
// The write is released only once the reads have answered; a read that
// lands in the write loop's queue instead fails the test.
func TestGetDoesNotWaitForTheWriter(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ctx := context.Background()
	j, _, err := s.Admit(ctx, storetest.NewJob("acme", time.Now()), store.Caps{})
	require.NoError(t, err)

	release := queueBehind(t, s) // the write loop now holds a transaction
	defer close(release)
	type result struct {
		job contracts.Job
		err error
	}
	read := func(id string) result {
		done := make(chan result, 1)
		go func() {
			j, err := s.Get(ctx, id)
			done <- result{j, err}
		}()
		for {
			select {
			case r := <-done:
				return r
			default:
			}
			if len(s.writes.reqs) > 0 {
				t.Fatal("the read was queued behind the held write transaction")
			}
			runtime.Gosched()
		}
	}
	got := read(j.ID)
	require.NoError(t, got.err)
	require.Equal(t, j.ID, got.job.ID)
	require.ErrorIs(t, read("no-such-job").err, store.ErrNotFound)
}

// TestGetSeesEveryCommittedWrite: a read from the read pool sees a write
// as soon as the write returned (WAL: every read transaction starts from
// the latest commit).
func TestGetSeesEveryCommittedWrite(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ctx := context.Background()
	j, _, err := s.Admit(ctx, storetest.NewJob("acme", time.Now()), store.Caps{})
	require.NoError(t, err)
	for i := range 50 {
		worker := "w1"
		until := time.Now().Add(time.Minute)
		_, err := s.Transition(ctx, store.Expect{ID: j.ID, State: contracts.StatePending, Claim: int64(i)},
			store.Change{Now: time.Now(), State: contracts.StatePending, Claim: int64(i + 1), Worker: &worker, ClaimUntil: &until})
		require.NoError(t, err)
		got, err := s.Get(ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, int64(i+1), got.Claim)
	}
}

// getOnWriter is Get as it was: the read queued on the write connection,
// in line with the writes. Benchmarks compare it with Get.
func (s *Store) getOnWriter(ctx context.Context, id string) (contracts.Job, error) {
	var j contracts.Job
	err := s.onWriter(ctx, store.WriteOther, "get job "+id, s.writes.reqs, true, func(tx *sql.Tx) error {
		var err error
		if j, err = s.jobIn(ctx, tx, id); err != nil {
			return err
		}
		return s.countRunning(ctx, tx, &j)
	})
	return j, err
}

// BenchmarkTransitionWhileReading measures writes (one job's transitions,
// each its own commit) while 16 goroutines read single jobs, as event
// streams' polls and GET /v1/jobs/{id} do: none, 33 reads/s in all (1,000
// streams polling every 30 s), 500 (every 2 s), 2,000 (ten tenants at
// their default read rate), or as fast as they can;
// the reads on the
// write connection (as before) or on the read pool (Get). It reports the
// writes' and the reads' rates.
func BenchmarkTransitionWhileReading(b *testing.B) {
	for _, path := range []struct {
		name string
		get  func(*Store, context.Context, string) (contracts.Job, error)
	}{{"writer", (*Store).getOnWriter}, {"pool", (*Store).Get}} {
		for _, rate := range []int{0, 33, 500, 2000, -1} {
			name := fmt.Sprintf("%s/reads=%d", path.name, rate)
			if rate < 0 {
				name = path.name + "/reads=max"
			}
			b.Run(name, func(b *testing.B) { benchTransitionWhileReading(b, path.get, rate) })
		}
	}
}

func benchTransitionWhileReading(b *testing.B, get func(*Store, context.Context, string) (contracts.Job, error), rate int) {
	s := openTest(b, filepath.Join(b.TempDir(), "sluice.db"))
	ctx := context.Background()
	now := time.Now()
	ids := admitJobs(b, s, 1000, now)
	j, _, err := s.Admit(ctx, storetest.NewJob("acme", now), store.Caps{})
	require.NoError(b, err)
	stop := make(chan struct{})
	var (
		reads atomic.Int64
		wg    sync.WaitGroup
	)
	readers := 16
	if rate == 0 {
		readers = 0
	}
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var tick <-chan time.Time
			if rate > 0 {
				t := time.NewTicker(time.Second * time.Duration(readers) / time.Duration(rate))
				defer t.Stop()
				tick = t.C
			}
			for i := r; ; i++ {
				if tick != nil {
					select {
					case <-stop:
						return
					case <-tick:
					}
				} else {
					select {
					case <-stop:
						return
					default:
					}
				}
				if _, err := get(s, ctx, ids[i%len(ids)]); err != nil {
					b.Error(err)
					return
				}
				reads.Add(1)
			}
		}()
	}
	worker := "w1"
	b.ResetTimer()
	for i := range b.N {
		until := now.Add(time.Duration(i) * time.Second)
		_, err := s.Transition(ctx,
			store.Expect{ID: j.ID, State: contracts.StatePending, Claim: int64(i)},
			store.Change{Now: now, State: contracts.StatePending, Claim: int64(i + 1), Worker: &worker, ClaimUntil: &until})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	close(stop)
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
	b.ReportMetric(float64(reads.Load())/b.Elapsed().Seconds(), "reads/s")
}

// BenchmarkGet measures one single-job read with nothing else running.
func BenchmarkGet(b *testing.B) {
	s := openTest(b, filepath.Join(b.TempDir(), "sluice.db"))
	ids := admitJobs(b, s, 1000, time.Now())
	ctx := context.Background()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if _, err := s.Get(ctx, ids[i%len(ids)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
