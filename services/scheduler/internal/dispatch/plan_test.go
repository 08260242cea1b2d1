package dispatch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0).UTC()
	at := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	pending := func(mut func(*contracts.Job)) contracts.Job {
		j := contracts.Job{ID: "j", State: contracts.StatePending, DispatchDeadline: now.Add(time.Minute), NextDispatchAt: at(0)}
		if mut != nil {
			mut(&j)
		}
		return j
	}
	tests := []struct {
		name string
		job  contracts.Job
		want Plan
	}{
		{"due now is offered", pending(nil), Plan{Action: Offer}},
		{"slightly early is offered", pending(func(j *contracts.Job) { j.NextDispatchAt = at(10 * time.Millisecond) }), Plan{Action: Offer}},
		{"early waits until next_dispatch_at", pending(func(j *contracts.Job) { j.NextDispatchAt = at(2 * time.Second) }), Plan{Action: Wait, Delay: 2 * time.Second}},
		{"live claim is dropped: the job is being offered", pending(func(j *contracts.Job) { j.ClaimUntil = at(3 * time.Second) }), Plan{Action: Drop}},
		{"expired claim is offered", pending(func(j *contracts.Job) { j.ClaimUntil = at(-time.Second) }), Plan{Action: Offer}},
		{"deadline passed fails", pending(func(j *contracts.Job) { j.DispatchDeadline = now }), Plan{Action: FailCapacity}},
		{"a live claim outlasts the deadline: the sweep fails it if the offer fails", pending(func(j *contracts.Job) { j.DispatchDeadline = now.Add(-time.Second); j.ClaimUntil = at(time.Second) }), Plan{Action: Drop}},
		{"running is dropped", contracts.Job{State: contracts.StateRunning}, Plan{Action: Drop}},
		{"succeeded is dropped", contracts.Job{State: contracts.StateSucceeded}, Plan{Action: Drop}},
		{"cancelled is dropped", contracts.Job{State: contracts.StateCancelled}, Plan{Action: Drop}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, Decide(tc.job, now))
		})
	}
}

func TestNextAttemptAt(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0).UTC()
	tests := []struct {
		name     string
		jitter   float64
		deadline time.Time
		want     time.Time
	}{
		{"no jitter", 0, now.Add(time.Hour), now.Add(2 * time.Second)},
		{"max jitter adds a quarter", 0.999999, now.Add(time.Hour), now.Add(2*time.Second + 499999*time.Microsecond + 500*time.Nanosecond)},
		{"half jitter", 0.5, now.Add(time.Hour), now.Add(2*time.Second + 250*time.Millisecond)},
		{"capped at the deadline", 0.5, now.Add(time.Second), now.Add(time.Second)},
		{"no deadline", 0, time.Time{}, now.Add(2 * time.Second)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := NextAttemptAt(now, 2*time.Second, tc.jitter, tc.deadline)
			require.WithinDuration(t, tc.want, got, time.Microsecond)
		})
	}
}
