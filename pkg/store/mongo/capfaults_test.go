package mongo

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/mongo/internal/ferrettest"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// commandOn matches the first command named name on collection coll
// whose message contains every one of parts (nil: any), and only that one.
func commandOn(name, coll string, f ferrettest.Fault, parts ...string) ferrettest.FaultFunc {
	done := false
	return func(msg []byte) ferrettest.Fault {
		cmd := ferrettest.Command(msg)
		if done || cmd == nil {
			return ferrettest.Pass
		}
		v, err := cmd.LookupErr(name)
		if err != nil {
			return ferrettest.Pass
		}
		if c, ok := v.StringValueOK(); !ok || c != coll {
			return ferrettest.Pass
		}
		for _, p := range parts {
			if !bytes.Contains(msg, []byte(p)) {
				return ferrettest.Pass
			}
		}
		done = true
		return f
	}
}

// activeJobs counts the jobs in an active state, straight from the jobs.
func activeJobs(t *testing.T, s *Store) int {
	t.Helper()
	n, err := s.jobs.CountDocuments(t.Context(), bson.D{{Key: fState, Value: bson.D{{Key: "$in", Value: censusStates}}}})
	require.NoError(t, err)
	return int(n)
}

// TestCapHoldsWhenAnInsertLandsLate: an admission takes its slot, and its
// insert leaves but the caller gives up on it (the connection is cut
// before the server ran it). A read then finds no job, yet the insert
// still reaches the server afterwards. The slot must not have been given
// back on the strength of that read: a second admission under a cap of 1
// is rejected, one job is active, and the job that landed has its body.
// Reconcile then finds the counter exact.
//
// Before, the admission gave its slot back (and deleted the body) once
// the read found nothing, the late insert landed without either, and the
// second admission made two active jobs under a cap of 1.
func TestCapHoldsWhenAnInsertLandsLate(t *testing.T) {
	t.Parallel()
	srv := ferrettest.Start(t, t.TempDir())
	s := open(t, srv.DatabaseURI("sluice"), WithReconcileGrace(0))
	ctx := t.Context()
	caps := store.Caps{Global: 1}
	at := time.Date(2031, time.March, 4, 5, 6, 7, 0, time.UTC)

	late := storetest.NewJob("a", at)
	srv.SetFault(commandOn("insert", jobsCollection, ferrettest.Hold))
	_, _, err := s.Admit(ctx, late, caps)
	require.Error(t, err, "the insert was cut off")
	srv.SetFault(nil)
	n, err := srv.ReleaseHeld()
	require.NoError(t, err)
	require.Equal(t, 1, n, "the insert was held back, then forwarded")

	landed := get(t, s, late.ID)
	require.JSONEq(t, string(late.Payload), string(landed.Payload), "the job that landed has its body")

	_, adm, err := s.Admit(ctx, storetest.NewJob("b", at.Add(time.Second)), caps)
	require.NoError(t, err)
	require.Equal(t, store.RejectedGlobal, adm, "the late job holds the only slot")
	require.Equal(t, 1, activeJobs(t, s))

	_, err = s.Reconcile(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), counter(t, s, store.GlobalScope).Active)
	require.Equal(t, int64(1), counter(t, s, store.TenantScope("a")).Active)
}

// TestCapHoldsWhenATenantSlotReplyIsLost: an admission takes the global
// slot, then the tenant's; the tenant's is applied but its reply is lost.
// The admission cannot tell whether it was applied, so it must not give
// the global slot back: the tenants' counters would then hold a slot the
// global one does not, and the active slots /v1/stats shows (their sum)
// would pass the global cap once the others fill it.
//
// Before, the global slot went back, a third tenant's job took it, and
// Stats showed 3 slots held under a global cap of 2.
func TestCapHoldsWhenATenantSlotReplyIsLost(t *testing.T) {
	t.Parallel()
	srv := ferrettest.Start(t, t.TempDir())
	s := open(t, srv.DatabaseURI("sluice"), WithReconcileGrace(0))
	ctx := t.Context()
	caps := store.Caps{Global: 2, Tenant: 1}
	at := time.Date(2031, time.March, 4, 5, 6, 7, 0, time.UTC)

	_, adm, err := s.Admit(ctx, storetest.NewJob("a", at), caps)
	require.NoError(t, err)
	require.Equal(t, store.Admitted, adm)

	// The tenant's first slot creates its counter: that insert's reply is
	// the one lost.
	srv.SetFault(commandOn("insert", countersCollection, ferrettest.LoseReply, store.TenantScope("b")))
	_, _, err = s.Admit(ctx, storetest.NewJob("b", at.Add(time.Second)), caps)
	require.Error(t, err, "the reply of the tenant's slot was lost")
	srv.SetFault(nil)

	_, _, err = s.Admit(ctx, storetest.NewJob("c", at.Add(2*time.Second)), caps)
	require.NoError(t, err)
	c, err := s.Stats(ctx)
	require.NoError(t, err)
	require.LessOrEqual(t, c.Slots(), caps.Global, "slots held by tenant: %v", c.TenantActive)
	require.LessOrEqual(t, activeJobs(t, s), caps.Global)

	// Nothing is left half-way: Reconcile brings every counter back to
	// the jobs.
	_, err = s.Reconcile(ctx)
	require.NoError(t, err)
	c, err = s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, activeJobs(t, s), c.Slots())
	require.Equal(t, int64(activeJobs(t, s)), counter(t, s, store.GlobalScope).Active)
}
