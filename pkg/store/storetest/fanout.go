package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

var fanoutTests = []test{
	{"FanoutAdmitsParentAndChildren", testFanoutAdmit},
	{"FanoutIsAdmittedWhole", testFanoutAdmitWhole},
	{"FanoutNotAdmittedLeavesNothing", testFanoutNotAdmittedLeavesNothing},
	{"FanoutWindowRefills", testFanoutWindow},
	{"FanoutParentEndsWithItsChildren", testFanoutEnds},
	{"FanoutFailFastCancelsTheRest", testFanoutFailFast},
	{"FanoutCancelParent", testFanoutCancelParent},
	{"FanoutCancelHeldChild", testFanoutCancelHeldChild},
	{"FanoutClaimStartsParent", testFanoutClaimStartsParent},
	{"FanoutDedupAndPurge", testFanoutDedupPurge},
	{"RunLimitsRoundTrip", testRunLimits},
	{"FanoutParentsHoldNoKeySlot", testFanoutKeys},
}

// testFanoutKeys: the children of fan-outs with a concurrency key share
// its slots; the parents, running or not, hold none.
func testFanoutKeys(t *testing.T, s store.Store) {
	key := func(j *contracts.Job) { j.ConcurrencyKey, j.ConcurrencyLimit = "db", 2 }
	a, _ := admitFanout(t, s, "acme", 2, 1, store.Caps{}, key)
	b, _ := admitFanout(t, s, "acme", 2, 1, store.Caps{}, key)
	got := claimN(t, s, 10, at(time.Second))
	require.ElementsMatch(t, []string{contracts.ChildID(a.ID, 0), contracts.ChildID(b.ID, 0)}, ids(got))
	a0 := start(t, s, got[0], "w1", at(time.Second))
	start(t, s, got[1], "w1", at(time.Second))
	require.Equal(t, contracts.StateRunning, get(t, s, a.ID).State)
	finish(t, s, a0, contracts.StateSucceeded, at(2*time.Second))
	next := claimN(t, s, 10, at(2*time.Second))
	require.Len(t, next, 1, "one child runs under the key: room for the next, whatever the parents")
	require.Equal(t, contracts.ChildID(get(t, s, a0.Parent).ID, 1), next[0].ID)
}

// testRunLimits: a job's stall timeout and max runtime are stored, and a
// fan-out's children inherit them.
func testRunLimits(t *testing.T, s store.Store) {
	limits := contracts.RunLimits{StallTimeout: contracts.Duration(90 * time.Second), MaxRuntime: contracts.Duration(time.Hour)}
	inputs := []contracts.InputRef{{Name: "reads", URI: "file:///data/x", SHA256: strings.Repeat("ab", 32), Version: "v2"}}
	edit := func(j *contracts.Job) { j.RunLimits, j.Inputs = limits, inputs }
	j := admitWith(t, s, "acme", base, store.Caps{}, edit)
	require.Equal(t, limits, j.RunLimits)
	require.Equal(t, inputs, j.Inputs)
	requireJob(t, j, get(t, s, j.ID))
	p, _ := admitFanout(t, s, "acme", 2, 1, store.Caps{}, edit)
	require.Equal(t, limits, get(t, s, contracts.ChildID(p.ID, 1)).RunLimits)
	require.Equal(t, inputs, get(t, s, contracts.ChildID(p.ID, 1)).Inputs)
	claimed := claimN(t, s, 10, at(time.Second))
	require.NotEmpty(t, claimed)
	for _, c := range claimed {
		require.Equal(t, limits, c.RunLimits, "claims carry them to the offer")
	}
}

// items are n JSON items {"i":0}, {"i":1}, …
func items(n int) []json.RawMessage {
	out := make([]json.RawMessage, n)
	for i := range out {
		out[i] = json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))
	}
	return out
}

