package mongo

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe/clocktest"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// stagedItems are n fan-out items.
func stagedItems(n int) []json.RawMessage {
	out := make([]json.RawMessage, n)
	for i := range out {
		out[i] = json.RawMessage(`1`)
	}
	return out
}

// TestFanoutAdmissionFailingHalfWayLeavesNothing fails the admission of a
// fan-out of three batches of children after each of its commands in
// turn: a parent readable at any point has every child, and one that is
// not admitted is nowhere (not readable, not listed, no child, no slot)
// once Reconcile has run.
// Before staging, the parent went in first: a failure while its children
// went in left it listed, pending, then failed.
func TestFanoutAdmissionFailingHalfWayLeavesNothing(t *testing.T) {
	t.Parallel()
	fresh := freshDatabase(ferretServer(t))
	base := time.Date(2031, time.March, 4, 5, 6, 7, 0, time.UTC)
	items := stagedItems(2*3 + 1)
	for n := int64(1); n <= 20; n++ {
		t.Run(fmt.Sprintf("fails after command %d", n), func(t *testing.T) {
			const grace = time.Minute
			clock := clocktest.New()
			uri := fresh()
			s := open(t, uri, WithReconcileGrace(grace), WithClock(clock.Now), WithFanoutBatch(3))
			var armed atomic.Bool
			dying, dyingCtx := dyingAfter(t, s, uri, n, &armed)
			parent := storetest.NewJob("a", base)
			parent.Payload, parent.Concurrency = nil, 2

			armed.Store(true)
			res, err := dying.AdmitBatch(dyingCtx, []store.AdmitRequest{{Job: parent, Items: items}})
			admitted := err == nil && len(res) == 1 && res[0].Admission == store.Admitted
			kids := func() int64 {
				n, err := s.jobs.CountDocuments(t.Context(), bson.D{{Key: fParent, Value: parent.ID}})
				require.NoError(t, err)
				return n
			}
			// An error may come after the parent went in (the admission
			// went through): then every child is there already.
			if _, gerr := s.Get(t.Context(), parent.ID); gerr == nil {
				require.Equal(t, int64(len(items)), kids(), "a visible parent has every child")
			} else {
				require.ErrorIs(t, gerr, store.ErrNotFound)
				require.False(t, admitted)
				top, _, lerr := s.List(t.Context(), store.Query{Limit: 10})
				require.NoError(t, lerr)
				require.Empty(t, top, "a failed admission lists no parent")
			}
			for range 3 {
				_, err := s.Reconcile(t.Context())
				require.NoError(t, err)
				clock.Advance(grace + time.Second)
			}
			st, err := s.Stats(t.Context())
			require.NoError(t, err)
			if p, gerr := s.Get(t.Context(), parent.ID); gerr == nil {
				require.Equal(t, int64(len(items)), kids(), "an admitted parent has every child")
				require.Equal(t, 2, st.TenantActive["a"])
				require.Equal(t, len(items), p.Children.Total)
				return
			}
			require.False(t, admitted)
			require.Zero(t, kids(), "no child of a fan-out not admitted")
			require.Zero(t, st.TenantActive["a"], "nor its slots")
			left, err := s.staged.CountDocuments(t.Context(), bson.D{})
			require.NoError(t, err)
			require.Zero(t, left)
		})
	}
}

// TestFanoutAdmissionCrashBetweenBatches: a process that died while it
// stored a fan-out's children (its staged document and some children in,
// no parent) leaves nothing visible, and Reconcile takes the children
// back once the grace period has passed without a new batch; a stager
// that comes back then fails instead of admitting its parent.
func TestFanoutAdmissionCrashBetweenBatches(t *testing.T) {
	t.Parallel()
	clock := clocktest.New()
	const grace = time.Minute
	s := open(t, freshDatabase(ferretServer(t))(), WithReconcileGrace(grace), WithClock(clock.Now))
	parent := storetest.NewJob("a", time.Date(2031, time.March, 4, 5, 6, 7, 0, time.UTC))
	parent.Payload, parent.Concurrency = nil, 2
	require.NoError(t, s.startStaging(t.Context(), parent, 5))
	require.NoError(t, s.insertChildren(t.Context(), parent, stagedItems(5), nil)) // then the process dies
	_, err := s.Get(t.Context(), parent.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	kids := func() int64 {
		n, err := s.jobs.CountDocuments(t.Context(), bson.D{{Key: fParent, Value: parent.ID}})
		require.NoError(t, err)
		return n
	}
	_, err = s.Reconcile(t.Context())
	require.NoError(t, err)
	require.Equal(t, int64(5), kids(), "within the grace period the staging may be alive")
	clock.Advance(grace + time.Second)
	_, err = s.Reconcile(t.Context())
	require.NoError(t, err)
	require.Zero(t, kids(), "the abandoned children are gone")
	require.ErrorIs(t, s.touchStaging(t.Context(), parent.ID), errStagingLost, "the stager, back, stops")
	st, err := s.Stats(t.Context())
	require.NoError(t, err)
	require.Zero(t, st.ByState[contracts.StatePending])
}
