package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

var writeTests = []test{
	{"WritesCountedByOperation", testWritesCounted},
	{"RowsCountedExactly", testRowsCounted},
}

// writeCounts reads s's write counts; a driver must count its writes.
func writeCounts(t *testing.T, s store.Store) store.WriteCounts {
	t.Helper()
	wc, ok := s.(store.WriteCounter)
	require.True(t, ok, "%T does not count its writes (store.WriteCounter)", s)
	return wc.WriteCounts()
}

// requireWrote checks that what s wrote since before counts under op
// alone, at least once, in at least one transaction, and returns the
// counts now.
func requireWrote(t *testing.T, s store.Store, before store.WriteCounts, op store.WriteOp) store.WriteCounts {
	t.Helper()
	now := writeCounts(t, s)
	d := now.Sub(before)
	for _, o := range store.WriteOps() {
		if o == op {
			require.NotZero(t, d.Writes[o], "no write counted as %s", o)
			continue
		}
		require.Zero(t, d.Writes[o], "a write counted as %s during %s", o, op)
	}
	require.NotZero(t, d.Commits, "no transaction counted during %s", op)
	return now
}

// testWritesCounted follows one job through its life (admitted, claimed
// into running, heartbeated, its result applied) and checks that each step's
// writes count under its operation, and that reads count nothing.
func testWritesCounted(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := writeCounts(t, s)

	j := admitNew(t, s, "acme", base)
	c = requireWrote(t, s, c, store.WriteAdmit)

	claimed := claimN(t, s, 1, at(time.Second))
	require.Len(t, claimed, 1)
	c = requireWrote(t, s, c, store.WriteClaim)

	out, err := s.Heartbeat(ctx, "w1", []contracts.Lease{leaseOf(claimed[0])}, at(2*time.Second), 0)
	require.NoError(t, err)
	require.Len(t, out.Renewed, 1, "claimed into running: the heartbeat renews")
	c = requireWrote(t, s, c, store.WriteHeartbeat)

	res, err := s.UpdateEach(ctx, []string{j.ID}, func(int, contracts.Job) (store.Change, error) {
		return store.Change{Now: at(3 * time.Second), State: contracts.StateSucceeded}, nil
	})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	c = requireWrote(t, s, c, store.WriteUpdate)

	cancelled := admitNew(t, s, "acme", base)
	c = requireWrote(t, s, c, store.WriteAdmit)
	_, err = s.Transition(ctx, store.Expect{ID: cancelled.ID, State: contracts.StatePending, Claim: cancelled.Claim},
		store.Change{Now: at(4 * time.Second), State: contracts.StateCancelled})
	require.NoError(t, err)
	c = requireWrote(t, s, c, store.WriteTransition)

	// Reads write nothing.
	get(t, s, j.ID)
	stats(t, s)
	list(t, s, store.Query{Tenant: "acme"})
	require.Equal(t, c, writeCounts(t, s))
}

// requireRows checks that what s wrote since before is exactly n job
// rows, all under op (none under any other operation), and returns the
// counts now.
func requireRows(t *testing.T, s store.Store, before store.WriteCounts, op store.WriteOp, n uint64, step string) store.WriteCounts {
	t.Helper()
	now := writeCounts(t, s)
	d := now.Sub(before)
	for _, o := range store.WriteOps() {
		want := uint64(0)
		if o == op {
			want = n
		}
		require.Equal(t, want, d.Rows[o], "%s: job rows counted as %s", step, o)
	}
	return now
}

// requireNothingWritten checks that s wrote nothing since before: no
// write, no row, no transaction.
func requireNothingWritten(t *testing.T, s store.Store, before store.WriteCounts, step string) {
	t.Helper()
	require.Equal(t, before, writeCounts(t, s), "%s wrote", step)
}

// testRowsCounted checks the job rows each simple write counts: one per
// job it wrote, whatever the number of requests, and none for a write
// that changed nothing (a lease kept, a compare-and-set that missed).
func testRowsCounted(t *testing.T, s store.Store) {
	ctx := t.Context()
	c := writeCounts(t, s)

	admitNew(t, s, "acme", base)
	c = requireRows(t, s, c, store.WriteAdmit, 1, "admit of one job")
	res, err := s.AdmitBatch(ctx, []store.AdmitRequest{{Job: NewJob("acme", base)}, {Job: NewJob("acme", base)}})
	require.NoError(t, err)
	for _, r := range res {
		require.Equal(t, store.Admitted, r.Admission)
	}
	c = requireRows(t, s, c, store.WriteAdmit, 2, "batch admit of two jobs")

	claimed := claimN(t, s, 3, at(time.Second))
	require.Len(t, claimed, 3)
	c = requireRows(t, s, c, store.WriteClaim, 3, "claim of three jobs")

	leases := make([]contracts.Lease, len(claimed))
	for i, j := range claimed {
		leases[i] = leaseOf(j)
	}
	// Every held lease written (renewAfter 0): one row each.
	_, err = s.Heartbeat(ctx, "w1", leases, at(2*time.Second), 0)
	require.NoError(t, err)
	c = requireRows(t, s, c, store.WriteHeartbeat, 3, "heartbeat writing three leases")

	// Two leases past the renew point: renewed, one row each.
	renewAt := at(2*time.Second + renewAfter)
	out, err := s.Heartbeat(ctx, "w1", leases[:2], renewAt, renewAfter)
	require.NoError(t, err)
	require.ElementsMatch(t, leases[:2], out.Renewed)
	c = requireRows(t, s, c, store.WriteHeartbeat, 2, "heartbeat renewing two leases")

	// Kept in memory: no write, no row.
	out, err = s.Heartbeat(ctx, "w1", leases[:1], renewAt.Add(beatEvery), renewAfter)
	require.NoError(t, err)
	require.Equal(t, leases[:1], out.Kept)
	requireNothingWritten(t, s, c, "a kept lease")

	// A compare-and-set that misses writes no row (MongoDB still sends
	// the conditional update that matched nothing: a request, no row).
	running := get(t, s, leases[2].JobID)
	_, err = s.Transition(ctx, store.Expect{ID: running.ID, State: contracts.StateRunning, Claim: running.Claim + 1},
		store.Change{Now: renewAt, State: contracts.StateSucceeded})
	require.ErrorIs(t, err, store.ErrConflict)
	c = requireRows(t, s, c, store.WriteTransition, 0, "a missed compare-and-set")

	// A transition writes its job's row once.
	finish(t, s, running, contracts.StateSucceeded, renewAt)
	c = requireRows(t, s, c, store.WriteTransition, 1, "transition of one job")

	// Results of two jobs in one request: two rows.
	done, err := s.UpdateEach(ctx, []string{leases[0].JobID, leases[1].JobID}, func(int, contracts.Job) (store.Change, error) {
		return store.Change{Now: renewAt, State: contracts.StateSucceeded}, nil
	})
	require.NoError(t, err)
	for _, u := range done {
		require.NoError(t, u.Err)
	}
	requireRows(t, s, c, store.WriteUpdate, 2, "results of two jobs")
}