// admitFanout admits a parent of tenant over n items with window w under
// caps and returns the outcome.
func admitFanout(t *testing.T, s store.Store, tenant string, n, w int, caps store.Caps, edit func(*contracts.Job)) (contracts.Job, store.Admission) {
	t.Helper()
	j := NewJob(tenant, base)
	j.Payload = nil
	j.Concurrency = w
	if edit != nil {
		edit(&j)
	}
	res, err := s.AdmitBatch(t.Context(), []store.AdmitRequest{{Job: j, Caps: caps, Items: items(n)}})
	require.NoError(t, err)
	require.Len(t, res, 1)
	return res[0].Job, res[0].Admission
}

// children lists every child of parent, by index.
func children(t *testing.T, s store.Store, parent string, state contracts.JobState) []contracts.Job {
	t.Helper()
	all, _ := listAll(t, s, store.Query{Parent: parent, State: state, Limit: 3})
	// List is newest first: the highest index first.
	for i, j := 0, len(all)-1; i < j; i, j = i+1, j-1 {
		all[i], all[j] = all[j], all[i]
	}
	return all
}

// indexes lists the indexes of children.
func indexes(t *testing.T, jobs []contracts.Job) []int {
	t.Helper()
	out := make([]int, len(jobs))
	for i, j := range jobs {
		require.NotNil(t, j.Index)
		out[i] = *j.Index
	}
	return out
}

// finishChild runs a claimed or pending child to state.
func finishChild(t *testing.T, s store.Store, c contracts.Job, state contracts.JobState, now time.Time) contracts.Job {
	t.Helper()
	if c.State == contracts.StatePending {
		c = start(t, s, c, "w1", now)
	}
	return finish(t, s, c, state, now)
}

func testFanoutAdmit(t *testing.T, s store.Store) {
	p, adm := admitFanout(t, s, "acme", 5, 2, store.Caps{Global: 10}, nil)
	require.Equal(t, store.Admitted, adm)
	require.True(t, p.IsParent())
	require.Equal(t, &contracts.ChildCounts{Total: 5, Pending: 5}, p.Children)
	require.Equal(t, 2, p.Concurrency)
	requireJob(t, p, get(t, s, p.ID))

	kids := children(t, s, p.ID, "")
	require.Len(t, kids, 5)
	for i, c := range kids {
		require.Equal(t, contracts.ChildID(p.ID, i), c.ID)
		require.Equal(t, p.ID, c.Parent)
		require.Equal(t, i, *c.Index)
		require.Equal(t, contracts.StatePending, c.State)
		require.Equal(t, p.Kind, c.Kind)
		require.Equal(t, p.Tenant, c.Tenant)
		require.Equal(t, p.Priority, c.Priority)
		require.Equal(t, p.MaxAttempts, c.MaxAttempts)
		require.Empty(t, c.Key)
		requireJSON(t, "payload", json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), c.Payload)
		requireJob(t, c, get(t, s, c.ID))
	}

	// The top-level list shows the parent, not its children.
	top, _ := listAll(t, s, store.Query{})
	require.Equal(t, []string{p.ID}, ids(top))
	// The parent holds min(window, items) slots; children hold none.
	c, err := s.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, 2, c.TenantActive["acme"])
	require.Equal(t, 6, c.ByState[contracts.StatePending])
	// The tenant's own counts hold its children, held ones as pending.
	own, err := s.TenantCounts(t.Context(), "acme")
	require.NoError(t, err)
	require.Equal(t, 6, own[contracts.StatePending])
	other, err := s.TenantCounts(t.Context(), "globex")
	require.NoError(t, err)
	require.Zero(t, other[contracts.StatePending])

	// Only the window's children are ready, never the parent.
	got := claimN(t, s, 10, at(time.Second))
	require.Equal(t, []string{contracts.ChildID(p.ID, 0), contracts.ChildID(p.ID, 1)}, ids(got))
	require.Empty(t, claimN(t, s, 10, at(2*time.Second)))
	// Nor is it stale, or past a deadline, whatever the time.
	stale, err := s.Stale(t.Context(), store.StaleQuery{Now: at(48 * time.Hour), DeadlineBefore: at(48 * time.Hour),
		HeartbeatBefore: at(48 * time.Hour), StartedBefore: at(48 * time.Hour), Kind: p.Kind})
	require.NoError(t, err)
	for _, j := range stale {
		require.NotEqual(t, p.ID, j.ID, "the parent is never stale")
		require.NotContains(t, []int{2, 3, 4}, *j.Index, "held children are never stale")
	}
	drift, err := s.Reconcile(t.Context())
	require.NoError(t, err)
	require.Zero(t, drift)
}

