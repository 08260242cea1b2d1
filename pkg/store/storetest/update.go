package storetest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

var updateTests = []test{
	{"UpdateAppliesAsTransition", testUpdateApplies},
	{"UpdateDecideErrorChangesNothing", testUpdateDecideError},
	{"UpdateReleasesSlot", testUpdateReleasesSlot},
	{"UpdateEachOutcomes", testUpdateEachOutcomes},
}

// testUpdateApplies checks that Update hands decide the job as stored and
// returns exactly what a read afterwards shows (but the cold part, which
// a driver may leave out: see hot), for the changes the
// scheduler makes with it: a run's result, a retry, a final failure.
func testUpdateApplies(t *testing.T, s store.Store) {
	ctx := t.Context()
	j := admitNew(t, s, "acme", base)
	j = start(t, s, j, "w1", at(time.Second))

	var seen contracts.Job
	retryAt := at(time.Minute)
	runErr := contracts.RunError{Attempt: 1, Claim: j.Claim, Error: "handler: boom", At: at(2 * time.Second)}
	got, err := s.Update(ctx, j.ID, func(cur contracts.Job) (store.Change, error) {
		seen = cur
		return store.Change{Now: at(2 * time.Second), State: contracts.StatePending, Claim: cur.Claim + 1,
			Worker: ptr(""), ClearClaim: true, NextDispatchAt: &retryAt, Error: ptr("handler: boom"),
			Errors: []contracts.RunError{runErr}}, nil
	})
	require.NoError(t, err)
	requireJob(t, hot(j), hot(seen))
	require.Equal(t, contracts.StatePending, got.State)
	require.Equal(t, j.Claim+1, got.Claim)
	require.Len(t, got.Errors, 1)
	requireJob(t, hot(get(t, s, j.ID)), hot(got))

	j = start(t, s, got, "w2", at(3*time.Second))
	got, err = s.Update(ctx, j.ID, func(cur contracts.Job) (store.Change, error) {
		return store.Change{Now: at(4 * time.Second), State: contracts.StateSucceeded,
			Result: json.RawMessage(`{"ok":true}`), Progress: &contracts.Progress{Percent: 100}}, nil
	})
	require.NoError(t, err)
	require.Equal(t, contracts.StateSucceeded, got.State)
	requireTime(t, "finished_at", ptr(at(4*time.Second)), got.FinishedAt)
	require.Nil(t, got.NextDispatchAt)
	require.Equal(t, 2, got.Attempt)
	requireJob(t, hot(get(t, s, j.ID)), hot(got))

	_, err = s.Update(ctx, "no-such-job", func(contracts.Job) (store.Change, error) {
		t.Fatal("decide called for a missing job")
		return store.Change{}, nil
	})
	require.ErrorIs(t, err, store.ErrNotFound)

	// A change the state machine forbids is refused and changes nothing.
	_, err = s.Update(ctx, j.ID, func(contracts.Job) (store.Change, error) {
		return store.Change{Now: at(5 * time.Second), State: contracts.StateRunning}, nil
	})
	require.ErrorIs(t, err, store.ErrBadTransition)
	requireJob(t, hot(got), hot(get(t, s, j.ID)))
}

// testUpdateDecideError checks that a decide error comes back as it is and
// writes nothing.
func testUpdateDecideError(t *testing.T, s store.Store) {
	ctx := t.Context()
	j := admitNew(t, s, "acme", base)
	errStale := errors.New("stale report")
	_, err := s.Update(ctx, j.ID, func(contracts.Job) (store.Change, error) { return store.Change{}, errStale })
	require.ErrorIs(t, err, errStale)
	require.NotErrorIs(t, err, store.ErrConflict)
	requireJob(t, j, get(t, s, j.ID))
}

