package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// The rules written once above the drivers (pkg/store: admission.go,
// fanout.go, cancel.go, retry.go, requeue.go) are pure functions that
// return change sets; these cases check that a driver applies each change
// set as the rule says, so that both drivers apply them the same.
var ruleTests = []test{
	{"RuleWindowReleasesInIndexOrder", testRuleWindowOrder},
	{"RuleFailFastCancelsTheWaiting", testRuleFailFast},
	{"RuleParentEndsAsFinishParentSays", testRuleParentEnd},
	{"RuleCancelCascadeReachesEveryChild", testRuleCancelCascade},
	{"RuleCancelOfOneJob", testRuleCancelJob},
	{"RuleAdmissionCapsAndDedup", testRuleAdmission},
	{"RuleRetryOfAFailedRun", testRuleRetry},
	{"RuleRequeueOfAStaleRunningJob", testRuleRequeue},
}

// fanoutView is what the fan-out rules read of parent p as the store
// returns it (its cursor is not shown: Released is the children that left
// the held set).
func fanoutView(p contracts.Job, released int) store.FanoutParent {
	c := *p.Children
	c.Pending, c.Running = 0, 0
	return store.FanoutParent{ID: p.ID, State: p.State, Window: p.Concurrency, Released: released,
		Counts: c, FailFast: p.FailFast, CancelRequested: p.CancelRequested}
}

// beforeEnd is fanoutView of a parent that ended, as it was just before
// its end (running): what FinishParent was asked about.
func beforeEnd(p contracts.Job, released int) store.FanoutParent {
	v := fanoutView(p, released)
	v.State = contracts.StateRunning
	return v
}

// openChildren counts the running children of parent: the places taken
// in its window once every ready child was claimed.
func openChildren(t *testing.T, s store.Store, parent string) int {
	t.Helper()
	return len(children(t, s, parent, contracts.StateRunning))
}

// testRuleWindowOrder: children are released in index order whichever
// child ends, never more open than the window, each with a dispatch
// deadline store.FanoutWait after its release.
func testRuleWindowOrder(t *testing.T, s store.Store) {
	p, _ := admitFanout(t, s, "acme", 6, 2, store.Caps{}, func(j *contracts.Job) { j.DispatchDeadline = base.Add(10 * time.Minute) })
	wait := store.FanoutWait(p.DispatchDeadline, p.CreatedAt, p.RunAt)
	require.Equal(t, 10*time.Minute, wait)
	running := claimN(t, s, 10, at(time.Second))
	require.Equal(t, []int{0, 1}, indexes(t, running))

	// End the newest first, then the oldest: the next index comes each time.
	for step, want := range []int{2, 3, 4, 5} {
		now := at(time.Duration(step+2) * time.Second)
		ending := running[len(running)-1]
		if step%2 == 1 {
			ending = running[0]
		}
		finishChild(t, s, ending, contracts.StateSucceeded, now)
		got := claimN(t, s, 10, now)
		require.Equal(t, []int{want}, indexes(t, got), "step %d", step)
		requireTime(t, "released child's dispatch deadline", ptr(now.Add(wait)), &got[0].DispatchDeadline)
		require.LessOrEqual(t, openChildren(t, s, p.ID), p.Concurrency, "never more open than the window")
		rest := running[:0]
		for _, c := range running {
			if c.ID != ending.ID {
				rest = append(rest, c)
			}
		}
		running = append(rest, got...)
	}
	for _, c := range running {
		finishChild(t, s, c, contracts.StateSucceeded, at(time.Minute))
	}
	require.Equal(t, contracts.StateSucceeded, get(t, s, p.ID).State)
}

// testRuleFailFast: a failure under fail_fast ends every waiting child
// with the change store.EndChild returns, and the parent ends as
// store.FinishParent says once its running child ends.
func testRuleFailFast(t *testing.T, s store.Store) {
	p, _ := admitFanout(t, s, "acme", 5, 2, store.Caps{}, func(j *contracts.Job) { j.FailFast = true })
	got := claimN(t, s, 10, at(time.Second))
	require.Len(t, got, 2)
	failing, other := got[0], got[1]

	step := store.EndChild(fanoutView(get(t, s, p.ID), 2), true, failing.ID, false, contracts.StateFailed, at(2*time.Second))
	require.NotNil(t, step.CancelWaiting)
	require.False(t, step.ReleaseNext)
	finish(t, s, failing, contracts.StateFailed, at(2*time.Second))

	cancelled := children(t, s, p.ID, contracts.StateCancelled)
	require.Equal(t, []int{2, 3, 4}, indexes(t, cancelled))
	for _, c := range cancelled {
		require.Equal(t, *step.CancelWaiting.Error, c.Error)
		requireTime(t, "finished_at", ptr(at(2*time.Second)), c.FinishedAt)
		require.Nil(t, c.ClaimUntil)
	}
	require.True(t, get(t, s, other.ID).CancelRequested, "the running child is asked to stop")
	require.Empty(t, claimN(t, s, 10, at(3*time.Second)), "nothing is released any more")

	finish(t, s, other, contracts.StateSucceeded, at(3*time.Second))
	par := get(t, s, p.ID)
	want, done := store.FinishParent(beforeEnd(par, 5), []string{failing.ID})
	require.True(t, done)
	require.Equal(t, want.State, par.State)
	require.Equal(t, want.Error, par.Error)
	requireJSON(t, "result", want.Result, par.Result)
	require.Equal(t, &want.Counts, par.Children)
}

