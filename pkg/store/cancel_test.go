package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestDecideCancel(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	job := func(st contracts.JobState, f ...func(*contracts.Job)) contracts.Job {
		j := contracts.Job{ID: "j", State: st, Claim: 2}
		for _, g := range f {
			g(&j)
		}
		return j
	}
	parent := func(j *contracts.Job) { j.Concurrency = 2; j.Children = &contracts.ChildCounts{Total: 4} }
	asked := func(j *contracts.Job) { j.CancelRequested = true }
	tests := []struct {
		name   string
		job    contracts.Job
		action CancelAction
		tell   bool
		state  contracts.JobState // of the change applied
	}{
		{"a pending job ends cancelled at once", job(contracts.StatePending), CancelWrite, false, contracts.StateCancelled},
		{"a running job is asked to stop", job(contracts.StateRunning), CancelWrite, true, contracts.StateRunning},
		{"a running job asked already: its worker is told again", job(contracts.StateRunning, asked), CancelTell, true, ""},
		{"a cancelled job stays as it is", job(contracts.StateCancelled), CancelNothing, false, ""},
		{"a succeeded job cannot be cancelled", job(contracts.StateSucceeded), CancelRefused, false, ""},
		{"a failed job cannot be cancelled", job(contracts.StateFailed), CancelRefused, false, ""},
		{"an active parent cascades", job(contracts.StateRunning, parent), CancelCascade, false, ""},
		{"a pending parent cascades", job(contracts.StatePending, parent), CancelCascade, false, ""},
		{"an ended parent is a job like any other", job(contracts.StateSucceeded, parent), CancelRefused, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := DecideCancel(tt.job, now)
			require.Equal(t, tt.action, d.Action)
			require.Equal(t, tt.tell, d.TellWorker)
			if d.Action != CancelWrite {
				require.Equal(t, Change{}, d.Change)
				return
			}
			require.NoError(t, d.Change.Check(Expect{State: tt.job.State, Claim: tt.job.Claim}))
			got := d.Change.Apply(tt.job)
			require.Equal(t, tt.state, got.State)
			if tt.state == contracts.StateCancelled {
				require.Equal(t, contracts.CancelledByRequest, got.Error)
			} else {
				require.True(t, got.CancelRequested)
			}
		})
	}
}

func TestCancelFanout(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, st := range []contracts.JobState{contracts.StatePending, contracts.StateRunning} {
		step, ok := CancelFanout(FanoutParent{State: st}, contracts.CancelledByRequest, now)
		require.True(t, ok, st)
		want := CancelWaitingChange(now, contracts.CancelledByRequest)
		require.Equal(t, FanoutStep{RequestCancel: true, CancelWaiting: &want}, step, st)
	}
	for _, st := range []contracts.JobState{contracts.StateSucceeded, contracts.StateFailed, contracts.StateCancelled} {
		step, ok := CancelFanout(FanoutParent{State: st}, contracts.CancelledByRequest, now)
		require.False(t, ok, st)
		require.Equal(t, FanoutStep{}, step, st)
	}
}
