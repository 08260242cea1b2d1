package store

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestEndChild(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	failFastReason := contracts.JobError(contracts.ClassCancelled, "fail_fast: child p-000001 failed")
	cancelWaiting := CancelWaitingChange(now, failFastReason)
	running := FanoutParent{ID: "p", State: contracts.StateRunning, Window: 2, Released: 2,
		Counts: contracts.ChildCounts{Total: 5}}
	with := func(f func(*FanoutParent)) FanoutParent {
		p := running
		f(&p)
		return p
	}
	tests := []struct {
		name  string
		p     FanoutParent
		found bool
		held  bool
		st    contracts.JobState
		want  FanoutStep
	}{
		{"a released child that succeeds hands its place on", running, true, false, contracts.StateSucceeded,
			FanoutStep{Count: contracts.StateSucceeded, ReleaseNext: true}},
		{"a released child that fails hands its place on", running, true, false, contracts.StateFailed,
			FanoutStep{Count: contracts.StateFailed, ReleaseNext: true}},
		{"a held child that ends (cancelled) held no place", running, true, true, contracts.StateCancelled,
			FanoutStep{Count: contracts.StateCancelled}},
		{"fail_fast: a failure cancels the waiting children", with(func(p *FanoutParent) { p.FailFast = true }),
			true, false, contracts.StateFailed, FanoutStep{Count: contracts.StateFailed, CancelWaiting: &cancelWaiting}},
		{"fail_fast: a success still hands its place on", with(func(p *FanoutParent) { p.FailFast = true }),
			true, false, contracts.StateSucceeded, FanoutStep{Count: contracts.StateSucceeded, ReleaseNext: true}},
		{"fail_fast under a cancel: the cancel already closed the window",
			with(func(p *FanoutParent) { p.FailFast, p.CancelRequested = true, true }),
			true, false, contracts.StateFailed, FanoutStep{Count: contracts.StateFailed}},
		{"a cancelling parent releases nothing", with(func(p *FanoutParent) { p.CancelRequested = true }),
			true, false, contracts.StateSucceeded, FanoutStep{Count: contracts.StateSucceeded}},
		{"an ended parent is left alone", with(func(p *FanoutParent) { p.State = contracts.StateCancelled }),
			true, false, contracts.StateSucceeded, FanoutStep{}},
		{"a purged parent is left alone", FanoutParent{}, false, false, contracts.StateSucceeded, FanoutStep{}},
		{"a child that did not end counts nothing", running, true, false, contracts.StateRunning, FanoutStep{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := EndChild(tt.p, tt.found, "p-000001", tt.held, tt.st, now)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestFanoutStepApply(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	p := FanoutParent{ID: "p", State: contracts.StateRunning, Window: 2, Released: 3,
		Counts: contracts.ChildCounts{Total: 6, Succeeded: 1}}
	cw := CancelWaitingChange(now, "x")
	tests := []struct {
		name      string
		step      FanoutStep
		cancelled int
		want      FanoutParent
	}{
		{"count only", FanoutStep{Count: contracts.StateSucceeded}, 0,
			FanoutParent{ID: "p", State: contracts.StateRunning, Window: 2, Released: 3,
				Counts: contracts.ChildCounts{Total: 6, Succeeded: 2}}},
		{"fail_fast closes the window", FanoutStep{Count: contracts.StateFailed, CancelWaiting: &cw}, 3,
			FanoutParent{ID: "p", State: contracts.StateRunning, Window: 2, Released: 6,
				Counts: contracts.ChildCounts{Total: 6, Succeeded: 1, Failed: 1, Cancelled: 3}}},
		{"a user's cancel", FanoutStep{RequestCancel: true, CancelWaiting: &cw}, 4,
			FanoutParent{ID: "p", State: contracts.StateRunning, Window: 2, Released: 6, CancelRequested: true,
				Counts: contracts.ChildCounts{Total: 6, Succeeded: 1, Cancelled: 4}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.step.Apply(p, tt.cancelled))
		})
	}
}

func TestFinishParent(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	parent := func(st contracts.JobState, cancel bool, c contracts.ChildCounts) FanoutParent {
		return FanoutParent{ID: "p", State: st, Window: 2, Released: c.Total, Counts: c, CancelRequested: cancel}
	}
	many := make([]string, contracts.MaxFailedChildren+5)
	for i := range many {
		many[i] = contracts.ChildID("p", i)
	}
	tests := []struct {
		name    string
		p       FanoutParent
		failed  []string
		done    bool
		state   contracts.JobState
		err     string
		nFailed int
	}{
		{"children still open", parent(contracts.StateRunning, false, contracts.ChildCounts{Total: 3, Succeeded: 2}),
			nil, false, "", "", 0},
		{"all succeeded", parent(contracts.StateRunning, false, contracts.ChildCounts{Total: 3, Succeeded: 3}),
			nil, true, contracts.StateSucceeded, "", 0},
		{"one failed", parent(contracts.StateRunning, false, contracts.ChildCounts{Total: 3, Succeeded: 2, Failed: 1}),
			[]string{"p-000002"}, true, contracts.StateFailed, "handler: 1 of 3 children failed", 1},
		{"fail_fast cancelled the rest", parent(contracts.StateRunning, false, contracts.ChildCounts{Total: 4, Failed: 1, Cancelled: 3}),
			[]string{"p-000000"}, true, contracts.StateFailed, "handler: 1 of 4 children failed", 1},
		{"cancelled while pending", parent(contracts.StatePending, true, contracts.ChildCounts{Total: 2, Cancelled: 2}),
			nil, true, contracts.StateCancelled, contracts.CancelledByRequest, 0},
		{"the failed named are bounded", parent(contracts.StateRunning, false, contracts.ChildCounts{Total: len(many), Failed: len(many)}),
			many, true, contracts.StateFailed, fmt.Sprintf("handler: %d of %d children failed", len(many), len(many)), contracts.MaxFailedChildren},
		{"an ended parent does not end twice", parent(contracts.StateSucceeded, false, contracts.ChildCounts{Total: 3, Succeeded: 3}),
			nil, false, "", "", 0},
		{"a parent without children never ends by them", parent(contracts.StateRunning, false, contracts.ChildCounts{}),
			nil, false, "", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			end, done := FinishParent(tt.p, tt.failed)
			require.Equal(t, tt.done, done)
			if !done {
				return
			}
			require.Equal(t, tt.state, end.State)
			require.Equal(t, tt.err, end.Error)
			var res contracts.FanoutResult
			require.NoError(t, json.Unmarshal(end.Result, &res))
			require.Equal(t, end.Counts, res.Children)
			require.Len(t, res.Failed, tt.nFailed)
			ch := end.Change(now)
			require.NoError(t, ch.Check(Expect{State: tt.p.State}))
			require.Equal(t, tt.state, ch.State)
			require.Equal(t, tt.err != "", ch.Error != nil)
		})
	}
}

func TestFanoutWait(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	later := created.Add(time.Hour)
	earlier := created.Add(-time.Hour)
	tests := []struct {
		name     string
		deadline time.Time
		runAt    *time.Time
		want     time.Duration
	}{
		{"no deadline", time.Time{}, nil, 0},
		{"from creation", created.Add(10 * time.Minute), nil, 10 * time.Minute},
		{"from a later run_at", later.Add(10 * time.Minute), &later, 10 * time.Minute},
		{"an earlier run_at counts from creation", created.Add(10 * time.Minute), &earlier, 10 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, FanoutWait(tt.deadline, created, tt.runAt))
		})
	}
}

