package storetest

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

var stateCountTests = []test{
	{"StateCountsFollowEveryWrite", testStateCountsFollowEveryWrite},
	{"StateCountsReconciled", testStateCountsReconciled},
}

// StateCountSkewer is a store whose counters of jobs by state a test can
// corrupt: SkewStateCount adds by to tenant's counter of state behind the
// store's back. The suite's tests of Reconcile's repair of those counters
// run only on stores that implement it.
type StateCountSkewer interface {
	SkewStateCount(ctx context.Context, tenant string, state contracts.JobState, by int) error
}

// stateCountTenants are the tenants of the state-count tests.
var stateCountTenants = []string{"acme", "beta", "gamma"}

// countOp is one kind of write of the random sequence: it picks its jobs
// from all (every job, children included, as listed before the write).
type countOp struct {
	name string
	do   func(t *testing.T, s store.Store, r *rand.Rand, now time.Time, all []contracts.Job)
}

// countOps are the writes that create, move or delete jobs.
var countOps = []countOp{
	{"admit", func(t *testing.T, s store.Store, r *rand.Rand, now time.Time, _ []contracts.Job) {
		admitNew(t, s, pickOne(r, stateCountTenants), now)
	}},
	{"admit batch", func(t *testing.T, s store.Store, r *rand.Rand, now time.Time, _ []contracts.Job) {
		reqs := make([]store.AdmitRequest, 1+r.IntN(3))
		for i := range reqs {
			reqs[i] = store.AdmitRequest{Job: NewJob(pickOne(r, stateCountTenants), now)}
		}
		_, err := s.AdmitBatch(t.Context(), reqs)
		require.NoError(t, err)
	}},
	{"admit fan-out", func(t *testing.T, s store.Store, r *rand.Rand, now time.Time, _ []contracts.Job) {
		j := NewJob(pickOne(r, stateCountTenants), now)
		j.Payload = nil
		j.Concurrency = 1 + r.IntN(3)
		_, err := s.AdmitBatch(t.Context(), []store.AdmitRequest{{Job: j, Items: items(1 + r.IntN(5))}})
		require.NoError(t, err)
	}},
	{"claim and promote", func(t *testing.T, s store.Store, r *rand.Rand, now time.Time, _ []contracts.Job) {
		claimed, err := s.Claim(t.Context(), store.ClaimRequest{Now: now,
			Slots: map[string][]string{"test.kind": Slots("w1", 1+r.IntN(4))}})
		require.NoError(t, err)
		leases := make([]contracts.Lease, len(claimed))
		for i, j := range claimed {
			leases[i] = leaseOf(j)
		}
		_, err = s.Heartbeat(t.Context(), "w1", leases, now, 0)
		require.NoError(t, err)
	}},
	{"renew", func(t *testing.T, s store.Store, _ *rand.Rand, now time.Time, all []contracts.Job) {
		var leases []contracts.Lease
		for _, j := range all {
			if j.State == contracts.StateRunning && j.Worker == "w1" {
				leases = append(leases, leaseOf(j))
			}
		}
		_, err := s.Heartbeat(t.Context(), "w1", leases, now, 0)
		require.NoError(t, err)
	}},
	{"transition", func(t *testing.T, s store.Store, r *rand.Rand, now time.Time, all []contracts.Job) {
		j, ok := pickJob(r, all, func(j contracts.Job) bool { return j.State.Active() && j.Children == nil })
		if !ok {
			return
		}
		final := pickOne(r, []contracts.JobState{contracts.StateSucceeded, contracts.StateFailed, contracts.StateCancelled})
		_, err := s.Transition(t.Context(), store.Expect{ID: j.ID, State: j.State, Claim: j.Claim},
			store.Change{Now: now, State: final})
		require.NoError(t, err)
	}},
	{"update each", func(t *testing.T, s store.Store, r *rand.Rand, now time.Time, all []contracts.Job) {
		var ids []string
		for range 3 {
			if j, ok := pickJob(r, all, func(j contracts.Job) bool { return j.State.Active() && j.Children == nil }); ok {
				ids = append(ids, j.ID)
			}
		}
		_, err := s.UpdateEach(t.Context(), ids, func(_ int, j contracts.Job) (store.Change, error) {
			if !j.State.Active() {
				return store.Change{}, store.ErrBadTransition
			}
			return store.Change{Now: now, State: contracts.StateSucceeded}, nil
		})
		require.NoError(t, err)
	}},
	{"cancel cascade", func(t *testing.T, s store.Store, r *rand.Rand, now time.Time, all []contracts.Job) {
		j, ok := pickJob(r, all, func(j contracts.Job) bool { return j.State.Active() && j.Children != nil })
		if !ok {
			return
		}
		_, _, err := s.CancelParent(t.Context(), j.ID, now, "cancelled: by request")
		require.NoError(t, err)
	}},
	{"stale requeue", func(t *testing.T, s store.Store, r *rand.Rand, now time.Time, all []contracts.Job) {
		j, ok := pickJob(r, all, func(j contracts.Job) bool { return j.State == contracts.StateRunning && j.Children == nil })
		if !ok {
			return
		}
		_, err := s.Transition(t.Context(), store.Expect{ID: j.ID, State: j.State, Claim: j.Claim},
			store.Change{Now: now, State: contracts.StatePending, Claim: j.Claim + 1, ClearClaim: true,
				Worker: ptr(""), NextDispatchAt: ptr(now)})
		require.NoError(t, err)
	}},
	{"purge", func(t *testing.T, s store.Store, r *rand.Rand, now time.Time, _ []contracts.Job) {
		_, err := s.Purge(t.Context(), now.Add(-30*time.Second), 1+r.IntN(3))
		require.NoError(t, err)
	}},
}

