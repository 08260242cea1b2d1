package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// Lazy lease renewal (see store.DecideLease), with the scheduler's default
// figures: a heartbeat every 5 s, renewed at 20 s, stale at 30 s.
const (
	beatEvery  = 5 * time.Second
	renewAfter = 20 * time.Second
	staleAfter = 30 * time.Second
)

var leaseTests = []test{
	{"LeaseRenewedLazily", testLeaseRenewedLazily},
	{"LeaseStaleWhenWorkerStops", testLeaseStaleWhenWorkerStops},
	{"LeaseKeptLostAndCancel", testLeaseKeptLostAndCancel},
}

// staleIDs is what the schedulers' sweep and the reaper find stale at now.
func staleIDs(t *testing.T, s store.Store, now time.Time) []string {
	t.Helper()
	got, err := s.Stale(t.Context(), store.StaleQuery{Now: now, HeartbeatBefore: now.Add(-staleAfter), Limit: 100})
	require.NoError(t, err)
	return ids(got)
}

// beat sends one heartbeat of lease l at now with the renew point.
func beat(t *testing.T, s store.Store, worker string, l contracts.Lease, now time.Time) store.HeartbeatOutcome {
	t.Helper()
	out, err := s.Heartbeat(t.Context(), worker, []contracts.Lease{l}, now, renewAfter)
	require.NoError(t, err)
	return out
}

// A lease heartbeated at every interval is written at its claim's first
// heartbeat and then about once per renew period, each time its stored
// heartbeat reached the renew point; it is never found stale.
func testLeaseRenewedLazily(t *testing.T, s store.Store) {
	j := claim(t, s, admitNew(t, s, "acme", base), "w1", at(time.Second), at(time.Minute))
	l := leaseOf(j)
	out := beat(t, s, "w1", l, at(time.Second))
	requireOutcome(t, nil, []contracts.Lease{l}, nil, nil, out)
	stored := at(time.Second)

	const span = 5 * time.Minute
	writes := 0
	for now := at(time.Second + beatEvery); !now.After(at(time.Second + span)); now = now.Add(beatEvery) {
		out := beat(t, s, "w1", l, now)
		if now.Sub(stored) >= renewAfter {
			requireOutcome(t, []contracts.Lease{l}, nil, nil, nil, out)
			require.Empty(t, out.Kept, "kept at %s", now.Sub(base))
			stored = now
			writes++
		} else {
			requireOutcome(t, nil, nil, nil, nil, out)
			require.Equal(t, []contracts.Lease{l}, out.Kept, "kept at %s", now.Sub(base))
		}
		got := get(t, s, j.ID)
		requireTime(t, "heartbeat_at", &stored, got.HeartbeatAt)
		require.Equal(t, contracts.StateRunning, got.State)
		require.NotContains(t, staleIDs(t, s, now), j.ID, "a live lease is never stale (at %s)", now.Sub(base))
		// Nor at the next heartbeat's time, should this one be the last
		// answered before it.
		require.NotContains(t, staleIDs(t, s, now.Add(beatEvery)), j.ID)
	}
	// Written at the first heartbeat at or past the renew point: every
	// 20 s, 15 times in five minutes instead of 60.
	period := (renewAfter + beatEvery - 1) / beatEvery * beatEvery
	require.Equal(t, int(span/period), writes, "writes in %s", span)
}

// A lease whose worker stops is stale within the threshold of its last
// heartbeat, even when that heartbeat wrote nothing: the stored heartbeat
// is older still. Nothing but the store is needed to find it (a restarted
// scheduler finds it as well).
func testLeaseStaleWhenWorkerStops(t *testing.T, s store.Store) {
	j := start(t, s, admitNew(t, s, "acme", base), "w1", at(time.Second))
	l := leaseOf(j)
	var last time.Time
	for now := at(time.Second + beatEvery); now.Before(at(time.Minute)); now = now.Add(beatEvery) {
		beat(t, s, "w1", l, now)
		last = now
	}
	stored := *get(t, s, j.ID).HeartbeatAt
	require.True(t, stored.Before(last), "the last heartbeat (%s) wrote nothing: stored %s", last.Sub(base), stored.Sub(base))
	require.NotContains(t, staleIDs(t, s, stored.Add(staleAfter)), j.ID, "not stale before the threshold")
	require.Contains(t, staleIDs(t, s, stored.Add(staleAfter+time.Millisecond)), j.ID)
	require.Contains(t, staleIDs(t, s, last.Add(staleAfter)), j.ID, "stale within the threshold of the last heartbeat")
}

// A heartbeat that writes nothing still answers lost and cancel as one that
// writes: a fenced worker learns at its next heartbeat that its lease is
// lost, a cancel request reaches it, and neither changes the job.
func testLeaseKeptLostAndCancel(t *testing.T, s store.Store) {
	ctx := t.Context()
	requeued := start(t, s, admitNew(t, s, "acme", base), "w1", at(time.Second))
	cancelled := start(t, s, admitNew(t, s, "acme", base), "w1", at(time.Second))
	moved := start(t, s, admitNew(t, s, "acme", base), "w2", at(time.Second))
	calm := start(t, s, admitNew(t, s, "acme", base), "w1", at(time.Second))
	done := finish(t, s, start(t, s, admitNew(t, s, "acme", base), "w1", at(time.Second)),
		contracts.StateSucceeded, at(2*time.Second))
	leases := []contracts.Lease{leaseOf(requeued), leaseOf(cancelled), leaseOf(moved), leaseOf(calm), leaseOf(done)}

	// The sweep requeues one (its claim moves on), a user cancels another.
	_, err := s.Transition(ctx, store.Expect{ID: requeued.ID, State: contracts.StateRunning, Claim: requeued.Claim},
		store.Change{Now: at(2 * time.Second), State: contracts.StatePending, Claim: requeued.Claim + 1, NextDispatchAt: ptr(at(2 * time.Second))})
	require.NoError(t, err)
	_, err = s.Transition(ctx, store.Expect{ID: cancelled.ID, State: contracts.StateRunning, Claim: cancelled.Claim},
		store.Change{Now: at(2 * time.Second), State: contracts.StateRunning, CancelRequested: ptr(true)})
	require.NoError(t, err)

	before := map[string]contracts.Job{}
	for _, l := range leases {
		before[l.JobID] = get(t, s, l.JobID)
	}
	out, err := s.Heartbeat(ctx, "w1", leases, at(6*time.Second), renewAfter)
	require.NoError(t, err)
	requireOutcome(t, nil, nil, []contracts.Lease{leaseOf(requeued), leaseOf(moved), leaseOf(done)},
		[]contracts.Lease{leaseOf(cancelled)}, out)
	require.ElementsMatch(t, []contracts.Lease{leaseOf(cancelled), leaseOf(calm)}, out.Kept, "kept")
	for id, j := range before {
		requireJob(t, j, get(t, s, id))
	}

	// Past the renew point the held ones are written, with the same answers.
	now := at(time.Second + renewAfter)
	out, err = s.Heartbeat(ctx, "w1", leases, now, renewAfter)
	require.NoError(t, err)
	requireOutcome(t, []contracts.Lease{leaseOf(cancelled), leaseOf(calm)}, nil,
		[]contracts.Lease{leaseOf(requeued), leaseOf(moved), leaseOf(done)}, []contracts.Lease{leaseOf(cancelled)}, out)
	require.Empty(t, out.Kept)
	requireTime(t, "heartbeat_at", &now, get(t, s, calm.ID).HeartbeatAt)
}
