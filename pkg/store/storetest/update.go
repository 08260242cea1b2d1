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
}

// testUpdateApplies checks that Update hands decide the job as stored and
// returns exactly what a read afterwards shows, for the changes the
// scheduler makes with it: a run's result, a retry, a final failure.
func testUpdateApplies(t *testing.T, s store.Store) {
	ctx := t.Context()
	j := admitNew(t, s, "acme", base)
	j = start(t, s, j, "w1", at(time.Second))

	var seen contracts.Job
	retryAt := at(time.Minute)
	runErr := contracts.RunError{Run: 1, Attempt: j.Attempt, Error: "handler: boom", At: at(2 * time.Second)}
	got, err := s.Update(ctx, j.ID, func(cur contracts.Job) (store.Change, error) {
		seen = cur
		return store.Change{Now: at(2 * time.Second), State: contracts.StatePending, Attempt: cur.Attempt + 1,
			Worker: ptr(""), ClearClaim: true, NextDispatchAt: &retryAt, Error: ptr("handler: boom"),
			Errors: []contracts.RunError{runErr}}, nil
	})
	require.NoError(t, err)
	requireJob(t, j, seen)
	require.Equal(t, contracts.StatePending, got.State)
	require.Equal(t, j.Attempt+1, got.Attempt)
	require.Len(t, got.Errors, 1)
	requireJob(t, get(t, s, j.ID), got)

	j = start(t, s, got, "w2", at(3*time.Second))
	got, err = s.Update(ctx, j.ID, func(cur contracts.Job) (store.Change, error) {
		return store.Change{Now: at(4 * time.Second), State: contracts.StateSucceeded,
			Result: json.RawMessage(`{"ok":true}`), Progress: &contracts.Progress{Percent: 100}}, nil
	})
	require.NoError(t, err)
	require.Equal(t, contracts.StateSucceeded, got.State)
	requireTime(t, "finished_at", ptr(at(4*time.Second)), got.FinishedAt)
	require.Nil(t, got.NextDispatchAt)
	require.Equal(t, 2, got.Runs)
	requireJob(t, get(t, s, j.ID), got)

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
	requireJob(t, got, get(t, s, j.ID))
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
