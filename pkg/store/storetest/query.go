package storetest

import (
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

var queryTests = []test{
	{"ListFiltersAndOrder", testListFiltersAndOrder},
	{"ListPagination", testListPagination},
	{"ListPaginationTies", testListPaginationTies},
	{"ListRunningPages", testListRunningPages},
	{"ListDefaultLimit", testListDefaultLimit},
	{"ListBadCursor", testListBadCursor},
	{"Stats", testStats},
	{"StatsActiveIsOneReading", testStatsActiveIsOneReading},
	{"Ping", testPing},
}

// list returns one page that must load.
func list(t *testing.T, s store.Store, q store.Query) ([]contracts.Job, string) {
	t.Helper()
	jobs, next, err := s.List(t.Context(), q)
	require.NoError(t, err)
	return jobs, next
}

// listAll pages through q and returns every job and the page sizes.
func listAll(t *testing.T, s store.Store, q store.Query) ([]contracts.Job, []int) {
	t.Helper()
	var (
		all   []contracts.Job
		sizes []int
	)
	for range 1000 {
		jobs, next := list(t, s, q)
		all = append(all, jobs...)
		sizes = append(sizes, len(jobs))
		if next == "" {
			return all, sizes
		}
		require.NotEqual(t, q.Cursor, next, "cursor does not move")
		q.Cursor = next
	}
	t.Fatal("pagination never ends")
	return nil, nil
}

// newestFirst sorts jobs as List must: created_at, then id, descending.
func newestFirst(jobs []contracts.Job) []contracts.Job {
	out := slices.Clone(jobs)
	slices.SortFunc(out, func(a, b contracts.Job) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		switch {
		case a.ID > b.ID:
			return -1
		case a.ID < b.ID:
			return 1
		}
		return 0
	})
	return out
}

// pick keeps the jobs keep says yes to.
func pick(jobs []contracts.Job, keep func(contracts.Job) bool) []contracts.Job {
	var out []contracts.Job
	for _, j := range jobs {
		if keep(j) {
			out = append(out, j)
		}
	}
	return out
}

func testListFiltersAndOrder(t *testing.T, s store.Store) {
	var all []contracts.Job
	for i := range 12 {
		j := NewJob([]string{"a", "b", "c"}[i%3], at(time.Duration(i%5)*time.Second))
		j.Kind = []string{"mail", "resize"}[i%2]
		j = admit(t, s, j)
		switch i % 4 {
		case 1:
			j = start(t, s, j, "w1", at(time.Minute))
		case 2:
			j = finish(t, s, j, contracts.StateCancelled, at(time.Minute))
		}
		all = append(all, j)
	}

	jobs, next := list(t, s, store.Query{})
	require.Empty(t, next)
	require.Equal(t, ids(newestFirst(all)), ids(jobs))
	requireJob(t, get(t, s, jobs[0].ID), jobs[0])

	for _, q := range []store.Query{
		{Tenant: "a"},
		{Tenant: "b", State: contracts.StatePending},
		{State: contracts.StateRunning},
		{State: contracts.StateCancelled, Kind: "mail"},
		{Kind: "resize"},
		{Tenant: "c", Kind: "mail", State: contracts.StatePending},
		{Tenant: "nobody"},
		{State: contracts.StateSucceeded},
	} {
		want := pick(all, func(j contracts.Job) bool {
			return (q.Tenant == "" || j.Tenant == q.Tenant) &&
				(q.State == "" || j.State == q.State) &&
				(q.Kind == "" || j.Kind == q.Kind)
		})
		jobs, next := list(t, s, q)
		require.Empty(t, next, "%+v", q)
		require.Equal(t, ids(newestFirst(want)), ids(jobs), "%+v", q)
	}
}

