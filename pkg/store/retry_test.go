package store

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestResultChange(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	backoff := func(runs int) time.Duration { return time.Duration(runs) * time.Second }
	running := contracts.Job{ID: "j", State: contracts.StateRunning, Claim: 4, Attempt: 1, MaxAttempts: 3, Worker: "w1"}
	with := func(f func(*contracts.Job)) contracts.Job {
		j := running
		f(&j)
		return j
	}
	failed := func(msg string) contracts.Result {
		return contracts.Result{JobID: "j", Claim: 4, State: contracts.StateFailed, Error: msg}
	}
	handlerErr := contracts.JobError(contracts.ClassHandler, "boom")
	tests := []struct {
		name    string
		job     contracts.Job
		res     contracts.Result
		state   contracts.JobState
		claim   int64
		next    time.Duration // > 0: ready again after it
		inc     bool
		err     string
		nErrors int
	}{
		{"a success ends it", running, contracts.Result{State: contracts.StateSucceeded, Result: json.RawMessage(`{"ok":1}`)},
			contracts.StateSucceeded, 0, 0, false, "", 0},
		{"a failure with runs left runs again after the backoff", running, failed(handlerErr),
			contracts.StatePending, 5, time.Second, false, "", 1},
		{"a result before the start's write counts the run", with(func(j *contracts.Job) { j.State = contracts.StatePending }),
			failed(handlerErr), contracts.StatePending, 5, 2 * time.Second, true, "", 1},
		{"the last run's failure ends it failed", with(func(j *contracts.Job) { j.Attempt = 3 }), failed(handlerErr),
			contracts.StateFailed, 0, 0, false, handlerErr, 1},
		{"a permanent failure ends it failed", running,
			contracts.Result{State: contracts.StateFailed, Error: handlerErr, Permanent: true},
			contracts.StateFailed, 0, 0, false, handlerErr, 1},
		{"a failed run of a job a user cancels ends it cancelled", with(func(j *contracts.Job) { j.CancelRequested = true }),
			failed(handlerErr), contracts.StateCancelled, 0, 0, false, contracts.CancelledByRequest, 1},
		{"a cancelled run ends it cancelled", running,
			contracts.Result{State: contracts.StateCancelled, Error: contracts.CancelledByRequest},
			contracts.StateCancelled, 0, 0, false, contracts.CancelledByRequest, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ch := ResultChange(tt.job, tt.res, now, backoff)
			require.NoError(t, ch.Check(Expect{State: tt.job.State, Claim: tt.job.Claim}))
			require.Equal(t, tt.state, ch.State)
			require.Equal(t, tt.claim, ch.Claim)
			require.Equal(t, tt.inc, ch.IncAttempt)
			require.Len(t, ch.Errors, tt.nErrors)
			if tt.next > 0 {
				require.Equal(t, now.Add(tt.next), *ch.NextDispatchAt)
				require.True(t, ch.ClearClaim)
				require.Equal(t, "", *ch.Worker)
				require.Nil(t, ch.Error)
			} else {
				require.Nil(t, ch.NextDispatchAt)
			}
			if tt.err != "" {
				require.Equal(t, tt.err, *ch.Error)
			}
		})
	}
}