// testRuleParentEnd: a parent ends in the state, with the error, result and
// counts store.FinishParent gives, and frees its slots.
func testRuleParentEnd(t *testing.T, s store.Store) {
	for _, tc := range []struct {
		name   string
		states []contracts.JobState
	}{
		{"all succeed", []contracts.JobState{contracts.StateSucceeded, contracts.StateSucceeded, contracts.StateSucceeded}},
		{"one fails", []contracts.JobState{contracts.StateSucceeded, contracts.StateFailed, contracts.StateSucceeded}},
		{"one is cancelled", []contracts.JobState{contracts.StateCancelled, contracts.StateSucceeded, contracts.StateSucceeded}},
	} {
		p, _ := admitFanout(t, s, "acme", len(tc.states), 3, store.Caps{Global: 10}, nil)
		var failed []string
		for _, c := range claimN(t, s, 10, at(time.Second)) {
			st := tc.states[*c.Index]
			if st == contracts.StateFailed {
				failed = append(failed, c.ID)
			}
			finishChild(t, s, c, st, at(2*time.Second))
		}
		par := get(t, s, p.ID)
		want, done := store.FinishParent(beforeEnd(par, len(tc.states)), failed)
		require.True(t, done, tc.name)
		require.Equal(t, want.State, par.State, tc.name)
		require.Equal(t, want.Error, par.Error, tc.name)
		requireJSON(t, tc.name+": result", want.Result, par.Result)
		require.Equal(t, &want.Counts, par.Children, tc.name)
		requireTime(t, "finished_at", ptr(at(2*time.Second)), par.FinishedAt)
		c, err := s.Stats(t.Context())
		require.NoError(t, err)
		require.Zero(t, c.TenantActive["acme"], "%s: the parent's slots are free", tc.name)
	}
}

// testRuleCancelCascade: a parent's cancel (store.DecideCancel says
// cascade) asks its running children to stop and ends every waiting one,
// released or held, cancelled with the reason; the parent ends cancelled
// with its last child.
func testRuleCancelCascade(t *testing.T, s store.Store) {
	ctx := t.Context()
	p, _ := admitFanout(t, s, "acme", 6, 3, store.Caps{}, nil)
	require.Equal(t, store.CancelCascade, store.DecideCancel(p, at(time.Second)).Action)
	got := claimN(t, s, 2, at(time.Second)) // children 0 and 1 run, 2 is ready, 3-5 are held
	require.Equal(t, []int{0, 1}, indexes(t, got))

	reason := contracts.CancelledByRequest
	par, running, err := s.CancelParent(ctx, p.ID, at(2*time.Second), reason)
	require.NoError(t, err)
	require.Equal(t, ids(got), ids(running))
	for _, r := range running {
		require.Equal(t, contracts.StateRunning, r.State)
		require.True(t, r.CancelRequested, "running children are asked to stop")
		require.True(t, get(t, s, r.ID).CancelRequested)
	}
	cancelled := children(t, s, p.ID, contracts.StateCancelled)
	require.Equal(t, []int{2, 3, 4, 5}, indexes(t, cancelled), "ready and held children end at once")
	want := store.CancelWaitingChange(at(2*time.Second), reason)
	for _, c := range cancelled {
		require.Equal(t, *want.Error, c.Error)
		requireTime(t, "finished_at", ptr(at(2*time.Second)), c.FinishedAt)
	}
	require.Equal(t, contracts.StateRunning, par.State)
	require.True(t, par.CancelRequested)
	require.Equal(t, &contracts.ChildCounts{Total: 6, Running: 2, Cancelled: 4}, par.Children)

	for i, r := range running {
		finish(t, s, r, contracts.StateCancelled, at(time.Duration(3+i)*time.Second))
	}
	par = get(t, s, p.ID)
	end, done := store.FinishParent(beforeEnd(par, 6), nil)
	require.True(t, done)
	require.Equal(t, contracts.StateCancelled, end.State)
	require.Equal(t, end.State, par.State)
	require.Equal(t, end.Error, par.Error)
	require.Equal(t, &end.Counts, par.Children)
	require.Equal(t, store.CancelNothing, store.DecideCancel(par, at(time.Minute)).Action, "an ended parent is not cascaded again")
}