func testListPagination(t *testing.T, s store.Store) {
	var all []contracts.Job
	for i := range 23 {
		// Three jobs per second, so pages split ties on created_at.
		all = append(all, admitNew(t, s, []string{"a", "b"}[i%2], at(time.Duration(i/3)*time.Second)))
	}

	got, sizes := listAll(t, s, store.Query{Limit: 5})
	require.Equal(t, []int{5, 5, 5, 5, 3}, sizes)
	require.Equal(t, ids(newestFirst(all)), ids(got), "no duplicates, no gaps, newest first")

	// An exact multiple of the limit ends without an empty page.
	got, sizes = listAll(t, s, store.Query{Tenant: "b", Limit: 11})
	require.Equal(t, []int{11}, sizes)
	require.Equal(t, ids(newestFirst(pick(all, func(j contracts.Job) bool { return j.Tenant == "b" }))), ids(got))

	// Tenant scoping holds on every page.
	got, sizes = listAll(t, s, store.Query{Tenant: "a", Limit: 4})
	require.Equal(t, []int{4, 4, 4}, sizes)
	require.Equal(t, ids(newestFirst(pick(all, func(j contracts.Job) bool { return j.Tenant == "a" }))), ids(got))

	// A job admitted while paging is newer than the cursor: it does not
	// shift the pages still to come.
	first, next := list(t, s, store.Query{Limit: 10})
	admitNew(t, s, "a", at(time.Hour))
	rest, _ := listAll(t, s, store.Query{Limit: 10, Cursor: next})
	require.Equal(t, ids(newestFirst(all)), append(ids(first), ids(rest)...))
}

// testListRunningPages: the running jobs page newest first, ties on
// created_at split by id, per tenant too, among pending and finished jobs
// of the same times (the embedded store lists running jobs from another
// index than the other states).
func testListRunningPages(t *testing.T, s store.Store) {
	var running []contracts.Job
	for i := range 17 {
		// Three jobs per second, so pages split ties on created_at.
		j := admitNew(t, s, []string{"a", "b"}[i%2], at(time.Duration(i/3)*time.Second))
		switch i % 3 {
		case 0, 1:
			running = append(running, start(t, s, j, fmt.Sprintf("w%d", i%4), at(time.Minute)))
		case 2:
			j = start(t, s, j, "w9", at(time.Minute))
			finish(t, s, j, contracts.StateSucceeded, at(2*time.Minute))
		}
	}
	got, sizes := listAll(t, s, store.Query{State: contracts.StateRunning, Limit: 4})
	require.Equal(t, []int{4, 4, 4}, sizes)
	require.Equal(t, ids(newestFirst(running)), ids(got), "no duplicates, no gaps, newest first")

	got, _ = listAll(t, s, store.Query{Tenant: "b", State: contracts.StateRunning, Limit: 2})
	require.Equal(t, ids(newestFirst(pick(running, func(j contracts.Job) bool { return j.Tenant == "b" }))), ids(got))
	for _, j := range got {
		require.Equal(t, contracts.StateRunning, j.State)
	}
}

func testListPaginationTies(t *testing.T, s store.Store) {
	var all []contracts.Job
	for range 7 {
		all = append(all, admitNew(t, s, "a", base))
	}
	got, sizes := listAll(t, s, store.Query{Limit: 3})
	require.Equal(t, []int{3, 3, 1}, sizes)
	require.Equal(t, ids(newestFirst(all)), ids(got))
}

func testListDefaultLimit(t *testing.T, s store.Store) {
	for i := range 55 {
		admitNew(t, s, "a", at(time.Duration(i)*time.Millisecond))
	}
	jobs, next := list(t, s, store.Query{})
	require.Len(t, jobs, 50)
	require.NotEmpty(t, next)
	jobs, next = list(t, s, store.Query{Cursor: next})
	require.Len(t, jobs, 5)
	require.Empty(t, next)
}

func testListBadCursor(t *testing.T, s store.Store) {
	admitNew(t, s, "a", base)
	for _, c := range []string{
		"!!!",
		"%%%",
		base64.RawURLEncoding.EncodeToString([]byte("garbage")),
		base64.RawURLEncoding.EncodeToString([]byte("\x00\xff")),
	} {
		_, _, err := s.List(t.Context(), store.Query{Cursor: c})
		require.ErrorIs(t, err, store.ErrBadCursor, "cursor %q", c)
	}
}

