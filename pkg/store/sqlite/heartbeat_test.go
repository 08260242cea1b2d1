package sqlite

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// A heartbeat whose leases need no write is answered from the read pool:
// with the writer stopped it still renews (keeps), loses and cancels, and
// only one that must write fails.
func TestHeartbeatWithoutWriteSkipsWriter(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openTemp(t)
	now := time.Now().Truncate(time.Millisecond)
	start := func() contracts.Job {
		t.Helper()
		j, adm, err := s.Admit(ctx, storetest.NewJob("acme", now), store.Caps{})
		require.NoError(t, err)
		require.Equal(t, store.Admitted, adm)
		j, err = s.Transition(ctx, store.Expect{ID: j.ID, State: contracts.StatePending, Claim: 0},
			store.Change{Now: now, State: contracts.StatePending, Claim: 1, Worker: new("w1"), ClaimUntil: new(now.Add(time.Minute))})
		require.NoError(t, err)
		out, err := s.Heartbeat(ctx, "w1", []contracts.Lease{{JobID: j.ID, Claim: 1}}, now, time.Minute)
		require.NoError(t, err)
		require.Len(t, out.Promoted, 1)
		return j
	}
	kept, cancel := start(), start()
	_, err := s.Transition(ctx, store.Expect{ID: cancel.ID, State: contracts.StateRunning, Claim: 1},
		store.Change{Now: now, State: contracts.StateRunning, CancelRequested: new(true)})
	require.NoError(t, err)

	s.writes.stop()
	leases := []contracts.Lease{{JobID: kept.ID, Claim: 1}, {JobID: cancel.ID, Claim: 1}, {JobID: kept.ID, Claim: 7}}
	out, err := s.Heartbeat(ctx, "w1", leases, now.Add(time.Second), time.Minute)
	require.NoError(t, err)
	require.Equal(t, leases[:2], out.Kept)
	require.Equal(t, leases[2:], out.Lost)
	require.Equal(t, leases[1:2], out.Cancel)
	require.Empty(t, out.Renewed)

	// Past the renew point it must write: the stopped writer says so.
	_, err = s.Heartbeat(ctx, "w1", leases[:1], now.Add(time.Minute), time.Minute)
	require.ErrorIs(t, err, errClosed)
}
