package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

var heartbeatTests = []test{
	{"HeartbeatRenews", testHeartbeatRenews},
	{"HeartbeatPromotesClaims", testHeartbeatPromotes},
	{"HeartbeatLoses", testHeartbeatLoses},
	{"HeartbeatCancel", testHeartbeatCancel},
	{"HeartbeatMixed", testHeartbeatMixed},
	{"HeartbeatSameLeaseTwice", testHeartbeatSameLeaseTwice},
	{"HeartbeatConcurrent", testHeartbeatConcurrent},
}

// requireOutcome checks the four lists of a heartbeat's outcome, ignoring order.
func requireOutcome(t *testing.T, renewed, promoted, lost, cancel []contracts.Lease, got store.HeartbeatOutcome) {
	t.Helper()
	require.ElementsMatch(t, renewed, got.Renewed, "renewed")
	require.ElementsMatch(t, promoted, got.Promoted, "promoted")
	require.ElementsMatch(t, lost, got.Lost, "lost")
	require.ElementsMatch(t, cancel, got.Cancel, "cancel")
	require.Len(t, got.Started, len(got.Promoted), "one started job per promoted lease")
	for i, l := range got.Promoted {
		j := got.Started[i]
		require.Equal(t, l, leaseOf(j), "started[%d] is the job of promoted[%d]", i, i)
		require.Equal(t, contracts.StateRunning, j.State, "started job's state")
		require.NotEmpty(t, j.Tenant, "started job's tenant")
		require.NotEmpty(t, j.Worker, "started job's worker")
		require.NotNil(t, j.StartedAt, "started job's started_at")
		require.False(t, j.CreatedAt.IsZero(), "started job's created_at")
		require.Empty(t, j.Payload, "started job's payload is left out")
	}
}

func testHeartbeatRenews(t *testing.T, s store.Store) {
	j := start(t, s, admitNew(t, s, "acme", base), "w1", at(time.Second))
	out, err := s.Heartbeat(t.Context(), "w1", []contracts.Lease{leaseOf(j)}, at(5*time.Second), 0)
	require.NoError(t, err)
	requireOutcome(t, []contracts.Lease{leaseOf(j)}, nil, nil, nil, out)

	got := get(t, s, j.ID)
	requireTime(t, "heartbeat_at", ptr(at(5*time.Second)), got.HeartbeatAt)
	require.Equal(t, contracts.StateRunning, got.State)
	require.Equal(t, "w1", got.Worker)
	require.Equal(t, 1, got.Attempt)
	requireTime(t, "started_at", j.StartedAt, got.StartedAt)

	// No leases, nothing to do.
	out, err = s.Heartbeat(t.Context(), "w1", nil, at(6*time.Second), 0)
	require.NoError(t, err)
	requireOutcome(t, nil, nil, nil, nil, out)
}

func testHeartbeatPromotes(t *testing.T, s store.Store) {
	live := claim(t, s, admitNew(t, s, "acme", base), "w1", at(time.Second), at(30*time.Second))
	expired := claim(t, s, admitNew(t, s, "acme", base), "w1", at(time.Second), at(2*time.Second))
	leases := []contracts.Lease{leaseOf(live), leaseOf(expired)}
	now := at(5 * time.Second)

	out, err := s.Heartbeat(t.Context(), "w1", leases, now, 0)
	require.NoError(t, err)
	requireOutcome(t, nil, leases, nil, nil, out)
	for _, j := range []contracts.Job{live, expired} {
		got := get(t, s, j.ID)
		require.Equal(t, contracts.StateRunning, got.State)
		require.Equal(t, j.Claim, got.Claim)
		require.Equal(t, "w1", got.Worker)
		require.Equal(t, 1, got.Attempt)
		require.Nil(t, got.ClaimUntil)
		requireTime(t, "started_at", &now, got.StartedAt)
		requireTime(t, "heartbeat_at", &now, got.HeartbeatAt)
	}
	require.Equal(t, 2, stats(t, s).ByState[contracts.StateRunning])

	// The next heartbeat renews them.
	out, err = s.Heartbeat(t.Context(), "w1", leases, at(10*time.Second), 0)
	require.NoError(t, err)
	requireOutcome(t, leases, nil, nil, nil, out)
	got := get(t, s, live.ID)
	require.Equal(t, 1, got.Attempt)
	requireTime(t, "started_at", &now, got.StartedAt)
	requireTime(t, "heartbeat_at", ptr(at(10*time.Second)), got.HeartbeatAt)
}