// testFanoutNotAdmittedLeavesNothing: in one batch, a fan-out admitted, one
// joining it by its key and one the tenant's items cap refuses: only the
// first and its children are there, in the lists, the counts and the
// ready queue; the others left no child (a store that staged them
// deleted them again) and no drift.
func testFanoutNotAdmittedLeavesNothing(t *testing.T, s store.Store) {
	parent := func(key string) contracts.Job {
		j := NewJob("acme", base)
		j.Payload, j.Concurrency, j.Key = nil, 2, key
		return j
	}
	first, joining, refused := parent("k"), parent("k"), parent("")
	caps := store.Caps{TenantItems: 20}
	res, err := s.AdmitBatch(t.Context(), []store.AdmitRequest{
		{Job: first, Caps: caps, Items: items(8)},
		{Job: joining, Caps: caps, Items: items(8)},
		{Job: refused, Caps: caps, Items: items(12)},
	})
	require.NoError(t, err)
	require.Equal(t, []store.Admission{store.Admitted, store.Joined, store.RejectedTenantItems},
		[]store.Admission{res[0].Admission, res[1].Admission, res[2].Admission})
	require.Equal(t, first.ID, res[1].Job.ID, "the joining fan-out gets the first")

	top, _ := listAll(t, s, store.Query{})
	require.Equal(t, []string{first.ID}, ids(top))
	require.Len(t, children(t, s, first.ID, ""), 8)
	for _, id := range []string{joining.ID, refused.ID} {
		_, err := s.Get(t.Context(), id)
		require.ErrorIs(t, err, store.ErrNotFound)
		require.Empty(t, children(t, s, id, ""), "no child of a fan-out not admitted")
		_, err = s.Get(t.Context(), contracts.ChildID(id, 0))
		require.ErrorIs(t, err, store.ErrNotFound)
	}
	own, err := s.TenantCounts(t.Context(), "acme")
	require.NoError(t, err)
	require.Equal(t, 9, own[contracts.StatePending], "the parent and its children only")
	require.Len(t, claimN(t, s, 100, at(time.Second)), 2, "the first window only")
	drift, err := s.Reconcile(t.Context())
	require.NoError(t, err)
	require.Zero(t, drift)
}

func testFanoutAdmitWhole(t *testing.T, s store.Store) {
	caps := store.Caps{Global: 4, Tenant: 3}
	admitWith(t, s, "acme", base, caps, nil)
	// Window 3 needs 3 slots: the global cap has them, the tenant's not.
	_, adm := admitFanout(t, s, "acme", 10, 3, caps, nil)
	require.Equal(t, store.RejectedTenant, adm)
	_, adm = admitFanout(t, s, "globex", 10, 4, caps, nil)
	require.Equal(t, store.RejectedGlobal, adm)
	top, _ := listAll(t, s, store.Query{})
	require.Len(t, top, 1, "a refused fan-out writes nothing")
	c, err := s.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, c.ByState[contracts.StatePending], "no child of a refused fan-out")

	// Fewer items than the window: the parent holds one slot per item.
	p, adm := admitFanout(t, s, "acme", 2, 50, caps, nil)
	require.Equal(t, store.Admitted, adm)
	require.Equal(t, 2, p.Slots())
	_, adm = admitFanout(t, s, "acme", 5, 1, caps, nil)
	require.Equal(t, store.RejectedTenant, adm)
}

