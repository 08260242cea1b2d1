package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

var transitionTests = []test{
	{"TransitionCompareAndSet", testTransitionCAS},
	{"TransitionSetsFields", testTransitionSetsFields},
	{"TransitionClaimFreeAt", testTransitionClaimFreeAt},
	{"TransitionFinalReleasesSlot", testTransitionFinalReleasesSlot},
	{"ConcurrentClaimOneJob", testConcurrentClaimOne},
	{"ConcurrentClaimManyJobs", testConcurrentClaimMany},
}

func testTransitionCAS(t *testing.T, s store.Store) {
	ctx := t.Context()
	j := admitNew(t, s, "acme", base)

	// Hit: the scheduler's dispatch claim.
	got, err := s.Transition(ctx,
		store.Expect{ID: j.ID, State: contracts.StatePending, Claim: 0},
		store.Change{Now: at(time.Second), State: contracts.StatePending, Claim: 1,
			Worker: ptr("w1"), ClaimUntil: ptr(at(30 * time.Second))})
	require.NoError(t, err)
	want := j
	want.Claim = 1
	want.Worker = "w1"
	want.ClaimUntil = ptr(at(30 * time.Second))
	want.UpdatedAt = at(time.Second)
	requireJob(t, want, got)
	requireJob(t, want, get(t, s, j.ID))

	// Misses change nothing.
	_, err = s.Transition(ctx, store.Expect{ID: j.ID, State: contracts.StateRunning, Claim: 1},
		store.Change{Now: at(2 * time.Second), State: contracts.StateRunning})
	require.ErrorIs(t, err, store.ErrConflict, "wrong state")
	_, err = s.Transition(ctx, store.Expect{ID: j.ID, State: contracts.StatePending, Claim: 0},
		store.Change{Now: at(2 * time.Second), State: contracts.StatePending, Claim: 2})
	require.ErrorIs(t, err, store.ErrConflict, "stale attempt")
	_, err = s.Transition(ctx, store.Expect{ID: j.ID, State: contracts.StatePending, Claim: 2},
		store.Change{Now: at(2 * time.Second), State: contracts.StateCancelled})
	require.ErrorIs(t, err, store.ErrConflict, "future attempt")
	_, err = s.Transition(ctx, store.Expect{ID: "no-such-job", State: contracts.StatePending, Claim: 0},
		store.Change{Now: at(2 * time.Second), State: contracts.StatePending, Claim: 1})
	require.ErrorIs(t, err, store.ErrNotFound)
	require.NotErrorIs(t, err, store.ErrConflict)

	// Changes the state machine or the attempt order forbid are refused
	// whatever the job looks like.
	for _, ch := range []store.Change{
		{Now: at(2 * time.Second), State: contracts.StatePending, Claim: 1},
		{Now: at(2 * time.Second), State: contracts.StatePending, Claim: -3},
		{Now: at(2 * time.Second), State: ""},
		{Now: at(2 * time.Second), State: "paused"},
	} {
		_, err = s.Transition(ctx, store.Expect{ID: j.ID, State: contracts.StatePending, Claim: 1}, ch)
		require.ErrorIs(t, err, store.ErrBadTransition, "%+v", ch)
	}
	requireJob(t, want, get(t, s, j.ID))

	done := finish(t, s, want, contracts.StateCancelled, at(3*time.Second))
	for _, to := range contracts.AllStates {
		_, err = s.Transition(ctx, store.Expect{ID: j.ID, State: contracts.StateCancelled, Claim: 1},
			store.Change{Now: at(4 * time.Second), State: to})
		require.ErrorIs(t, err, store.ErrBadTransition, "cancelled to %s", to)
	}
	_, err = s.Transition(ctx, store.Expect{ID: "no-such-job", State: contracts.StateSucceeded, Claim: 0},
		store.Change{Now: at(4 * time.Second), State: contracts.StateRunning})
	require.ErrorIs(t, err, store.ErrBadTransition, "checked before the lookup")
	requireJob(t, done, get(t, s, j.ID))
}