func testHeartbeatLoses(t *testing.T, s store.Store) {
	ctx := t.Context()
	otherWorker := start(t, s, admitNew(t, s, "acme", base), "w2", at(time.Second))

	// Requeued to attempt 2: attempt 1's lease is stale.
	requeued := start(t, s, admitNew(t, s, "acme", base), "w1", at(time.Second))
	_, err := s.Transition(ctx, store.Expect{ID: requeued.ID, State: contracts.StateRunning, Claim: 1},
		store.Change{Now: at(2 * time.Second), State: contracts.StatePending, Claim: 2, NextDispatchAt: ptr(at(2 * time.Second))})
	require.NoError(t, err)

	// Running again, but at attempt 3.
	restarted := start(t, s, get(t, s, requeued.ID), "w1", at(3*time.Second))
	require.Equal(t, int64(3), restarted.Claim)

	done := finish(t, s, start(t, s, admitNew(t, s, "acme", base), "w1", at(time.Second)),
		contracts.StateSucceeded, at(2*time.Second))
	unclaimed := admitNew(t, s, "acme", base)

	lost := []contracts.Lease{
		leaseOf(otherWorker),
		{JobID: requeued.ID, Claim: 1},
		{JobID: restarted.ID, Claim: 2},
		leaseOf(done),
		{JobID: unclaimed.ID, Claim: 1},
		{JobID: "no-such-job", Claim: 1},
	}
	before := map[string]contracts.Job{}
	for _, l := range lost {
		if j, err := s.Get(ctx, l.JobID); err == nil {
			before[l.JobID] = j
		}
	}
	out, err := s.Heartbeat(ctx, "w1", lost, at(5*time.Second), 0)
	require.NoError(t, err)
	requireOutcome(t, nil, nil, lost, nil, out)
	for id, j := range before {
		requireJob(t, j, get(t, s, id))
	}
}

func testHeartbeatCancel(t *testing.T, s store.Store) {
	ctx := t.Context()
	requestCancel := func(j contracts.Job) contracts.Job {
		t.Helper()
		got, err := s.Transition(ctx, store.Expect{ID: j.ID, State: j.State, Claim: j.Claim},
			store.Change{Now: at(2 * time.Second), State: j.State, CancelRequested: ptr(true)})
		require.NoError(t, err)
		return got
	}
	running := requestCancel(start(t, s, admitNew(t, s, "acme", base), "w1", at(time.Second)))
	claimed := requestCancel(claim(t, s, admitNew(t, s, "acme", base), "w1", at(time.Second), at(time.Minute)))
	elsewhere := requestCancel(start(t, s, admitNew(t, s, "acme", base), "w2", at(time.Second)))
	calm := start(t, s, admitNew(t, s, "acme", base), "w1", at(time.Second))

	out, err := s.Heartbeat(ctx, "w1",
		[]contracts.Lease{leaseOf(running), leaseOf(claimed), leaseOf(elsewhere), leaseOf(calm)}, at(5*time.Second), 0)
	require.NoError(t, err)
	requireOutcome(t,
		[]contracts.Lease{leaseOf(running), leaseOf(calm)},
		[]contracts.Lease{leaseOf(claimed)},
		[]contracts.Lease{leaseOf(elsewhere)},
		[]contracts.Lease{leaseOf(running), leaseOf(claimed)},
		out)
}

func testHeartbeatMixed(t *testing.T, s store.Store) {
	var (
		leases                  []contracts.Lease
		renewed, promoted, lost []contracts.Lease
	)
	for i := range 30 {
		j := admitNew(t, s, "acme", at(time.Duration(i)*time.Millisecond))
		switch i % 3 {
		case 0:
			j = start(t, s, j, "w1", at(time.Second))
			renewed = append(renewed, leaseOf(j))
		case 1:
			j = claim(t, s, j, "w1", at(time.Second), at(time.Minute))
			promoted = append(promoted, leaseOf(j))
		default:
			j = start(t, s, j, "w9", at(time.Second))
			lost = append(lost, leaseOf(j))
		}
		leases = append(leases, leaseOf(j))
	}
	out, err := s.Heartbeat(t.Context(), "w1", leases, at(5*time.Second), 0)
	require.NoError(t, err)
	requireOutcome(t, renewed, promoted, lost, nil, out)
	c := stats(t, s)
	require.Equal(t, 30, c.ByState[contracts.StateRunning])
}

// A lease given more than once in one heartbeat counts as that many
// heartbeats one after the other: the first promotes the claim, the others
// renew the run, and the run counts once.
func testHeartbeatSameLeaseTwice(t *testing.T, s store.Store) {
	j := claim(t, s, admitNew(t, s, "acme", base), "w1", at(time.Second), at(time.Minute))
	l := leaseOf(j)
	out, err := s.Heartbeat(t.Context(), "w1", []contracts.Lease{l, l, l}, at(5*time.Second), 0)
	require.NoError(t, err)
	requireOutcome(t, []contracts.Lease{l, l}, []contracts.Lease{l}, nil, nil, out)
	got := get(t, s, j.ID)
	require.Equal(t, contracts.StateRunning, got.State)
	require.Equal(t, 1, got.Attempt)
}