func testFanoutWindow(t *testing.T, s store.Store) {
	p, _ := admitFanout(t, s, "acme", 5, 2, store.Caps{}, nil)
	got := claimN(t, s, 10, at(time.Second))
	require.Len(t, got, 2)
	c0 := start(t, s, got[0], "w1", at(2*time.Second))
	par := get(t, s, p.ID)
	require.Equal(t, contracts.StateRunning, par.State, "running from the first child's start")
	requireTime(t, "started_at", ptr(at(time.Second)), par.StartedAt)
	require.Equal(t, &contracts.ChildCounts{Total: 5, Pending: 3, Running: 2}, par.Children, "both claims started their children")

	// One ends: the next held child is ready at once.
	finish(t, s, c0, contracts.StateSucceeded, at(3*time.Second))
	got = claimN(t, s, 10, at(3*time.Second))
	require.Equal(t, []string{contracts.ChildID(p.ID, 2)}, ids(got))
	par = get(t, s, p.ID)
	require.Equal(t, &contracts.ChildCounts{Total: 5, Pending: 2, Running: 2, Succeeded: 1}, par.Children)
	require.Equal(t, 20.0, par.Progress.Percent)

	// A retry keeps its place in the window.
	c2 := start(t, s, got[0], "w1", at(4*time.Second))
	_, err := s.Transition(t.Context(), store.Expect{ID: c2.ID, State: contracts.StateRunning, Claim: c2.Claim},
		store.Change{Now: at(5 * time.Second), State: contracts.StatePending, Claim: c2.Claim + 1, ClearClaim: true})
	require.NoError(t, err)
	got = claimN(t, s, 10, at(5*time.Second))
	require.Equal(t, []string{c2.ID}, ids(got), "child 2 runs again in its own place, child 3 still waits")
}

func testFanoutEnds(t *testing.T, s store.Store) {
	p, _ := admitFanout(t, s, "acme", 4, 3, store.Caps{}, nil)
	failed := ""
	for round := 0; ; round++ {
		got := claimN(t, s, 10, at(time.Duration(round+1)*time.Second))
		if len(got) == 0 {
			break
		}
		require.LessOrEqual(t, len(got), 3, "never more than the window")
		for _, c := range got {
			state := contracts.StateSucceeded
			if *c.Index == 1 {
				state, failed = contracts.StateFailed, c.ID
			}
			finishChild(t, s, c, state, at(time.Duration(round+1)*time.Second))
		}
	}
	par := get(t, s, p.ID)
	require.Equal(t, contracts.StateFailed, par.State, "a failed child fails the parent at the end")
	require.Equal(t, &contracts.ChildCounts{Total: 4, Succeeded: 3, Failed: 1}, par.Children)
	var res contracts.FanoutResult
	require.NoError(t, json.Unmarshal(par.Result, &res))
	require.Equal(t, []string{failed}, res.Failed)
	require.Equal(t, 3, res.Children.Succeeded)
	require.NotEmpty(t, par.Error)
	c, err := s.Stats(t.Context())
	require.NoError(t, err)
	require.Zero(t, c.TenantActive["acme"], "the parent's slots are free")
	drift, err := s.Reconcile(t.Context())
	require.NoError(t, err)
	require.Zero(t, drift)

	// All succeed: the parent succeeds.
	q, _ := admitFanout(t, s, "acme", 2, 2, store.Caps{}, nil)
	for _, c := range claimN(t, s, 10, at(time.Minute)) {
		finishChild(t, s, c, contracts.StateSucceeded, at(time.Minute))
	}
	par = get(t, s, q.ID)
	require.Equal(t, contracts.StateSucceeded, par.State)
	require.Empty(t, par.Error)
	requireTime(t, "finished_at", ptr(at(time.Minute)), par.FinishedAt)
}