// testRuleCancelOfOneJob: the change store.DecideCancel returns for a plain
// job applies as a compare-and-set: a pending job ends cancelled, a running
// one is asked to stop and keeps running.
func testRuleCancelJob(t *testing.T, s store.Store) {
	ctx := t.Context()
	pending := admitNew(t, s, "acme", base)
	running := start(t, s, admitNew(t, s, "acme", base), "w1", at(time.Second))
	for _, j := range []contracts.Job{get(t, s, pending.ID), get(t, s, running.ID)} {
		d := store.DecideCancel(j, at(2*time.Second))
		require.Equal(t, store.CancelWrite, d.Action)
		got, err := s.Transition(ctx, store.Expect{ID: j.ID, State: j.State, Claim: j.Claim}, d.Change)
		require.NoError(t, err)
		requireJob(t, d.Change.Apply(j), got)
		requireJob(t, got, get(t, s, j.ID))
	}
	require.Equal(t, contracts.StateCancelled, get(t, s, pending.ID).State)
	again := get(t, s, running.ID)
	require.True(t, again.CancelRequested)
	require.Equal(t, store.CancelTell, store.DecideCancel(again, at(3*time.Second)).Action)
	c, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, c.TenantActive["acme"], "the cancelled job's slot is free, the running one's held")
}

// testRuleAdmission: every admission, joined or not, ends as
// store.DecideAdmission says of the counters before it, and a job whose
// key an active job of its tenant holds joins that job.
func testRuleAdmission(t *testing.T, s store.Store) {
	ctx := t.Context()
	caps := store.Caps{Global: 5, Tenant: 3, TenantItems: 8}
	held := map[string]int{}
	active := func(scope string) int { return held[scope] }
	take := func(j contracts.Job) {
		for _, k := range caps.CapChecks(j) {
			held[k.Scope] += k.N
		}
	}
	admitOne := func(j contracts.Job, items int) store.AdmitResult {
		r := store.AdmitRequest{Job: j, Caps: caps}
		if items > 0 {
			r.Items = make([]json.RawMessage, items)
			for i := range r.Items {
				r.Items[i] = json.RawMessage(`{}`)
			}
			r.Job.Payload = nil
		}
		res, err := s.AdmitBatch(ctx, []store.AdmitRequest{r})
		require.NoError(t, err)
		return res[0]
	}
	parent := func(tenant string, window, items int) contracts.Job {
		j := NewJob(tenant, base)
		j.Concurrency = window
		j.Children = &contracts.ChildCounts{Total: items}
		return j
	}
	steps := []struct {
		job   contracts.Job
		items int
	}{
		{NewJob("a", base), 0},
		{NewJob("a", base), 0},
		{parent("a", 2, 4), 4}, // 2 slots: the tenant's cap
		{parent("a", 1, 6), 6}, // 1 slot, but 7 items: the tenant's items
		{NewJob("a", base), 0}, // the tenant's third slot
		{NewJob("a", base), 0}, // the tenant is full
		{NewJob("b", base), 0},
		{NewJob("b", base), 0},
		{NewJob("b", base), 0}, // the global cap
	}
	for i, st := range steps {
		want := store.DecideAdmission(st.job, caps, active)
		got := admitOne(st.job, st.items)
		require.Equal(t, want, got.Admission, "step %d", i)
		if want == store.Admitted {
			take(st.job)
		}
	}
	c, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, held[store.GlobalScope], c.Slots())
	require.Equal(t, held[store.TenantScope("a")], c.TenantActive["a"])

	// Dedup by key: joined before any cap is looked at, also when full.
	keyed := NewJob("b", base)
	keyed.Key = "k1"
	free := store.Caps{}
	first, adm, err := s.Admit(ctx, keyed, free)
	require.NoError(t, err)
	require.Equal(t, store.Admitted, adm)
	again := NewJob("b", base)
	again.Key = "k1"
	joined, adm, err := s.Admit(ctx, again, store.Caps{Global: 1})
	require.NoError(t, err)
	require.Equal(t, store.Joined, adm, "a full cap does not stop a join")
	require.Equal(t, first.ID, joined.ID)
	other := NewJob("c", base)
	other.Key = "k1"
	_, adm, err = s.Admit(ctx, other, free)
	require.NoError(t, err)
	require.Equal(t, store.Admitted, adm, "keys are per tenant")
}

