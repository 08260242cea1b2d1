package apply

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/scheduler/internal/consume"
	"github.com/sluicehq/sluice/services/scheduler/internal/metrics"
)

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		runs     int
		min, max time.Duration
	}{
		{1, 500 * time.Millisecond, 1500 * time.Millisecond},
		{2, time.Second, 3 * time.Second},
		{3, 2 * time.Second, 6 * time.Second},
		{30, 5 * time.Second, 10 * time.Second}, // capped
	}
	for _, tc := range tests {
		for range 50 {
			d := RetryDelay(tc.runs, time.Second, 10*time.Second)
			require.GreaterOrEqual(t, d, tc.min, "after run %d", tc.runs)
			require.LessOrEqual(t, d, tc.max, "after run %d", tc.runs)
		}
	}
}

// setupRetry is setup with a backoff of 1s up to 1m.
func setupRetry(t *testing.T) *bundle {
	t.Helper()
	b := setup(t)
	b.a = New(Config{StaleThreshold: time.Second, MaxRuntime: time.Hour, RetryBackoff: time.Second, RetryBackoffMax: time.Minute},
		b.store, b.n, nil, func() time.Time { return b.now }, zerolog.Nop(), metrics.New(prometheus.NewRegistry()))
	return b
}

// fail reports a failed run of j's current attempt from worker w.
func (b *bundle) fail(j contracts.Job, w, msg string, permanent bool) contracts.Job {
	b.t.Helper()
	res := contracts.Result{JobID: j.ID, Claim: j.Claim, WorkerID: w, State: contracts.StateFailed, Error: msg, Permanent: permanent}
	require.Equal(b.t, consume.Ack(), b.a.Result(context.Background(), contracts.ResultSubject(res.WorkerID), enc(b.t, res), nil))
	return b.get(j.ID)
}

// rerun claims and starts a pending job again on w at b.now.
func (b *bundle) rerun(j contracts.Job, w string) contracts.Job {
	b.t.Helper()
	ctx := context.Background()
	claim := b.now.Add(time.Minute)
	_, err := b.store.Transition(ctx, store.Expect{ID: j.ID, State: contracts.StatePending, Claim: j.Claim},
		store.Change{Now: b.now, State: contracts.StatePending, Claim: j.Claim + 1, ClaimUntil: &claim})
	require.NoError(b.t, err)
	out, err := b.store.Heartbeat(ctx, w, []contracts.Lease{{JobID: j.ID, Claim: j.Claim + 1}}, b.now, 0)
	require.NoError(b.t, err)
	require.Len(b.t, out.Promoted, 1)
	return b.get(j.ID)
}

func TestFailedRunsRetryWithBackoffUntilMaxAttempts(t *testing.T) {
	t.Parallel()
	b := setupRetry(t)
	j := b.running("j1", "w1", 3)

	j = b.fail(j, "w1", "handler: boom 1", false)
	require.Equal(t, contracts.StatePending, j.State, "run 1 of 3 failed: another run")
	require.Equal(t, int64(2), j.Claim)
	require.Empty(t, j.Worker)
	require.Empty(t, j.Error, "the job has not failed")
	require.Equal(t, 1, j.Attempt)
	require.Len(t, j.Errors, 1)
	require.Equal(t, contracts.RunError{Attempt: 1, Claim: 1, Error: "handler: boom 1", At: j.Errors[0].At}, j.Errors[0])
	wait := j.NextDispatchAt.Sub(b.now)
	require.GreaterOrEqual(t, wait, 500*time.Millisecond)
	require.LessOrEqual(t, wait, 1500*time.Millisecond)
	require.Equal(t, []string{"j1"}, b.n.due, "a due message wakes the dispatcher when the backoff ends")

	b.now = *j.NextDispatchAt
	j = b.fail(b.rerun(j, "w2"), "w2", "timeout: too slow", false)
	require.Equal(t, contracts.StatePending, j.State, "timeouts retry too")
	require.Equal(t, 2, j.Attempt)
	require.Len(t, j.Errors, 2)
	wait = j.NextDispatchAt.Sub(b.now)
	require.GreaterOrEqual(t, wait, time.Second, "the backoff grows")

	b.now = *j.NextDispatchAt
	j = b.fail(b.rerun(j, "w1"), "w1", "handler: boom 3", false)
	require.Equal(t, contracts.StateFailed, j.State, "three runs of max_attempts 3")
	require.Equal(t, "handler: boom 3", j.Error)
	require.Equal(t, 3, j.Attempt)
	require.Len(t, j.Errors, 3)
	require.Equal(t, []int{1, 2, 3}, []int{j.Errors[0].Attempt, j.Errors[1].Attempt, j.Errors[2].Attempt})
}

// TestAFailedRunOfACancelRequestedJobCancels: a run that fails after a
// user asked to cancel its job (before its worker learned of the request)
// ends the job cancelled instead of running it again; the run's error is
// kept. A run that succeeds anyway ends it succeeded.
func TestAFailedRunOfACancelRequestedJobCancels(t *testing.T) {
	t.Parallel()
	b := setupRetry(t)
	yes := true
	for id, want := range map[string]contracts.JobState{"fails": contracts.StateCancelled, "succeeds": contracts.StateSucceeded} {
		j := b.running(id, "w1", 3)
		_, err := b.store.Transition(context.Background(), store.Expect{ID: id, State: contracts.StateRunning, Claim: j.Claim},
			store.Change{Now: b.now, State: contracts.StateRunning, CancelRequested: &yes})
		require.NoError(t, err)
		res := contracts.Result{JobID: id, Claim: j.Claim, WorkerID: "w1", State: contracts.StateSucceeded}
		if want == contracts.StateCancelled {
			res.State, res.Error = contracts.StateFailed, "handler: exit status 143"
		}
		require.Equal(t, consume.Ack(), b.a.Result(context.Background(), contracts.ResultSubject(res.WorkerID), enc(t, res), nil))
		j = b.get(id)
		require.Equal(t, want, j.State, id)
		require.Equal(t, 1, j.Attempt)
		require.Equal(t, int64(1), j.Claim, "not dispatched again")
		if want == contracts.StateCancelled {
			require.Equal(t, contracts.CancelledByRequest, j.Error)
			require.Len(t, j.Errors, 1)
			require.Equal(t, "handler: exit status 143", j.Errors[0].Error)
		}
	}
	require.Empty(t, b.n.due)
}

func TestFailuresThatDoNotRetry(t *testing.T) {
	t.Parallel()
	b := setupRetry(t)
	for id, tc := range map[string]struct {
		msg       string
		permanent bool
	}{
		"permanent": {"handler: the account is closed", true},
		"input":     {"input: payload.ms must be a number", false},
		"cancelled": {"cancelled: cancelled by request", false},
	} {
		j := b.fail(b.running(id, "w1", 5), "w1", tc.msg, tc.permanent)
		require.Equal(t, contracts.StateFailed, j.State, id)
		require.Equal(t, tc.msg, j.Error, id)
		require.Len(t, j.Errors, 1, id)
	}
	require.Empty(t, b.n.due)
}