func TestChildCountsWith(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      contracts.ChildCounts
		running int
		want    contracts.ChildCounts
	}{
		{contracts.ChildCounts{Total: 10, Succeeded: 2, Failed: 1}, 3,
			contracts.ChildCounts{Total: 10, Pending: 4, Running: 3, Succeeded: 2, Failed: 1}},
		{contracts.ChildCounts{Total: 2, Succeeded: 2}, 0, contracts.ChildCounts{Total: 2, Succeeded: 2}},
		{contracts.ChildCounts{Total: 2, Succeeded: 1}, 5, contracts.ChildCounts{Total: 2, Running: 5, Succeeded: 1}},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, ChildCountsWith(tt.in, tt.running))
	}
}

func TestFanoutChanges(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	claimUntil := now.Add(time.Minute)
	waiting := contracts.Job{ID: "p-000003", State: contracts.StatePending, ClaimUntil: &claimUntil, NextDispatchAt: &now}
	ch := CancelWaitingChange(now, "cancelled: by request")
	require.NoError(t, ch.Check(Expect{State: contracts.StatePending}))
	got := ch.Apply(waiting)
	require.Equal(t, contracts.StateCancelled, got.State)
	require.Equal(t, "cancelled: by request", got.Error)
	require.Nil(t, got.ClaimUntil)
	require.Nil(t, got.NextDispatchAt)
	require.Equal(t, now, *got.FinishedAt)

	rc := RequestCancelChange(now)
	require.NoError(t, rc.Check(Expect{State: contracts.StateRunning}))
	require.True(t, rc.Apply(contracts.Job{State: contracts.StateRunning}).CancelRequested)

	sp := StartParentChange(now)
	require.NoError(t, sp.Check(Expect{State: contracts.StatePending}))
	started := sp.Apply(contracts.Job{State: contracts.StatePending})
	require.Equal(t, contracts.StateRunning, started.State)
	require.Equal(t, now, *started.StartedAt)
}

func TestFanoutGaps(t *testing.T) {
	t.Parallel()
	p := FanoutParent{Window: 3, Released: 4, Counts: contracts.ChildCounts{Total: 10}}
	tests := []struct {
		name string
		p    FanoutParent
		open int
		want int
	}{
		{"a full window", p, 3, 0},
		{"two places lost", p, 1, 2},
		{"an empty window", p, 0, 3},
		{"more open than the window (never made wider)", p, 4, 0},
		{"every child released", FanoutParent{Window: 3, Released: 10, Counts: contracts.ChildCounts{Total: 10}}, 0, 0},
		{"a cancelling parent releases nothing", FanoutParent{Window: 3, Released: 4, CancelRequested: true,
			Counts: contracts.ChildCounts{Total: 10}}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.p.Gaps(tt.open))
		})
	}
}

func TestReleasedAtAdmission(t *testing.T) {
	t.Parallel()
	require.Equal(t, 2, ReleasedAtAdmission(2, 10))
	require.Equal(t, 3, ReleasedAtAdmission(10, 3))
	require.Equal(t, 4, ReleasedAtAdmission(4, 4))
}
