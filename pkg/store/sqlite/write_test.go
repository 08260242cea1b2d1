package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/store"
)

func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "w.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// queueBehind blocks the write loop until release is closed, so the
// requests sent meanwhile form one batch.
func queueBehind(t *testing.T, s *Store) (release chan struct{}) {
	t.Helper()
	release = make(chan struct{})
	started := make(chan struct{})
	go func() {
		_ = s.write(context.Background(), store.WriteOther, "gate", func(*sql.Tx) error {
			close(started)
			<-release
			return nil
		})
	}()
	<-started
	return release
}

func scopes(t *testing.T, s *Store) map[string]int {
	t.Helper()
	rows, err := s.r.Query(`SELECT scope, active FROM counters WHERE scope LIKE 'test:%'`)
	require.NoError(t, err)
	out := map[string]int{}
	require.NoError(t, scanAll(rows, func(k string, n int) { out[k] = n }))
	return out
}

func TestBatchKeepsGoodRequestsWhenOneFailsMidWrite(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	release := queueBehind(t, s)

	insert := func(scope string, fail error) func(*sql.Tx) error {
		return func(tx *sql.Tx) error {
			if _, err := tx.Exec(`INSERT INTO counters (scope, active) VALUES (?, 1)`, scope); err != nil {
				return err
			}
			return fail
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var fail error
			if i == 3 {
				fail = errors.New("boom after writing")
			}
			errs[i] = s.write(context.Background(), store.WriteOther, "req", insert(fmt.Sprintf("test:%d", i), fail))
		}()
	}
	require.Eventually(t, func() bool { return len(s.writes.reqs) == 6 }, 5*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	for i, err := range errs {
		if i == 3 {
			require.ErrorContains(t, err, "boom after writing")
		} else {
			require.NoError(t, err)
		}
	}
	require.Equal(t, map[string]int{"test:0": 1, "test:1": 1, "test:2": 1, "test:4": 1, "test:5": 1}, scopes(t, s),
		"the failed request's write is undone, every other request commits")
}

func TestBatchSentinelErrorsDoNotAbortOthers(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	release := queueBehind(t, s)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = s.write(context.Background(), store.WriteOther, "req", func(tx *sql.Tx) error {
				if i%2 == 1 {
					return sql.ErrNoRows // a miss: nothing was written
				}
				_, err := tx.Exec(`INSERT INTO counters (scope, active) VALUES (?, 1)`, fmt.Sprintf("test:%d", i))
				return err
			})
		}()
	}
	require.Eventually(t, func() bool { return len(s.writes.reqs) == 4 }, 5*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	require.Equal(t, map[string]int{"test:0": 1, "test:2": 1}, scopes(t, s))
}

func TestCloseWithWritesInFlightNeverHangs(t *testing.T) {
	t.Parallel()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "w.db"))
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.write(context.Background(), store.WriteOther, "req", func(tx *sql.Tx) error {
				_, err := tx.Exec(`INSERT INTO counters (scope, active) VALUES (?, 1)`, fmt.Sprintf("test:%d", i))
				return err
			})
			if err != nil && !errors.Is(err, errClosed) {
				t.Errorf("write during close: %v", err)
			}
		}()
	}
	require.NoError(t, s.Close())
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a write hung after Close")
	}
}

func TestCancelledRequestIsSkipped(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	release := queueBehind(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- s.write(ctx, store.WriteOther, "req", func(tx *sql.Tx) error {
			_, err := tx.Exec(`INSERT INTO counters (scope, active) VALUES ('test:x', 1)`)
			return err
		})
	}()
	require.Eventually(t, func() bool { return len(s.writes.reqs) == 1 }, 5*time.Second, time.Millisecond)
	cancel()
	close(release)
	require.ErrorIs(t, <-errc, context.Canceled)
	require.Empty(t, scopes(t, s))
}

// TestUrgentLaneGoesFirst: with a full bulk lane waiting behind a long
// transaction, a heartbeat-class write is taken before every one of them.
func TestUrgentLaneGoesFirst(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	release := queueBehind(t, s)
	var (
		mu    sync.Mutex
		order []string
		wg    sync.WaitGroup
	)
	record := func(name string) func(*sql.Tx) error {
		return func(*sql.Tx) error {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, name)
			return nil
		}
	}
	const bulk = maxBatch + 50 // more than one transaction's worth
	for i := range bulk {
		wg.Go(func() {
			require.NoError(t, s.write(context.Background(), store.WriteOther, "bulk", record(fmt.Sprint("bulk-", i))))
		})
	}
	// Wait until the bulk lane is full and the rest are blocked sending.
	require.Eventually(t, func() bool { return len(s.writes.reqs) == maxBatch }, 5*time.Second, time.Millisecond)
	wg.Go(func() {
		require.NoError(t, s.writeUrgent(context.Background(), store.WriteOther, "urgent", record("urgent")))
	})
	require.Eventually(t, func() bool { return len(s.writes.urgent) == 1 }, 5*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	require.Len(t, order, bulk+1)
	require.Equal(t, "urgent", order[0], "the urgent write runs before the %d bulk writes waiting", bulk)
}

// The writer's clock counts each transaction and the requests it
// carried, its time busy (at least what a request held it) and, within
// it, the commits.
func TestWriterTimesCountBusyCommitAndRequests(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	before := s.WriterTimes()

	release := make(chan struct{})
	started := make(chan struct{})
	var held time.Duration
	gate := make(chan error, 1)
	go func() {
		gate <- s.write(context.Background(), store.WriteOther, "gate", func(*sql.Tx) error {
			begun := time.Now()
			close(started)
			<-release
			held = time.Since(begun)
			return nil
		})
	}()
	<-started
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			require.NoError(t, s.write(context.Background(), store.WriteOther, "insert", func(tx *sql.Tx) error {
				_, err := tx.Exec(`INSERT INTO counters (scope, active) VALUES (?, 1)`, fmt.Sprintf("test:times-%d", i))
				return err
			}))
		})
	}
	for len(s.writes.reqs) < 3 {
		runtime.Gosched() // the three queue behind the gate: one transaction
	}
	close(release)
	require.NoError(t, <-gate)
	wg.Wait()

	d := s.WriterTimes().Sub(before)
	require.Equal(t, uint64(2), d.Transactions, "the gate alone, then the three queued behind it together")
	require.Equal(t, uint64(4), d.Requests)
	require.GreaterOrEqual(t, d.Busy, held, "busy covers the time a request held the writer")
	require.Positive(t, d.Commit)
	require.LessOrEqual(t, d.Commit+d.Yield, d.Busy)
}
