package store

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestStaleRuleReason(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rule := StaleRule{Threshold: 30 * time.Second, MaxRuntime: time.Hour}
	ago := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	tests := []struct {
		name string
		rule StaleRule
		job  contracts.Job
		want contracts.RequeueReason
	}{
		{"fresh", rule, contracts.Job{State: contracts.StateRunning, StartedAt: ago(time.Minute), HeartbeatAt: ago(time.Second)}, ""},
		{"quiet", rule, contracts.Job{State: contracts.StateRunning, StartedAt: ago(time.Minute), HeartbeatAt: ago(30 * time.Second)},
			contracts.ReasonStale},
		{"over the maximum runtime", rule, contracts.Job{State: contracts.StateRunning, StartedAt: ago(time.Hour), HeartbeatAt: ago(time.Second)},
			contracts.ReasonTimeout},
		{"timeout before stale", rule, contracts.Job{State: contracts.StateRunning, StartedAt: ago(2 * time.Hour), HeartbeatAt: ago(time.Hour)},
			contracts.ReasonTimeout},
		{"no maximum runtime", StaleRule{Threshold: 30 * time.Second},
			contracts.Job{State: contracts.StateRunning, StartedAt: ago(100 * time.Hour), HeartbeatAt: ago(time.Second)}, ""},
		{"pending jobs are not the reaper's", rule, contracts.Job{State: contracts.StatePending, UpdatedAt: now.Add(-time.Hour)}, ""},
		{"ended jobs are not the reaper's", rule, contracts.Job{State: contracts.StateFailed, StartedAt: ago(2 * time.Hour)}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.rule.Reason(tt.job, now))
		})
	}
}

func TestDecideRequeue(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rule := StaleRule{Threshold: 30 * time.Second, MaxRuntime: time.Hour}
	ago := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	stale := contracts.Job{ID: "j", State: contracts.StateRunning, Claim: 3, Attempt: 1, MaxAttempts: 3, Worker: "w1",
		StartedAt: ago(time.Minute), HeartbeatAt: ago(time.Minute)}
	with := func(f func(*contracts.Job)) contracts.Job {
		j := stale
		f(&j)
		return j
	}
	event := func(st contracts.JobState, claim int64, r contracts.RequeueReason) contracts.Requeue {
		return contracts.Requeue{JobID: "j", Claim: claim, State: st, Reason: r}
	}
	staleEvent := event(contracts.StateRunning, 3, contracts.ReasonStale)
	tests := []struct {
		name   string
		job    contracts.Job
		rq     contracts.Requeue
		action RequeueAction
		state  contracts.JobState
		err    string
	}{
		{"a stale job with runs left runs again", stale, staleEvent, RequeueRunAgain, contracts.StatePending, ""},
		{"a stale job on its last run fails", with(func(j *contracts.Job) { j.Attempt = 3 }), staleEvent, RequeueEnd,
			contracts.StateFailed, "stale: worker w1 stopped heartbeating; the job ran 3 times (max_attempts 3)"},
		{"a stale job a user cancels ends cancelled", with(func(j *contracts.Job) { j.CancelRequested = true }), staleEvent,
			RequeueEnd, contracts.StateCancelled, contracts.CancelledByRequest},
		{"a job that beat again is left alone", with(func(j *contracts.Job) { j.HeartbeatAt = ago(time.Second) }), staleEvent,
			RequeueIgnore, "", ""},
		{"an event of an old claim is left alone", with(func(j *contracts.Job) { j.Claim = 4 }), staleEvent, RequeueIgnore, "", ""},
		{"an event of another state is left alone", with(func(j *contracts.Job) { j.State = contracts.StateSucceeded }), staleEvent,
			RequeueIgnore, "", ""},
		{"a run past the maximum runtime fails", with(func(j *contracts.Job) { j.StartedAt = ago(2 * time.Hour) }),
			event(contracts.StateRunning, 3, contracts.ReasonTimeout), RequeueEnd, contracts.StateFailed,
			"timeout: ran longer than the maximum runtime 1h0m0s"},
		{"a timeout event of a run within it is left alone", stale, event(contracts.StateRunning, 3, contracts.ReasonTimeout),
			RequeueIgnore, "", ""},
		{"a worker's shutdown runs it again at once", with(func(j *contracts.Job) { j.HeartbeatAt = ago(time.Second); j.Attempt = 3 }),
			event(contracts.StateRunning, 3, contracts.ReasonShutdown), RequeueRunAgain, contracts.StatePending, ""},
		{"a lost pending job is dispatched again", contracts.Job{ID: "j", State: contracts.StatePending, Claim: 2},
			event(contracts.StatePending, 2, contracts.ReasonLost), RequeueRedeliver, "", ""},
		{"a pending job under a live claim is left alone",
			contracts.Job{ID: "j", State: contracts.StatePending, Claim: 2, ClaimUntil: func() *time.Time { t := now.Add(time.Second); return &t }()},
			event(contracts.StatePending, 2, contracts.ReasonLost), RequeueIgnore, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := rule.DecideRequeue(tt.job, tt.rq, now)
			require.Equal(t, tt.action, d.Action)
			switch d.Action {
			case RequeueIgnore, RequeueRedeliver:
				require.Equal(t, Change{}, d.Change)
				return
			}
			require.NoError(t, d.Change.Check(Expect{State: tt.job.State, Claim: tt.job.Claim}))
			require.Equal(t, tt.state, d.Change.State)
			if tt.err != "" {
				require.Equal(t, tt.err, *d.Change.Error)
			}
			if d.Action == RequeueRunAgain {
				require.Equal(t, RequeueChange(tt.job, now), d.Change)
				got := d.Change.Apply(tt.job)
				require.Equal(t, tt.job.Claim+1, got.Claim)
				require.Equal(t, "", got.Worker)
				require.Equal(t, now, *got.NextDispatchAt)
				require.Nil(t, got.ClaimUntil)
			}
		})
	}
}
