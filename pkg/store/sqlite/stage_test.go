package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// TestConformanceStaged runs the suite on a store that stages every
// fan-out of more than two items, two children per write transaction, and
// admits batches of plain jobs two per transaction.
func TestConformanceStaged(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := Open(context.Background(), filepath.Join(t.TempDir(), "sluice.db"), WithFanoutChunk(2), WithBatchChunk(2))
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		return skewable{s}
	})
}

// TestStagedFanoutNotAdmittedLeavesNothing: the staged children of a
// fan-out the caps reject, or that joins another by its key, are deleted
// again; an admitted one has all its children, the first window released.
func TestStagedFanoutNotAdmittedLeavesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "sluice.db"), WithFanoutChunk(3))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	items := make([]json.RawMessage, 10)
	for i := range items {
		items[i] = json.RawMessage(`{"i":1}`)
	}
	parent := func(key string) contracts.Job {
		p := storetest.NewJob("acme", time.Now())
		p.Payload, p.Concurrency, p.Key = nil, 2, key
		return p
	}
	rows := func() int {
		var n int
		require.NoError(t, s.r.QueryRowContext(ctx, `SELECT count(*) FROM jobs`).Scan(&n))
		return n
	}
	res, err := s.AdmitBatch(ctx, []store.AdmitRequest{{Job: parent(""), Caps: store.Caps{TenantItems: 10}, Items: items}})
	require.NoError(t, err)
	require.Equal(t, store.RejectedTenantItems, res[0].Admission)
	require.Zero(t, rows(), "the rejected fan-out's children are gone")

	first := parent("k")
	res, err = s.AdmitBatch(ctx, []store.AdmitRequest{{Job: first, Items: items}, {Job: parent("k"), Items: items}})
	require.NoError(t, err)
	require.Equal(t, []store.Admission{store.Admitted, store.Joined}, []store.Admission{res[0].Admission, res[1].Admission})
	require.Equal(t, 11, rows(), "one parent and its ten children; the joined one left nothing")
	got, err := s.Claim(ctx, store.ClaimRequest{Now: time.Now(), Slots: map[string][]string{"test.kind": storetest.Slots("w1", 10)}})
	require.NoError(t, err)
	require.Len(t, got, 2, "the window is released, the rest held")
}

// TestStagedFanoutCrashBetweenChunks: a process that dies while it stages
// a fan-out (here: its store closes between two chunks) leaves children
// in the file and no parent. The store opened again takes them back once
// the staged admission is older than WithAbandonAfter, and the counts of
// jobs by state with them; one opened sooner leaves them to Reconcile.
func TestStagedFanoutCrashBetweenChunks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "sluice.db")
	s, err := Open(ctx, path, WithFanoutChunk(2))
	require.NoError(t, err)
	items := make([]json.RawMessage, 20_000)
	for i := range items {
		items[i] = json.RawMessage(`1`)
	}
	p := storetest.NewJob("acme", time.Now())
	p.Payload, p.Concurrency = nil, 2
	rows := func(s *Store) int {
		var n int
		require.NoError(t, s.r.QueryRowContext(ctx, `SELECT count(*) FROM jobs`).Scan(&n))
		return n
	}
	admitted := make(chan error, 1)
	go func() {
		_, err := s.AdmitBatch(ctx, []store.AdmitRequest{{Job: p, Items: items}})
		admitted <- err
	}()
	for rows(s) < 10 {
		runtime.Gosched()
	}
	require.NoError(t, s.Close()) // the process dies: nothing more is written
	require.Error(t, <-admitted)

	s, err = Open(ctx, path)
	require.NoError(t, err)
	left := rows(s)
	require.NotZero(t, left, "opened at once: the staging may still be alive")
	_, err = s.Get(ctx, p.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "the parent never became visible")
	require.NoError(t, s.Close())

	s, err = Open(ctx, path, WithAbandonAfter(time.Nanosecond))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.Zero(t, rows(s), "the abandoned children are gone")
	c, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, c.ByState[contracts.StatePending], "and their counts")
	drift, err := s.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, drift)
}

// TestStagedFanoutReconcileTakesBackAbandoned: Reconcile takes back a
// staged admission abandoned while the store stays open; the stager, if
// it comes back, fails its admission instead of admitting a parent whose
// children were taken.
func TestStagedFanoutReconcileTakesBackAbandoned(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "sluice.db"), WithFanoutChunk(3), WithAbandonAfter(time.Nanosecond))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	p := storetest.NewJob("acme", time.Now())
	p.Payload, p.Concurrency = nil, 2
	items := make([]json.RawMessage, 10)
	for i := range items {
		items[i] = json.RawMessage(`1`)
	}
	in, err := newAdmitInput(store.AdmitRequest{Job: p, Items: items})
	require.NoError(t, err)
	require.NoError(t, s.stage(ctx, &in)) // then the stager stalls
	_, err = s.Reconcile(ctx)
	require.NoError(t, err)
	var n int
	require.NoError(t, s.r.QueryRowContext(ctx, `SELECT count(*) FROM jobs`).Scan(&n))
	require.Zero(t, n)

	err = s.write(ctx, store.WriteAdmit, "admit", func(tx *sql.Tx) error {
		_, err := s.admitAll(ctx, tx, []admitInput{in})
		return err
	})
	require.ErrorIs(t, err, errStagingLost)
	_, err = s.Get(ctx, p.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// TestLargePlainBatchAdmittedInChunks: a batch of more plain jobs than a
// chunk is admitted a chunk per write transaction (other writes go in
// between), and still as one batch: each job sees those before it, their
// slots and their dedup keys, across chunks.
func TestLargePlainBatchAdmittedInChunks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "sluice.db"), WithBatchChunk(3))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	caps := store.Caps{Tenant: 7}
	reqs := make([]store.AdmitRequest, 10)
	for i := range reqs {
		j := storetest.NewJob("acme", time.Now())
		if i == 1 || i == 5 {
			j.Key = "same"
		}
		reqs[i] = store.AdmitRequest{Job: j, Caps: caps}
	}
	before := s.WriteCounts().Commits
	res, err := s.AdmitBatch(ctx, reqs)
	require.NoError(t, err)
	require.Len(t, res, 10)
	got := make([]store.Admission, len(res))
	for i, r := range res {
		got[i] = r.Admission
	}
	A, J, R := store.Admitted, store.Joined, store.RejectedTenant
	require.Equal(t, []store.Admission{A, A, A, A, A, J, A, A, R, R}, got)
	require.Equal(t, reqs[1].Job.ID, res[5].Job.ID, "the key joins across chunks")
	require.GreaterOrEqual(t, s.WriteCounts().Commits-before, uint64(4), "ten jobs, three per transaction")
	c, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 7, c.TenantActive["acme"])
}