func testTransitionSetsFields(t *testing.T, s store.Store) {
	ctx := t.Context()
	j := admitNew(t, s, "acme", base)
	want := j

	// pending → running, everything a start sets.
	t1 := at(time.Second)
	got, err := s.Transition(ctx, store.Expect{ID: j.ID, State: contracts.StatePending, Claim: 0},
		store.Change{Now: t1, State: contracts.StateRunning, Claim: 1, IncAttempt: true, Worker: ptr("w1"),
			ClearClaim: true, StartedAt: ptr(t1), HeartbeatAt: ptr(t1)})
	require.NoError(t, err)
	want.State, want.Claim, want.Attempt, want.Worker = contracts.StateRunning, 1, 1, "w1"
	want.StartedAt, want.HeartbeatAt, want.UpdatedAt = ptr(t1), ptr(t1), t1
	requireJob(t, want, got)

	// running → running: progress, a cancel request; nil fields stay.
	t2 := at(2 * time.Second)
	progress := &contracts.Progress{Percent: 42.5, Stage: "upload", Message: "3 of 7"}
	got, err = s.Transition(ctx, store.Expect{ID: j.ID, State: contracts.StateRunning, Claim: 1},
		store.Change{Now: t2, State: contracts.StateRunning, Progress: progress, CancelRequested: ptr(true)})
	require.NoError(t, err)
	want.Progress, want.CancelRequested, want.UpdatedAt = progress, true, t2
	requireJob(t, want, got)

	// running → pending: a requeue with an error note and a dispatch time.
	t3 := at(3 * time.Second)
	got, err = s.Transition(ctx, store.Expect{ID: j.ID, State: contracts.StateRunning, Claim: 1},
		store.Change{Now: t3, State: contracts.StatePending, Claim: 2, Error: ptr("stale: worker went away"),
			NextDispatchAt: ptr(at(10 * time.Second)), CancelRequested: ptr(false), HeartbeatAt: ptr(t3)})
	require.NoError(t, err)
	want.State, want.Claim, want.Error, want.CancelRequested = contracts.StatePending, 2, "stale: worker went away", false
	want.NextDispatchAt, want.HeartbeatAt, want.UpdatedAt = ptr(at(10*time.Second)), ptr(t3), t3
	requireJob(t, want, got)

	// pending → pending with a claim, then running again on another worker.
	t4 := at(4 * time.Second)
	got = claim(t, s, got, "w2", t4, at(time.Minute))
	want.Claim, want.Worker, want.ClaimUntil, want.UpdatedAt = 3, "w2", ptr(at(time.Minute)), t4
	requireJob(t, want, got)
	got, err = s.Transition(ctx, store.Expect{ID: j.ID, State: contracts.StatePending, Claim: 3},
		store.Change{Now: t4, State: contracts.StateRunning, IncAttempt: true, ClearClaim: true, StartedAt: ptr(t4), HeartbeatAt: ptr(t4)})
	require.NoError(t, err)
	want.State, want.Attempt, want.ClaimUntil, want.StartedAt, want.HeartbeatAt = contracts.StateRunning, 2, nil, ptr(t4), ptr(t4)
	requireJob(t, want, got)

	// running → succeeded: result, finished_at; claim and next dispatch cleared.
	t5 := at(5 * time.Second)
	result := json.RawMessage(`{"ok":true,"items":[1,2]}`)
	got, err = s.Transition(ctx, store.Expect{ID: j.ID, State: contracts.StateRunning, Claim: 3},
		store.Change{Now: t5, State: contracts.StateSucceeded, Result: result, Error: ptr("")})
	require.NoError(t, err)
	want.State, want.Result, want.Error, want.UpdatedAt = contracts.StateSucceeded, result, "", t5
	want.FinishedAt, want.NextDispatchAt, want.ClaimUntil = ptr(t5), nil, nil
	// A driver may blank the key of a finished job; this one had none.
	requireJob(t, want, got)
	requireJob(t, want, get(t, s, j.ID))
}

func testTransitionClaimFreeAt(t *testing.T, s store.Store) {
	ctx := t.Context()
	j := claim(t, s, admitNew(t, s, "acme", base), "w1", at(time.Second), at(30*time.Second))

	// The claim lasts past 10s: miss.
	_, err := s.Transition(ctx,
		store.Expect{ID: j.ID, State: contracts.StatePending, Claim: 1, ClaimFreeAt: at(10 * time.Second)},
		store.Change{Now: at(10 * time.Second), State: contracts.StatePending, Claim: 2, ClaimUntil: ptr(at(40 * time.Second))})
	require.ErrorIs(t, err, store.ErrConflict)
	requireJob(t, j, get(t, s, j.ID))

	// It has ended by 30s: hit.
	got, err := s.Transition(ctx,
		store.Expect{ID: j.ID, State: contracts.StatePending, Claim: 1, ClaimFreeAt: at(30 * time.Second)},
		store.Change{Now: at(30 * time.Second), State: contracts.StatePending, Claim: 2, Worker: ptr("w2"), ClaimUntil: ptr(at(60 * time.Second))})
	require.NoError(t, err)
	require.Equal(t, int64(2), got.Claim)
	requireTime(t, "claim_until", ptr(at(60*time.Second)), got.ClaimUntil)

	// Without ClaimFreeAt the claim does not matter.
	got, err = s.Transition(ctx,
		store.Expect{ID: j.ID, State: contracts.StatePending, Claim: 2},
		store.Change{Now: at(31 * time.Second), State: contracts.StatePending, Claim: 3, ClearClaim: true})
	require.NoError(t, err)
	require.Nil(t, got.ClaimUntil)

	// A job with no claim is free at any time.
	got, err = s.Transition(ctx,
		store.Expect{ID: j.ID, State: contracts.StatePending, Claim: 3, ClaimFreeAt: base},
		store.Change{Now: at(32 * time.Second), State: contracts.StateCancelled})
	require.NoError(t, err)
	require.Equal(t, contracts.StateCancelled, got.State)
}

