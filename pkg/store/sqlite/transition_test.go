package sqlite

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// runningJobs admits n jobs of tenant acme and claims them all onto
// worker w1; it returns them running.
func runningJobs(t *testing.T, s *Store, n int, now time.Time) []contracts.Job {
	t.Helper()
	ctx := t.Context()
	for range n {
		_, _, err := s.Admit(ctx, storetest.NewJob("acme", now), store.Caps{})
		require.NoError(t, err)
	}
	jobs, err := s.Claim(ctx, store.ClaimRequest{Now: now, Slots: map[string][]string{"test.kind": storetest.Slots("w1", n)}})
	require.NoError(t, err)
	require.Len(t, jobs, n)
	return jobs
}

// TestBatchUpdateConstraintFailureRollsBackOnlyItsRequest: a job's UPDATE
// runs OR ROLLBACK, so a constraint it fails ends the whole group-commit
// transaction inside SQLite. No rule moves a job so that a store
// constraint fails (a job's key never changes, and a job that ends never
// becomes active again), so the test adds a unique index on two results.
// Of three requests committed together, the middle one writes its first
// job, then fails on its second: it gets its error and keeps neither
// write (the last request then writes the same result as its first job
// did, and succeeds); the requests before and after it commit, each
// once, with their rows and the counts of jobs by state right.
func TestBatchUpdateConstraintFailureRollsBackOnlyItsRequest(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	ctx := context.Background()
	now := time.Now()
	jobs := runningJobs(t, s, 5, now)
	_, err := s.w.ExecContext(ctx, `CREATE UNIQUE INDEX test_unique_results ON jobs (result) WHERE result IN ('"one"', '"two"')`)
	require.NoError(t, err)
	before := s.WriteCounts()

	succeed := func(results ...string) store.DecideEach {
		return func(i int, _ contracts.Job) (store.Change, error) {
			return store.Change{Now: now, State: contracts.StateSucceeded, Result: json.RawMessage(results[i])}, nil
		}
	}
	last := store.Expect{ID: jobs[4].ID, State: contracts.StateRunning, Claim: jobs[4].Claim}
	lastCh := store.Change{Now: now, State: contracts.StateSucceeded, Result: json.RawMessage(`"two"`)}
	// Transition prepares its statement on the writer before it queues:
	// prepared now, it queues behind the gate below.
	query, _, err := buildUpdate(last, lastCh, 0)
	require.NoError(t, err)
	_, err = s.wc.get(ctx, query)
	require.NoError(t, err)

	release := queueBehind(t, s)
	var (
		wg                        sync.WaitGroup
		firstErr, midErr, lastErr error
	)
	// Urgent lane, in this order: the first request, then the failing one.
	wg.Go(func() { _, firstErr = s.UpdateEach(ctx, []string{jobs[0].ID, jobs[1].ID}, succeed(`"one"`, `"ok"`)) })
	require.Eventually(t, func() bool { return len(s.writes.urgent) == 1 }, 5*time.Second, time.Millisecond)
	wg.Go(func() { _, midErr = s.UpdateEach(ctx, []string{jobs[2].ID, jobs[3].ID}, succeed(`"two"`, `"one"`)) })
	require.Eventually(t, func() bool { return len(s.writes.urgent) == 2 }, 5*time.Second, time.Millisecond)
	// The other lane, after them in the same transaction.
	wg.Go(func() { _, lastErr = s.Transition(ctx, last, lastCh) })
	require.Eventually(t, func() bool { return len(s.writes.reqs) == 1 }, 5*time.Second, time.Millisecond)
	close(release)
	wg.Wait()

	require.NoError(t, firstErr)
	require.ErrorContains(t, midErr, "UNIQUE constraint failed")
	require.NoError(t, lastErr, "the failed request's first write was rolled back")
	for i, want := range []contracts.JobState{contracts.StateSucceeded, contracts.StateSucceeded,
		contracts.StateRunning, contracts.StateRunning, contracts.StateSucceeded} {
		j, err := s.Get(ctx, jobs[i].ID)
		require.NoError(t, err)
		require.Equal(t, want, j.State, "job %d", i)
		if want == contracts.StateRunning {
			require.Empty(t, j.Result, "job %d", i)
		}
	}

	after := s.WriteCounts()
	require.Equal(t, uint64(2), after.Rows[store.WriteUpdate]-before.Rows[store.WriteUpdate], "the first request's two rows, once")
	require.Equal(t, uint64(1), after.Rows[store.WriteTransition]-before.Rows[store.WriteTransition])
	require.Equal(t, uint64(1), after.Writes[store.WriteUpdate]-before.Writes[store.WriteUpdate])
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, st.ByState[contracts.StateSucceeded])
	require.Equal(t, 2, st.ByState[contracts.StateRunning])
	drift, err := s.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, drift)
}