func testFanoutFailFast(t *testing.T, s store.Store) {
	p, _ := admitFanout(t, s, "acme", 6, 2, store.Caps{}, func(j *contracts.Job) { j.FailFast = true })
	got := claimN(t, s, 10, at(time.Second))
	require.Len(t, got, 2)
	c0 := start(t, s, got[0], "w1", at(time.Second))
	c1 := start(t, s, got[1], "w1", at(time.Second))
	finish(t, s, c0, contracts.StateFailed, at(2*time.Second))

	cancelled := children(t, s, p.ID, contracts.StateCancelled)
	require.Equal(t, []int{2, 3, 4, 5}, indexes(t, cancelled), "the waiting children end at once")
	require.True(t, get(t, s, c1.ID).CancelRequested, "the running child is asked to stop")
	require.Equal(t, contracts.StateRunning, get(t, s, p.ID).State)
	require.Empty(t, claimN(t, s, 10, at(3*time.Second)))

	finish(t, s, c1, contracts.StateCancelled, at(3*time.Second))
	par := get(t, s, p.ID)
	require.Equal(t, contracts.StateFailed, par.State)
	require.Equal(t, &contracts.ChildCounts{Total: 6, Failed: 1, Cancelled: 5}, par.Children)
}

func testFanoutCancelParent(t *testing.T, s store.Store) {
	ctx := t.Context()
	p, _ := admitFanout(t, s, "acme", 5, 2, store.Caps{Global: 10}, nil)
	got := claimN(t, s, 1, at(time.Second))
	c0 := start(t, s, got[0], "w1", at(time.Second)) // child 1 waits

	par, running, err := s.CancelParent(ctx, p.ID, at(2*time.Second), "cancelled: by request")
	require.NoError(t, err)
	require.Equal(t, []string{c0.ID}, ids(running))
	require.True(t, running[0].CancelRequested)
	require.Equal(t, contracts.StateRunning, par.State, "a running child keeps the parent running")
	require.True(t, par.CancelRequested)
	require.Equal(t, &contracts.ChildCounts{Total: 5, Running: 1, Cancelled: 4}, par.Children)
	requireJob(t, par, get(t, s, p.ID))

	// Again: idempotent.
	again, running, err := s.CancelParent(ctx, p.ID, at(3*time.Second), "cancelled: by request")
	require.NoError(t, err)
	require.Len(t, running, 1)
	require.Equal(t, par.Children, again.Children)

	finish(t, s, c0, contracts.StateCancelled, at(4*time.Second))
	par = get(t, s, p.ID)
	require.Equal(t, contracts.StateCancelled, par.State)
	c, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, c.TenantActive["acme"])

	// Nothing running: the parent ends at once.
	q, _ := admitFanout(t, s, "acme", 3, 1, store.Caps{}, nil)
	par, running, err = s.CancelParent(ctx, q.ID, at(5*time.Second), "cancelled: by request")
	require.NoError(t, err)
	require.Empty(t, running)
	require.Equal(t, contracts.StateCancelled, par.State)
	require.Equal(t, &contracts.ChildCounts{Total: 3, Cancelled: 3}, par.Children)

	plain := admitNew(t, s, "acme", base)
	_, _, err = s.CancelParent(ctx, plain.ID, at(5*time.Second), "x")
	require.ErrorIs(t, err, store.ErrBadTransition)
	_, _, err = s.CancelParent(ctx, "no-such-job", at(5*time.Second), "x")
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testFanoutCancelHeldChild(t *testing.T, s store.Store) {
	p, _ := admitFanout(t, s, "acme", 3, 1, store.Caps{}, nil)
	held := get(t, s, contracts.ChildID(p.ID, 1))
	finish(t, s, held, contracts.StateCancelled, at(time.Second))
	// Cancelling a waiting child frees no place in the window.
	got := claimN(t, s, 10, at(time.Second))
	require.Equal(t, []string{contracts.ChildID(p.ID, 0)}, ids(got))
	finishChild(t, s, got[0], contracts.StateSucceeded, at(2*time.Second))
	// Child 1 is skipped: child 2 is next.
	got = claimN(t, s, 10, at(2*time.Second))
	require.Equal(t, []string{contracts.ChildID(p.ID, 2)}, ids(got))
	finishChild(t, s, got[0], contracts.StateSucceeded, at(3*time.Second))
	par := get(t, s, p.ID)
	require.Equal(t, contracts.StateFailed, par.State, "a cancelled child does not count as success")
	require.Equal(t, &contracts.ChildCounts{Total: 3, Succeeded: 2, Cancelled: 1}, par.Children)
}