// testRuleRetry: the change store.ResultChange makes of a failed run with
// runs left applies as the rule says (pending under the next claim, ready
// after the backoff, the error kept); the last run's failure ends it.
func testRuleRetry(t *testing.T, s store.Store) {
	ctx := t.Context()
	j := admitWith(t, s, "acme", base, store.Caps{}, func(j *contracts.Job) { j.MaxAttempts = 2 })
	backoff := func(runs int) time.Duration { return time.Duration(runs) * time.Minute }
	res := contracts.Result{JobID: j.ID, State: contracts.StateFailed, Error: contracts.JobError(contracts.ClassHandler, "boom")}
	for run := 1; run <= 2; run++ {
		now := at(time.Duration(run) * time.Hour)
		start(t, s, get(t, s, j.ID), "w1", now)
		running := get(t, s, j.ID)
		var want store.Change
		got, err := s.Update(ctx, j.ID, func(cur contracts.Job) (store.Change, error) {
			want = store.ResultChange(cur, res, now.Add(time.Second), backoff)
			return want, nil
		})
		require.NoError(t, err)
		// Update's job may lack its cold part (payload, inputs).
		requireJob(t, hot(want.Apply(running)), hot(got))
		requireJob(t, hot(got), hot(get(t, s, j.ID)))
		require.Len(t, got.Errors, run)
		if run == 1 {
			require.Equal(t, contracts.StatePending, got.State)
			require.Equal(t, running.Claim+1, got.Claim)
			requireTime(t, "next_dispatch_at", ptr(now.Add(time.Second+time.Minute)), got.NextDispatchAt)
			require.Empty(t, claimN(t, s, 10, now.Add(time.Second)), "not ready before its backoff")
		} else {
			require.Equal(t, contracts.StateFailed, got.State)
		}
	}
}

// testRuleRequeue: a running job whose heartbeat went quiet is found by
// Stale, store.StaleRule names it stale, and the change DecideRequeue
// returns takes it back to pending under the next claim, ready again,
// fencing off the old run; on its last run it ends failed.
func testRuleRequeue(t *testing.T, s store.Store) {
	ctx := t.Context()
	rule := store.StaleRule{Threshold: 30 * time.Second}
	j := admitWith(t, s, "acme", base, store.Caps{}, func(j *contracts.Job) { j.MaxAttempts = 2 })
	now := at(time.Minute)
	for run := 1; run <= 2; run++ {
		started := now
		running := start(t, s, get(t, s, j.ID), "w1", started)
		now = started.Add(time.Minute)
		found, err := s.Stale(ctx, store.StaleQuery{Now: now, HeartbeatBefore: now.Add(-rule.Threshold)})
		require.NoError(t, err)
		require.Equal(t, []string{j.ID}, ids(found))
		require.Equal(t, contracts.ReasonStale, rule.Reason(found[0], now))
		before := get(t, s, j.ID)
		d := rule.DecideRequeue(before, contracts.Requeue{JobID: j.ID, Claim: running.Claim, State: running.State,
			Reason: contracts.ReasonStale}, now)
		got, err := s.Transition(ctx, store.Expect{ID: j.ID, State: running.State, Claim: running.Claim}, d.Change)
		require.NoError(t, err)
		requireJob(t, d.Change.Apply(before), got)
		// The old run's report is fenced off.
		_, err = s.Transition(ctx, store.Expect{ID: j.ID, State: contracts.StateRunning, Claim: running.Claim},
			store.Change{Now: now, State: contracts.StateSucceeded})
		require.ErrorIs(t, err, store.ErrConflict)
		if run == 1 {
			require.Equal(t, store.RequeueRunAgain, d.Action)
			require.Equal(t, contracts.StatePending, got.State)
			require.Equal(t, running.Claim+1, got.Claim)
			require.Empty(t, got.Worker)
			again := claimN(t, s, 10, now)
			require.Equal(t, []string{j.ID}, ids(again), "ready again at once")
			require.Equal(t, got.Claim+1, again[0].Claim)
			now = now.Add(time.Second)
			// claimN started it: give it back to run it from the top.
			_, err = s.Transition(ctx, store.Expect{ID: j.ID, State: contracts.StateRunning, Claim: again[0].Claim},
				store.ReleaseChange(now, nil))
			require.NoError(t, err)
		} else {
			require.Equal(t, store.RequeueEnd, d.Action)
			require.Equal(t, contracts.StateFailed, got.State)
			require.Contains(t, got.Error, "stale:")
		}
	}
}