func testTransitionFinalReleasesSlot(t *testing.T, s store.Store) {
	ctx := t.Context()
	caps := store.Caps{Global: 1, Tenant: 1}
	a, adm, err := s.Admit(ctx, NewJob("acme", base), caps)
	require.NoError(t, err)
	require.Equal(t, store.Admitted, adm)
	_, adm, err = s.Admit(ctx, NewJob("acme", base), caps)
	require.NoError(t, err)
	require.Equal(t, store.RejectedGlobal, adm)

	a = start(t, s, a, "w1", at(time.Second))
	_, adm, err = s.Admit(ctx, NewJob("acme", base), caps)
	require.NoError(t, err)
	require.Equal(t, store.RejectedGlobal, adm, "running still holds its slot")

	done := finish(t, s, a, contracts.StateSucceeded, at(2*time.Second))
	requireTime(t, "finished_at", ptr(at(2*time.Second)), done.FinishedAt)
	require.Nil(t, done.ClaimUntil)
	require.Nil(t, done.NextDispatchAt)
	c := stats(t, s)
	require.Zero(t, c.Active())
	require.Equal(t, 1, c.ByState[contracts.StateSucceeded])
	require.Empty(t, c.TenantActive)

	// A late duplicate of the same result must not release the slot twice.
	_, err = s.Transition(ctx, store.Expect{ID: a.ID, State: contracts.StateRunning, Claim: a.Claim},
		store.Change{Now: at(3 * time.Second), State: contracts.StateSucceeded})
	require.ErrorIs(t, err, store.ErrConflict)

	b, adm, err := s.Admit(ctx, NewJob("acme", at(4*time.Second)), caps)
	require.NoError(t, err)
	require.Equal(t, store.Admitted, adm)
	_, adm, err = s.Admit(ctx, NewJob("acme", at(4*time.Second)), caps)
	require.NoError(t, err)
	require.Equal(t, store.RejectedGlobal, adm, "exactly one slot was freed")

	// pending → failed frees it too.
	finish(t, s, b, contracts.StateFailed, at(5*time.Second))
	_, adm, err = s.Admit(ctx, NewJob("acme", at(6*time.Second)), caps)
	require.NoError(t, err)
	require.Equal(t, store.Admitted, adm)

	drift, err := s.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, drift)
}

func testConcurrentClaimOne(t *testing.T, s store.Store) {
	j := admitNew(t, s, "acme", base)
	const n = 16
	var (
		wg      sync.WaitGroup
		results = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			_, results[i] = s.Transition(t.Context(),
				store.Expect{ID: j.ID, State: contracts.StatePending, Claim: 0},
				store.Change{Now: at(time.Second), State: contracts.StatePending, Claim: 1,
					Worker: ptr(fmt.Sprintf("w%d", i)), ClaimUntil: ptr(at(30 * time.Second))})
		})
	}
	wg.Wait()
	wins := 0
	winner := ""
	for i, err := range results {
		if err == nil {
			wins++
			winner = fmt.Sprintf("w%d", i)
			continue
		}
		require.ErrorIs(t, err, store.ErrConflict)
	}
	require.Equal(t, 1, wins)
	got := get(t, s, j.ID)
	require.Equal(t, int64(1), got.Claim)
	require.Equal(t, winner, got.Worker)
}

func testConcurrentClaimMany(t *testing.T, s store.Store) {
	const (
		jobs    = 40
		workers = 8
	)
	all := make([]contracts.Job, jobs)
	for i := range all {
		all[i] = admitNew(t, s, "acme", at(time.Duration(i)*time.Millisecond))
	}
	var (
		mu   sync.Mutex
		wins = map[string][]string{} // job id → workers that claimed it
		errs []error
		wg   sync.WaitGroup
	)
	for w := range workers {
		worker := fmt.Sprintf("w%d", w)
		wg.Go(func() {
			for k := range jobs {
				j := all[(k+w*jobs/workers)%jobs]
				_, err := s.Transition(t.Context(),
					store.Expect{ID: j.ID, State: contracts.StatePending, Claim: 0},
					store.Change{Now: at(time.Second), State: contracts.StatePending, Claim: 1,
						Worker: ptr(worker), ClaimUntil: ptr(at(30 * time.Second))})
				mu.Lock()
				switch {
				case err == nil:
					wins[j.ID] = append(wins[j.ID], worker)
				case !errors.Is(err, store.ErrConflict):
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	require.Len(t, wins, jobs)
	for _, j := range all {
		require.Len(t, wins[j.ID], 1, "job %s claimed by %v", j.ID, wins[j.ID])
		got := get(t, s, j.ID)
		require.Equal(t, int64(1), got.Claim)
		require.Equal(t, wins[j.ID][0], got.Worker)
	}
}