// testFanoutClaimStartsParent: the claim that starts a fan-out's children
// starts the parent; so does a heartbeat that confirms a child given back
// (a worker that accepted after all).
func testFanoutClaimStartsParent(t *testing.T, s store.Store) {
	p, _ := admitFanout(t, s, "acme", 2, 2, store.Caps{}, nil)
	got := claimN(t, s, 10, at(time.Second))
	require.Len(t, got, 2)
	par := get(t, s, p.ID)
	require.Equal(t, contracts.StateRunning, par.State)
	requireTime(t, "started_at", ptr(at(time.Second)), par.StartedAt)
	require.Equal(t, 2, par.Children.Running)
	leases := []contracts.Lease{{JobID: got[0].ID, Claim: got[0].Claim}, {JobID: got[1].ID, Claim: got[1].Claim}}
	out, err := s.Heartbeat(t.Context(), "w1", leases, at(2*time.Second), 0)
	require.NoError(t, err)
	require.Len(t, out.Renewed, 2)

	q, _ := admitFanout(t, s, "acme", 1, 1, store.Caps{}, nil)
	c := claimN(t, s, 10, at(3*time.Second))
	require.Len(t, c, 1)
	_, err = s.Transition(t.Context(), store.Expect{ID: c[0].ID, State: contracts.StateRunning, Claim: c[0].Claim},
		store.ReleaseChange(at(3*time.Second), nil))
	require.NoError(t, err)
	require.Equal(t, contracts.StateRunning, get(t, s, q.ID).State, "a parent once started stays started")
	out, err = s.Heartbeat(t.Context(), "w1", []contracts.Lease{leaseOf(c[0])}, at(4*time.Second), 0)
	require.NoError(t, err)
	require.Len(t, out.Promoted, 1, "the worker accepted after all: its heartbeat confirms the run")
	require.Equal(t, q.ID, out.Started[0].Parent)
	require.Equal(t, 1, out.Started[0].Attempt)
	require.Equal(t, 1, get(t, s, q.ID).Children.Running)
}

func testFanoutDedupPurge(t *testing.T, s store.Store) {
	ctx := t.Context()
	key := func(j *contracts.Job) { j.Key = "nightly" }
	p, adm := admitFanout(t, s, "acme", 2, 2, store.Caps{}, key)
	require.Equal(t, store.Admitted, adm)
	again, adm := admitFanout(t, s, "acme", 7, 2, store.Caps{}, key)
	require.Equal(t, store.Joined, adm)
	require.Equal(t, p.ID, again.ID)

	for _, c := range claimN(t, s, 10, at(time.Second)) {
		finishChild(t, s, c, contracts.StateSucceeded, at(time.Second))
	}
	require.Equal(t, contracts.StateSucceeded, get(t, s, p.ID).State)
	n, err := s.Purge(ctx, at(time.Hour), 10)
	require.NoError(t, err)
	require.Equal(t, 3, n, "the parent and its children go together")
	_, err = s.Get(ctx, contracts.ChildID(p.ID, 0))
	require.True(t, errors.Is(err, store.ErrNotFound))
}