// pickOne is one of xs at random.
func pickOne[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// pickJob is one of the jobs ok selects at random.
func pickJob(r *rand.Rand, all []contracts.Job, ok func(contracts.Job) bool) (contracts.Job, bool) {
	var some []contracts.Job
	for _, j := range all {
		if ok(j) {
			some = append(some, j)
		}
	}
	if len(some) == 0 {
		return contracts.Job{}, false
	}
	return pickOne(r, some), true
}

// allJobs lists every job, children included.
func allJobs(t *testing.T, s store.Store) []contracts.Job {
	t.Helper()
	top, _ := listAll(t, s, store.Query{Limit: 50})
	all := top
	for _, j := range top {
		if j.Children != nil {
			kids, _ := listAll(t, s, store.Query{Parent: j.ID, Limit: 50})
			all = append(all, kids...)
		}
	}
	return all
}

// requireCountsExact requires Stats and TenantCounts to equal a full count
// of the jobs.
func requireCountsExact(t *testing.T, s store.Store, msg string) {
	t.Helper()
	actual := store.StateCounts{}
	for _, j := range allJobs(t, s) {
		actual.Apply(store.StateDeltas(j.Tenant, "", j.State, 1)...)
	}
	require.Equal(t, actual.ByState(), stats(t, s).ByState, "Stats %s", msg)
	for _, tenant := range stateCountTenants {
		got, err := s.TenantCounts(t.Context(), tenant)
		require.NoError(t, err)
		require.Equal(t, actual.Tenant(tenant), got, "TenantCounts(%s) %s", tenant, msg)
	}
}

// testStateCountsFollowEveryWrite: after a seeded random sequence of every
// write that creates, moves or deletes jobs, the counts Stats and
// TenantCounts return equal a full count of the jobs, globally and per
// tenant, and Reconcile finds nothing to repair.
func testStateCountsFollowEveryWrite(t *testing.T, s store.Store) {
	r := rand.New(rand.NewPCG(25, 1))
	now := base
	for step := range 120 {
		now = now.Add(time.Second)
		op := countOps[step%len(countOps)]
		if step >= len(countOps) {
			op = pickOne(r, countOps)
		}
		op.do(t, s, r, now, allJobs(t, s))
		if step%10 == 9 {
			requireCountsExact(t, s, "after step "+op.name)
		}
	}
	requireCountsExact(t, s, "at the end")
	drift, err := s.Reconcile(t.Context())
	require.NoError(t, err)
	require.Zero(t, drift)
}

// testStateCountsReconciled: a counter of jobs by state corrupted behind
// the store's back shows in Stats and TenantCounts (they read the counters,
// not the jobs); Reconcile reports the drift and repairs it.
func testStateCountsReconciled(t *testing.T, s store.Store) {
	skewer, ok := s.(StateCountSkewer)
	if !ok {
		t.Skip("the store's counters of jobs by state cannot be corrupted from a test")
	}
	ctx := t.Context()
	for i := range 4 {
		admitNew(t, s, "acme", at(time.Duration(i)*time.Second))
	}
	finish(t, s, admitNew(t, s, "beta", base), contracts.StateFailed, at(time.Minute))
	requireCountsExact(t, s, "before")

	require.NoError(t, skewer.SkewStateCount(ctx, "acme", contracts.StatePending, 3))
	require.NoError(t, skewer.SkewStateCount(ctx, "beta", contracts.StateFailed, -1))
	require.NoError(t, skewer.SkewStateCount(ctx, "gamma", contracts.StateRunning, 2))
	require.Equal(t, 7, stats(t, s).ByState[contracts.StatePending])
	got, err := s.TenantCounts(ctx, "beta")
	require.NoError(t, err)
	require.Zero(t, got[contracts.StateFailed])

	drift, err := s.Reconcile(ctx)
	require.NoError(t, err)
	require.Equal(t, 3+1+2, drift)
	requireCountsExact(t, s, "after Reconcile")
	drift, err = s.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, drift)
}
