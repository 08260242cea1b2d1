package mongo

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe/clocktest"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// skewable is a Store whose counters of jobs by state the conformance
// suite may corrupt (storetest.StateCountSkewer).
type skewable struct{ *Store }

// SkewStateCount adds by to tenant's counter of state behind the store's
// back (as a hand edit would: the version stays).
func (s skewable) SkewStateCount(ctx context.Context, tenant string, state contracts.JobState, by int) error {
	_, err := s.stateCounts.UpdateOne(ctx, bson.D{{Key: fID, Value: store.TenantScope(tenant)}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: fCounts + "." + string(state), Value: int64(by)}}}},
		options.UpdateOne().SetUpsert(true))
	return err
}

// TestStateCountsBuiltOnOpen: a store of the previous release (jobs, no
// counters of jobs by state) gets its counters built when opened, and they
// follow every write from then on.
func TestStateCountsBuiltOnOpen(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	uri := ferretServer(t)("sluice")
	s, err := Open(ctx, uri)
	require.NoError(t, err)
	now := time.Now()
	var last contracts.Job
	for i := range 5 {
		last, _, err = s.Admit(ctx, storetest.NewJob([]string{"acme", "beta"}[i%2], now), store.Caps{})
		require.NoError(t, err)
	}
	_, err = s.Transition(ctx, store.Expect{ID: last.ID, State: contracts.StatePending},
		store.Change{Now: now, State: contracts.StateCancelled})
	require.NoError(t, err)
	// What the previous release left: no counters of jobs by state.
	require.NoError(t, s.stateCounts.Drop(ctx))
	require.NoError(t, s.Close())

	s = open(t, uri)
	want := store.ZeroStates()
	want[contracts.StatePending], want[contracts.StateCancelled] = 4, 1
	require.Equal(t, want, stats(t, s).ByState)
	got, err := s.TenantCounts(ctx, "acme")
	require.NoError(t, err)
	wantAcme := store.ZeroStates()
	wantAcme[contracts.StatePending], wantAcme[contracts.StateCancelled] = 2, 1
	require.Equal(t, wantAcme, got)

	// Built once: a write after it is counted, and opening again keeps it.
	_, _, err = s.Admit(ctx, storetest.NewJob("acme", now), store.Caps{})
	require.NoError(t, err)
	s = open(t, uri)
	want[contracts.StatePending]++
	require.Equal(t, want, stats(t, s).ByState)
	drift, err := s.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, drift)
}

// TestStateCountsRepairedWhileBusy: drift in the counters of a tenant whose
// writes keep landing during every check (their version moves) is taken
// off once a later check, a grace period on, finds the same difference;
// a difference that changed is only noted again.
func TestStateCountsRepairedWhileBusy(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := clocktest.New()
	s := open(t, ferretServer(t)("sluice"), WithReconcileGrace(time.Minute), WithClock(clock.Now))
	for range 3 {
		admitNew(t, s, "acme", clock.Now())
	}
	// A lost $inc: one pending job more than the counters say.
	require.NoError(t, skewable{s}.SkewStateCount(ctx, "acme", contracts.StatePending, -1))
	// A write of acme lands while each check counts the jobs.
	s.afterCount = func() { bumpVersion(t, s, "acme") }

	drift, err := s.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, drift, "busy: noted, not repaired")
	clock.Advance(30 * time.Second)
	drift, err = s.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, drift, "not due before the grace period")
	clock.Advance(30 * time.Second)
	drift, err = s.Reconcile(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, drift, "the same difference a grace period later")
	require.Equal(t, 3, stats(t, s).ByState[contracts.StatePending])

	s.afterCount = nil
	clock.Advance(store.StateCheckEvery)
	drift, err = s.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, drift)
}

// TestStateCountsCrashBetweenJobAndCount: a process that dies between a
// job's write and the $inc of its counts (the one window of drift) leaves
// the counts one write behind the jobs; Reconcile repairs them.
func TestStateCountsCrashBetweenJobAndCount(t *testing.T) {
	t.Parallel()
	uri := ferretServer(t)("sluice")
	s := open(t, uri)
	ctx := t.Context()
	now := time.Now()
	j := admitNew(t, s, "acme", now)
	_ = admitNew(t, s, "acme", now)
	// The process dies after the job's write: its counters' $inc never
	// reaches the server (a disconnected client fails every command).
	dead, err := mongo.Connect(options.Client().ApplyURI(uri))
	require.NoError(t, err)
	require.NoError(t, dead.Disconnect(ctx))
	dying := *s
	dying.stateCounts = dead.Database(s.db.Name()).Collection(stateCountsCollection)
	_, err = dying.Transition(ctx, store.Expect{ID: j.ID, State: contracts.StatePending},
		store.Change{Now: now, State: contracts.StateSucceeded})
	require.NoError(t, err, "the job's write went through")
	require.Equal(t, contracts.StateSucceeded, get(t, s, j.ID).State)
	require.Equal(t, 2, stats(t, s).ByState[contracts.StatePending], "its count did not")

	drift, err := s.Reconcile(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, drift)
	requireStateCountsExact(t, s)
}

// bumpVersion moves tenant's counters' version, as any write of it does.
func bumpVersion(t *testing.T, s *Store, tenant string) {
	t.Helper()
	_, err := s.stateCounts.UpdateOne(t.Context(), bson.D{{Key: fID, Value: store.TenantScope(tenant)}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: fVersion, Value: int64(1)}}}})
	require.NoError(t, err)
}

// admitNew admits a plain job of tenant.
func admitNew(t *testing.T, s *Store, tenant string, now time.Time) contracts.Job {
	t.Helper()
	j, adm, err := s.Admit(t.Context(), storetest.NewJob(tenant, now), store.Caps{})
	require.NoError(t, err)
	require.Equal(t, store.Admitted, adm)
	return j
}

// stats is s.Stats.
func stats(t *testing.T, s *Store) store.Counts {
	t.Helper()
	c, err := s.Stats(t.Context())
	require.NoError(t, err)
	return c
}

// requireStateCountsExact requires Stats and TenantCounts to equal a full
// count of the jobs.
func requireStateCountsExact(t *testing.T, s *Store) {
	t.Helper()
	actual, err := s.countJobs(t.Context())
	require.NoError(t, err)
	require.Equal(t, actual.ByState(), stats(t, s).ByState)
	for tenant := range actual {
		got, err := s.TenantCounts(t.Context(), tenant)
		require.NoError(t, err)
		require.Equal(t, actual.Tenant(tenant), got, "tenant %s", tenant)
	}
}