// testUpdateReleasesSlot checks that an Update to a final state frees the
// job's admission slot once, as Transition does.
func testUpdateReleasesSlot(t *testing.T, s store.Store) {
	ctx := t.Context()
	caps := store.Caps{Global: 1, Tenant: 1}
	a, adm, err := s.Admit(ctx, NewJob("acme", base), caps)
	require.NoError(t, err)
	require.Equal(t, store.Admitted, adm)
	a = start(t, s, a, "w1", at(time.Second))

	finalize := func(cur contracts.Job) (store.Change, error) {
		if !cur.State.Active() {
			return store.Change{}, errors.New("already final")
		}
		return store.Change{Now: at(2 * time.Second), State: contracts.StateFailed, Error: ptr("handler: no")}, nil
	}
	_, err = s.Update(ctx, a.ID, finalize)
	require.NoError(t, err)
	_, err = s.Update(ctx, a.ID, finalize)
	require.Error(t, err, "a late duplicate sees the final job")
	c := stats(t, s)
	require.Zero(t, c.Active())
	require.Empty(t, c.TenantActive)

	_, adm, err = s.Admit(ctx, NewJob("acme", at(3*time.Second)), caps)
	require.NoError(t, err)
	require.Equal(t, store.Admitted, adm)
	_, adm, err = s.Admit(ctx, NewJob("acme", at(3*time.Second)), caps)
	require.NoError(t, err)
	require.Equal(t, store.RejectedGlobal, adm, "the slot was released once, not twice")
}

// testUpdateEachOutcomes checks that each job of an UpdateEach has its own
// outcome, as Update alone would give it: applied, missing, decided
// against, refused by the state machine; that a job named twice sees the
// first change; and that the jobs applied release their slots.
func testUpdateEachOutcomes(t *testing.T, s store.Store) {
	ctx := t.Context()
	done := start(t, s, admitNew(t, s, "acme", base), "w1", at(time.Second))
	twice := start(t, s, admitNew(t, s, "acme", base), "w1", at(time.Second))
	kept := start(t, s, admitNew(t, s, "acme", base), "w1", at(time.Second))
	refused := start(t, s, admitNew(t, s, "acme", base), "w1", at(time.Second))
	errKept := errors.New("not this one")
	ids := []string{done.ID, twice.ID, "no-such-job", kept.ID, twice.ID, refused.ID}
	seen := map[int]contracts.Job{}
	out, err := s.UpdateEach(ctx, ids, func(i int, cur contracts.Job) (store.Change, error) {
		require.Equal(t, ids[i], cur.ID, "decide is asked about ids[i]")
		seen[i] = cur
		switch {
		case cur.ID == kept.ID:
			return store.Change{}, errKept
		case cur.ID == refused.ID: // a new attempt that does not grow
			return store.Change{Now: at(2 * time.Second), State: contracts.StatePending, Claim: cur.Claim}, nil
		case !cur.State.Active():
			return store.Change{}, errors.New("already final")
		}
		return store.Change{Now: at(2 * time.Second), State: contracts.StateSucceeded}, nil
	})
	require.NoError(t, err)
	require.Len(t, out, len(ids))

	require.NoError(t, out[0].Err)
	require.Equal(t, contracts.StateSucceeded, out[0].Job.State)
	requireJob(t, hot(get(t, s, done.ID)), hot(out[0].Job))
	require.NoError(t, out[1].Err)
	requireJob(t, hot(get(t, s, twice.ID)), hot(out[1].Job))
	require.ErrorIs(t, out[2].Err, store.ErrNotFound)
	require.NotContains(t, seen, 2, "decide is not asked about a missing job")
	require.ErrorIs(t, out[3].Err, errKept)
	requireJob(t, kept, get(t, s, kept.ID))
	require.Error(t, out[4].Err, "the second time, twice is final")
	require.Equal(t, contracts.StateSucceeded, seen[4].State, "the second decide sees the first change")
	require.ErrorIs(t, out[5].Err, store.ErrBadTransition)
	requireJob(t, refused, get(t, s, refused.ID))

	c := stats(t, s)
	require.Equal(t, 2, c.ByState[contracts.StateSucceeded])
	require.Equal(t, 2, c.Active(), "the two jobs still running keep their slots")

	out, err = s.UpdateEach(ctx, nil, func(int, contracts.Job) (store.Change, error) {
		t.Fatal("decide called with no ids")
		return store.Change{}, nil
	})
	require.NoError(t, err)
	require.Empty(t, out)
}
