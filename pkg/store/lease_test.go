package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestDecideLease(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	renew := 20 * time.Second
	lease := contracts.Lease{JobID: "j1", Claim: 3}
	running := func(worker string, age time.Duration) LeaseView {
		return LeaseView{State: contracts.StateRunning, Claim: 3, Worker: worker, HeartbeatAt: now.Add(-age)}
	}
	tests := []struct {
		name       string
		view       LeaseView
		lease      contracts.Lease
		renewAfter time.Duration
		want       LeaseAction
	}{
		{"fresh lease is kept", running("w1", time.Second), lease, renew, LeaseKeep},
		{"just below the renew point is kept", running("w1", renew-time.Nanosecond), lease, renew, LeaseKeep},
		{"at the renew point is renewed", running("w1", renew), lease, renew, LeaseRenew},
		{"past the renew point is renewed", running("w1", time.Minute), lease, renew, LeaseRenew},
		{"heartbeat from a clock ahead is kept", running("w1", -time.Second), lease, renew, LeaseKeep},
		{"no stored heartbeat is renewed", LeaseView{State: contracts.StateRunning, Claim: 3, Worker: "w1"}, lease, renew, LeaseRenew},
		{"no renew point renews every heartbeat", running("w1", time.Second), lease, 0, LeaseRenew},
		{"negative renew point renews every heartbeat", running("w1", 0), lease, -time.Second, LeaseRenew},
		{"another worker's run is lost", running("w2", time.Second), lease, renew, LeaseLost},
		{"another claim is lost", running("w1", time.Second), contracts.Lease{JobID: "j1", Claim: 2}, renew, LeaseLost},
		{"accepted pending claim is promoted", LeaseView{State: contracts.StatePending, Claim: 3}, lease, renew, LeasePromote},
		{"pending at another claim is lost", LeaseView{State: contracts.StatePending, Claim: 4}, lease, renew, LeaseLost},
		{"pending never claimed is lost", LeaseView{State: contracts.StatePending}, contracts.Lease{JobID: "j1"}, renew, LeaseLost},
		{"final job is lost", LeaseView{State: contracts.StateSucceeded, Claim: 3, Worker: "w1", HeartbeatAt: now}, lease, renew, LeaseLost},
		{"missing job is lost", LeaseView{}, lease, renew, LeaseLost},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, DecideLease(tt.view, tt.lease, "w1", now, tt.renewAfter))
		})
	}
}

func TestLeaseActionWrites(t *testing.T) {
	t.Parallel()
	for a, want := range map[LeaseAction]bool{LeaseLost: false, LeasePromote: true, LeaseRenew: true, LeaseKeep: false} {
		require.Equal(t, want, a.Writes(), "action %d", a)
	}
}
