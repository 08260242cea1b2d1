package sweep

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

var now = time.Unix(1_700_000_000, 0).UTC()

func at(d time.Duration) *time.Time { v := now.Add(d); return &v }

var cfg = Config{StaleThreshold: 30 * time.Second, MaxRuntime: time.Hour, Retention: 24 * time.Hour, Batch: 2}

func TestReason(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		job  contracts.Job
		want contracts.RequeueReason
	}{
		{"fresh heartbeat", contracts.Job{State: contracts.StateRunning, StartedAt: at(-time.Minute), HeartbeatAt: at(-time.Second)}, ""},
		{"old heartbeat is stale", contracts.Job{State: contracts.StateRunning, StartedAt: at(-time.Minute), HeartbeatAt: at(-31 * time.Second)}, contracts.ReasonStale},
		{"no heartbeat uses start", contracts.Job{State: contracts.StateRunning, StartedAt: at(-40 * time.Second)}, contracts.ReasonStale},
		{"over max runtime", contracts.Job{State: contracts.StateRunning, StartedAt: at(-2 * time.Hour), HeartbeatAt: at(0)}, contracts.ReasonTimeout},
		{"pending waiting long in the backlog is the schedulers'", contracts.Job{State: contracts.StatePending, NextDispatchAt: at(-time.Hour)}, ""},
		{"pending with an expired claim is the schedulers'", contracts.Job{State: contracts.StatePending, NextDispatchAt: at(-time.Hour), ClaimUntil: at(-time.Second)}, ""},
		{"finished never", contracts.Job{State: contracts.StateSucceeded}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, Reason(tc.job, now, cfg))
		})
	}
}

type fakeJobs struct {
	stale     []contracts.Job
	query     store.StaleQuery
	purgeLeft int
	purges    int
	drift     int
	err       error
}

func (f *fakeJobs) Stale(_ context.Context, q store.StaleQuery) ([]contracts.Job, error) {
	f.query = q
	return f.stale, f.err
}

func (f *fakeJobs) Purge(_ context.Context, _ time.Time, limit int) (int, error) {
	f.purges++
	n := min(limit, f.purgeLeft)
	f.purgeLeft -= n
	return n, nil
}

func (f *fakeJobs) Reconcile(context.Context) (int, error) { return f.drift, nil }

type fakePub struct {
	sent []contracts.Requeue
	err  error
}

func (p *fakePub) Requeue(_ context.Context, rq contracts.Requeue) error {
	if p.err != nil {
		return p.err
	}
	p.sent = append(p.sent, rq)
	return nil
}

func setup(t *testing.T, jobs *fakeJobs) (*Sweeper, *fakePub) {
	t.Helper()
	pub := &fakePub{}
	return New(cfg, jobs, pub, func() time.Time { return now }), pub
}

func TestSweepPublishesRequeues(t *testing.T) {
	t.Parallel()
	jobs := &fakeJobs{stale: []contracts.Job{
		{ID: "a", State: contracts.StateRunning, Claim: 2, StartedAt: at(-time.Minute), HeartbeatAt: at(-time.Minute)},
		{ID: "b", State: contracts.StatePending, Claim: 0, NextDispatchAt: at(-time.Hour)},
		{ID: "c", State: contracts.StateRunning, Claim: 1, StartedAt: at(-time.Minute), HeartbeatAt: at(0)}, // renewed since the query
	}, purgeLeft: 5, drift: 3}
	s, pub := setup(t, jobs)
	rep, err := s.Run(context.Background())
	require.NoError(t, err)
	require.Equal(t, []contracts.Requeue{
		{JobID: "a", Claim: 2, State: contracts.StateRunning, Reason: contracts.ReasonStale},
	}, pub.sent, "a pending job is never requeued")
	require.Equal(t, map[contracts.RequeueReason]int{contracts.ReasonStale: 1}, rep.Requeued)
	require.Equal(t, 5, rep.Purged)
	require.Equal(t, 3, jobs.purges, "purges in batches of 2 until a short batch")
	require.Equal(t, 3, rep.Drift)
	require.Equal(t, now.Add(-30*time.Second), jobs.query.HeartbeatBefore)
	require.Equal(t, now.Add(-time.Hour), jobs.query.StartedBefore)
	require.Equal(t, store.StaleQuery{Now: now, HeartbeatBefore: now.Add(-30 * time.Second), StartedBefore: now.Add(-time.Hour), Limit: 2}, jobs.query, "the reaper does not look for pending jobs")
}

func TestSweepKeepsGoingWhenTheBusIsDown(t *testing.T) {
	t.Parallel()
	jobs := &fakeJobs{stale: []contracts.Job{{ID: "a", State: contracts.StateRunning, StartedAt: at(-time.Minute), HeartbeatAt: at(-time.Minute)}}, purgeLeft: 1}
	s, pub := setup(t, jobs)
	pub.err = errors.New("nats: no responders")
	rep, err := s.Run(context.Background())
	require.ErrorContains(t, err, "publish requeue for job a")
	require.Equal(t, 1, rep.Purged, "purge and reconcile still ran")
}

func TestSweepCountsFoundJobsWhenTheBusIsDown(t *testing.T) {
	t.Parallel()
	jobs := &fakeJobs{stale: []contracts.Job{
		{ID: "a", State: contracts.StateRunning, StartedAt: at(-time.Minute), HeartbeatAt: at(-time.Minute)},
		{ID: "b", State: contracts.StateRunning, StartedAt: at(-2 * time.Hour), HeartbeatAt: at(0)},
		{ID: "c", State: contracts.StateRunning, StartedAt: at(-time.Minute), HeartbeatAt: at(-time.Minute)},
	}}
	s, pub := setup(t, jobs)
	pub.err = errors.New("nats: no responders")
	rep, err := s.Run(context.Background())
	require.ErrorContains(t, err, "publish requeue for job a")
	require.NotContains(t, err.Error(), "job c", "one publish failure stops publishing")
	require.Equal(t, map[contracts.RequeueReason]int{contracts.ReasonStale: 2, contracts.ReasonTimeout: 1}, rep.Found)
	require.Empty(t, rep.Requeued)
}
