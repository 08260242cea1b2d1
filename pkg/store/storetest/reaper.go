package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

var reaperTests = []test{
	{"StaleFindsExactly", testStaleFindsExactly},
	{"StaleOrderAndLimit", testStaleOrderAndLimit},
	{"PurgeBatches", testPurgeBatches},
	{"ReconcileConsistent", testReconcileConsistent},
	{"PendingKindsAndStaleKind", testPendingKinds},
}

// testPendingKinds checks the no-worker sweep's two reads: the kinds with
// unclaimed pending jobs, and the unclaimed pending jobs of one kind.
func testPendingKinds(t *testing.T, s store.Store) {
	ctx := t.Context()
	kinds, err := s.PendingKinds(ctx)
	require.NoError(t, err)
	require.Empty(t, kinds)

	newJob := func(kind string, created time.Time) contracts.Job {
		j := NewJob("acme", created)
		j.Kind = kind
		return admit(t, s, j)
	}
	b1 := newJob("b.kind", at(2*time.Second))
	b0 := newJob("b.kind", at(time.Second))
	newJob("a.kind", at(time.Second))
	newJob("c.kind", at(time.Second))
	_, err = s.Claim(ctx, store.ClaimRequest{Now: at(3 * time.Second), Slots: map[string][]string{"c.kind": Slots("w1", 1)}})
	require.NoError(t, err)
	start(t, s, newJob("d.kind", at(time.Second)), "w1", at(3*time.Second))
	finish(t, s, start(t, s, newJob("e.kind", at(time.Second)), "w1", at(3*time.Second)), contracts.StateSucceeded, at(4*time.Second))

	kinds, err = s.PendingKinds(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a.kind", "b.kind"}, kinds, "claimed, running and final jobs' kinds are not waiting")

	got, err := s.Stale(ctx, store.StaleQuery{Now: at(5 * time.Second), Kind: "b.kind", Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []string{b0.ID, b1.ID}, ids(got), "only that kind, oldest first")
	got, err = s.Stale(ctx, store.StaleQuery{Now: at(5 * time.Second), Kind: "b.kind", Limit: 1})
	require.NoError(t, err)
	require.Len(t, got, 1)
	for _, k := range []string{"c.kind", "d.kind", "e.kind", "no.kind"} {
		got, err = s.Stale(ctx, store.StaleQuery{Now: at(5 * time.Second), Kind: k, Limit: 10})
		require.NoError(t, err)
		require.Empty(t, got, k)
	}
}

// run puts a new job running since started with its last heartbeat at beat
// (none when nil).
func run(t *testing.T, s store.Store, started time.Time, beat *time.Time) contracts.Job {
	t.Helper()
	j := admitNew(t, s, "acme", base)
	got, err := s.Transition(t.Context(), store.Expect{ID: j.ID, State: contracts.StatePending, Claim: 0},
		store.Change{Now: started, State: contracts.StateRunning, Claim: 1, IncAttempt: true,
			Worker: ptr("w1"), StartedAt: ptr(started), HeartbeatAt: beat})
	require.NoError(t, err)
	return got
}

func testStaleFindsExactly(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := at(10 * time.Minute)
	q := store.StaleQuery{
		Now:             now,
		HeartbeatBefore: now.Add(-time.Minute),
		StartedBefore:   now.Add(-10 * time.Minute),
		Limit:           100,
	}

	silent := run(t, s, at(8*time.Minute), ptr(at(8*time.Minute+30*time.Second)))
	run(t, s, at(8*time.Minute), ptr(at(9*time.Minute+30*time.Second))) // fresh heartbeat
	overRuntime := run(t, s, at(-time.Minute), ptr(at(9*time.Minute+50*time.Second)))
	neverBeat := run(t, s, at(8*time.Minute), nil)

	// Pending jobs, however old, are not what these parts find.
	admitNew(t, s, "acme", at(time.Minute))
	claim(t, s, admitNew(t, s, "acme", at(time.Minute)), "w1", at(8*time.Minute), at(9*time.Minute)) // expired claim

	old := run(t, s, at(-time.Hour), ptr(at(-time.Hour)))
	finish(t, s, old, contracts.StateFailed, at(-time.Hour)) // final: never stale

	got, err := s.Stale(ctx, q)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{silent.ID, overRuntime.ID, neverBeat.ID}, ids(got))

	// A zero time switches its part off.
	only := func(q store.StaleQuery) []string {
		t.Helper()
		got, err := s.Stale(ctx, q)
		require.NoError(t, err)
		return ids(got)
	}
	require.ElementsMatch(t, []string{silent.ID, neverBeat.ID},
		only(store.StaleQuery{Now: now, HeartbeatBefore: q.HeartbeatBefore, Limit: 100}))
	require.ElementsMatch(t, []string{overRuntime.ID},
		only(store.StaleQuery{Now: now, StartedBefore: q.StartedBefore, Limit: 100}))

	// The limit bounds the total.
	got, err = s.Stale(ctx, store.StaleQuery{Now: now, HeartbeatBefore: q.HeartbeatBefore,
		StartedBefore: q.StartedBefore, Limit: 2})
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Subset(t, []string{silent.ID, overRuntime.ID, neverBeat.ID}, ids(got))
}

func testStaleOrderAndLimit(t *testing.T, s store.Store) {
	ctx := t.Context()
	now := at(time.Hour)
	var running, pending []string
	for _, m := range []int{7, 3, 9, 1, 5} {
		started := at(time.Duration(m) * time.Minute)
		running = append(running, run(t, s, started, ptr(started)).ID)
		pending = append(pending, admitNew(t, s, "acme", at(time.Duration(m)*time.Minute+time.Second)).ID)
	}
	// by minute: 1, 3, 5, 7, 9 → indexes 3, 1, 4, 0, 2
	got, err := s.Stale(ctx, store.StaleQuery{Now: now, HeartbeatBefore: at(30 * time.Minute), Limit: 3})
	require.NoError(t, err)
	require.Equal(t, []string{running[3], running[1], running[4]}, ids(got), "oldest heartbeat first")

	// Deadlines are an hour after admission: 61, 63, ... minutes.
	got, err = s.Stale(ctx, store.StaleQuery{Now: at(2 * time.Hour), DeadlineBefore: at(90 * time.Minute), Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{pending[3], pending[1]}, ids(got), "oldest dispatch deadline first")

	got, err = s.Stale(ctx, store.StaleQuery{Now: now, StartedBefore: at(6 * time.Minute), Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []string{running[3], running[1], running[4]}, ids(got), "oldest start first")
}

func testPurgeBatches(t *testing.T, s store.Store) {
	ctx := t.Context()
	finals := []contracts.JobState{contracts.StateSucceeded, contracts.StateFailed, contracts.StateCancelled}
	var old []string
	for i := range 10 {
		j := admitNew(t, s, "acme", base)
		if i%3 == 0 {
			j = start(t, s, j, "w1", at(time.Duration(i)*time.Minute))
		}
		old = append(old, finish(t, s, j, finals[i%3], at(time.Duration(i)*time.Minute)).ID)
	}
	fresh := finish(t, s, admitNew(t, s, "acme", base), contracts.StateSucceeded, at(20*time.Minute))
	pending := admitNew(t, s, "acme", base)
	running := start(t, s, admitNew(t, s, "acme", base), "w1", base)
	cutoff := at(10 * time.Minute)

	var batches []int
	for {
		n, err := s.Purge(ctx, cutoff, 4)
		require.NoError(t, err)
		require.LessOrEqual(t, n, 4)
		batches = append(batches, n)
		if n == 0 {
			break
		}
		require.Less(t, len(batches), 10, "purge never ends")
	}
	require.Equal(t, []int{4, 4, 2, 0}, batches)
	for _, id := range old {
		requireMissing(t, s, id)
	}
	for _, id := range []string{fresh.ID, pending.ID, running.ID} {
		get(t, s, id)
	}
	c := stats(t, s)
	require.Equal(t, 1, c.ByState[contracts.StateSucceeded])
	require.Zero(t, c.ByState[contracts.StateFailed]+c.ByState[contracts.StateCancelled])
	require.Equal(t, 2, c.Active())

	n, err := s.Purge(ctx, at(time.Hour), 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	drift, err := s.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, drift)
}

func testReconcileConsistent(t *testing.T, s store.Store) {
	ctx := t.Context()
	drift, err := s.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, drift, "empty store")

	caps := store.Caps{Global: 6, Tenant: 3}
	var admitted []contracts.Job
	for i := range 10 {
		j := NewJob([]string{"a", "b", "c"}[i%3], at(time.Duration(i)*time.Second))
		if i%4 == 0 {
			j.Key = "k"
		}
		got, adm, err := s.Admit(ctx, j, caps)
		require.NoError(t, err)
		if adm == store.Admitted {
			admitted = append(admitted, got)
		}
	}
	require.NotEmpty(t, admitted)
	start(t, s, admitted[0], "w1", at(time.Minute))
	finish(t, s, admitted[1], contracts.StateCancelled, at(time.Minute))

	drift, err = s.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, drift)

	// Admission is still exact afterwards.
	active := stats(t, s).Active()
	_, adm, err := s.Admit(ctx, NewJob("z", at(time.Hour)), store.Caps{Global: active + 1})
	require.NoError(t, err)
	require.Equal(t, store.Admitted, adm)
	_, adm, err = s.Admit(ctx, NewJob("z", at(time.Hour)), store.Caps{Global: active + 1})
	require.NoError(t, err)
	require.Equal(t, store.RejectedGlobal, adm)
}
