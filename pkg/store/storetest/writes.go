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