func testStats(t *testing.T, s store.Store) {
	c := stats(t, s)
	require.Len(t, c.ByState, len(contracts.AllStates))
	for _, st := range contracts.AllStates {
		v, ok := c.ByState[st]
		require.True(t, ok, "state %s missing", st)
		require.Zero(t, v)
	}
	require.Empty(t, c.TenantActive)

	admitNew(t, s, "a", base)
	admitNew(t, s, "a", base)
	start(t, s, admitNew(t, s, "a", base), "w1", at(time.Second))
	admitNew(t, s, "b", base)
	finish(t, s, start(t, s, admitNew(t, s, "c", base), "w1", at(time.Second)), contracts.StateSucceeded, at(2*time.Second))
	finish(t, s, admitNew(t, s, "c", base), contracts.StateFailed, at(2*time.Second))
	finish(t, s, admitNew(t, s, "b", base), contracts.StateCancelled, at(2*time.Second))

	c = stats(t, s)
	require.Equal(t, map[contracts.JobState]int{
		contracts.StatePending:   3,
		contracts.StateRunning:   1,
		contracts.StateSucceeded: 1,
		contracts.StateFailed:    1,
		contracts.StateCancelled: 1,
	}, c.ByState)
	require.Equal(t, map[string]int{"a": 3, "b": 1}, c.TenantActive)
	require.Equal(t, 4, c.Active())

	// Each tenant's own counts, every state present; a tenant with no
	// job has zeros.
	zero := map[contracts.JobState]int{}
	for _, st := range contracts.AllStates {
		zero[st] = 0
	}
	want := func(m map[contracts.JobState]int) map[contracts.JobState]int {
		out := maps.Clone(zero)
		maps.Copy(out, m)
		return out
	}
	for tenant, counts := range map[string]map[contracts.JobState]int{
		"a": want(map[contracts.JobState]int{contracts.StatePending: 2, contracts.StateRunning: 1}),
		"b": want(map[contracts.JobState]int{contracts.StatePending: 1, contracts.StateCancelled: 1}),
		"c": want(map[contracts.JobState]int{contracts.StateSucceeded: 1, contracts.StateFailed: 1}),
		"d": zero,
	} {
		got, err := s.TenantCounts(t.Context(), tenant)
		require.NoError(t, err)
		require.Equal(t, counts, got, "tenant %s", tenant)
	}
}

// testStatsActiveIsOneReading starts jobs while Stats runs: every reading
// must count each active job once, pending or running, never both or
// neither (as counting the states one after the other would).
func testStatsActiveIsOneReading(t *testing.T, s store.Store) {
	const n = 40
	jobs := make([]contracts.Job, n)
	for i := range jobs {
		jobs[i] = admitNew(t, s, "a", base)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, j := range jobs {
			_, err := s.Transition(t.Context(),
				store.Expect{ID: j.ID, State: contracts.StatePending, Claim: j.Claim},
				store.Change{Now: at(time.Second), State: contracts.StateRunning, Claim: j.Claim + 1, IncAttempt: true,
					Worker: ptr("w1"), ClearClaim: true, StartedAt: ptr(at(time.Second)), HeartbeatAt: ptr(at(time.Second))})
			if err != nil {
				t.Errorf("start %s: %v", j.ID, err)
				return
			}
		}
	}()
	readings := 0
	for running := false; !running; readings++ {
		select {
		case <-done:
			running = true
		default:
		}
		c := stats(t, s)
		require.Equal(t, n, c.Active(), "reading %d: %v", readings, c.ByState)
		require.Equal(t, map[string]int{"a": n}, c.TenantActive, "reading %d", readings)
	}
	require.Equal(t, n, stats(t, s).ByState[contracts.StateRunning])
}

func testPing(t *testing.T, s store.Store) {
	require.NoError(t, s.Ping(t.Context()))
}
