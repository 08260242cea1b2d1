package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

var claimTests = []test{
	{"ClaimTakesTheBestReadyJobs", testClaimOrder},
	{"ClaimSkipsJobsNotReady", testClaimSkipsNotReady},
	{"ClaimIsFairAcrossTenants", testClaimFair},
	{"ClaimHonoursTenantWeights", testClaimWeights},
	{"ClaimHonoursConcurrencyKeys", testClaimKeys},
	{"ClaimPerKindAndBounded", testClaimPerKind},
	{"ClaimStartsAtItsClock", testClaimClock},
	{"ClaimBoundedByWorkerCapacity", testClaimCapacity},
	{"ConcurrentClaimsNeverShareAJob", testConcurrentClaims},
	{"ConcurrentClaimsHonourAKeyLimit", testConcurrentClaimsKeyLimit},
	{"ConcurrentClaimsHonourAWorkersCapacity", testConcurrentClaimsWorkerCapacity},
	{"RunErrorsRoundTrip", testRunErrorsRoundTrip},
	{"StaleFindsPendingPastTheirDeadline", testStaleDeadline},
	{"BacklogCountsReadyJobs", testBacklog},
}

// claimN claims up to n jobs of test.kind at now for a minute.
func claimN(t *testing.T, s store.Store, n int, now time.Time) []contracts.Job {
	t.Helper()
	got, err := s.Claim(t.Context(), store.ClaimRequest{Now: now, Slots: map[string][]string{"test.kind": Slots("w1", n)}})
	require.NoError(t, err)
	return got
}

// admitWith admits a job of tenant made by NewJob and changed by edit.
func admitWith(t *testing.T, s store.Store, tenant string, created time.Time, caps store.Caps, edit func(*contracts.Job)) contracts.Job {
	t.Helper()
	j := NewJob(tenant, created)
	if edit != nil {
		edit(&j)
	}
	got, adm, err := s.Admit(t.Context(), j, caps)
	require.NoError(t, err)
	require.Equal(t, store.Admitted, adm)
	return got
}

func testClaimOrder(t *testing.T, s store.Store) {
	prio := func(p int) func(*contracts.Job) { return func(j *contracts.Job) { j.Priority = p } }
	low := admitWith(t, s, "acme", at(0), store.Caps{}, prio(1))
	high1 := admitWith(t, s, "acme", at(time.Millisecond), store.Caps{}, prio(9))
	mid := admitWith(t, s, "acme", at(2*time.Millisecond), store.Caps{}, prio(5))
	high2 := admitWith(t, s, "acme", at(3*time.Millisecond), store.Caps{}, prio(9))

	now := at(time.Second)
	got := claimN(t, s, 3, now)
	require.Equal(t, []string{high1.ID, high2.ID, mid.ID}, ids(got), "priority first, then admission order")
	for _, j := range got {
		want := get(t, s, j.ID)
		require.Equal(t, contracts.StateRunning, j.State, "a claim starts the job on its slot")
		require.Equal(t, "w1", j.Worker)
		require.Equal(t, int64(1), j.Claim, "a claim is a new claim")
		require.Equal(t, 1, j.Attempt, "and the first run")
		require.Nil(t, j.ClaimUntil)
		requireTime(t, "started_at", &now, j.StartedAt)
		requireTime(t, "heartbeat_at", &now, j.HeartbeatAt)
		requireJob(t, want, j)
	}
	// Claimed jobs run: they are not ready again.
	require.Equal(t, []string{low.ID}, ids(claimN(t, s, 10, now)))
	require.Empty(t, claimN(t, s, 10, now))

	// A claim no worker took is given back: pending again, its run
	// undone, at the same claim; then it is the best ready job again.
	back, err := s.Transition(t.Context(), store.Expect{ID: high1.ID, State: contracts.StateRunning, Claim: 1},
		store.ReleaseChange(now, nil))
	require.NoError(t, err)
	require.Equal(t, contracts.StatePending, back.State)
	require.Equal(t, int64(1), back.Claim)
	require.Zero(t, back.Attempt, "the run it was given did not happen")
	require.Empty(t, back.Worker)
	require.Nil(t, back.StartedAt)
	require.Nil(t, back.HeartbeatAt)
	requireJob(t, get(t, s, high1.ID), back)
	again := claimN(t, s, 10, now.Add(time.Second))
	require.Equal(t, []string{high1.ID}, ids(again))
	require.Equal(t, int64(2), again[0].Claim, "the next claim fences the one given back")
	require.Equal(t, 1, again[0].Attempt)
}

func testClaimSkipsNotReady(t *testing.T, s store.Store) {
	later := admitWith(t, s, "acme", at(0), store.Caps{}, func(j *contracts.Job) {
		j.Priority = 9
		j.RunAt = ptr(at(time.Hour))
		j.NextDispatchAt = ptr(at(time.Hour))
	})
	ready := admitNew(t, s, "acme", at(0))
	running := start(t, s, admitNew(t, s, "acme", at(0)), "w1", at(time.Second))
	done := finish(t, s, admitNew(t, s, "acme", at(0)), contracts.StateCancelled, at(time.Second))

	got := claimN(t, s, 10, at(2*time.Second))
	require.Equal(t, []string{ready.ID}, ids(got), "not before next_dispatch_at; never running or final jobs")
	require.Equal(t, contracts.StateRunning, get(t, s, running.ID).State)
	require.Equal(t, contracts.StateCancelled, get(t, s, done.ID).State)

	got = claimN(t, s, 10, at(time.Hour))
	require.NotEmpty(t, got)
	require.Equal(t, later.ID, got[0].ID, "ready once its time has come, and first by priority")
}

func testClaimFair(t *testing.T, s store.Store) {
	// acme queues 50 jobs first; globex then queues 3.
	var acme, globex []string
	for i := range 50 {
		acme = append(acme, admitNew(t, s, "acme", at(time.Duration(i)*time.Millisecond)).ID)
	}
	for i := range 3 {
		globex = append(globex, admitNew(t, s, "globex", at(time.Second+time.Duration(i)*time.Millisecond)).ID)
	}
	got := ids(claimN(t, s, 6, at(2*time.Second)))
	for i := range 3 {
		// Each round gives one job to each tenant (ties go by id).
		require.ElementsMatch(t, []string{acme[i], globex[i]}, got[2*i:2*i+2],
			"tenants with waiting jobs take turns (round %d)", i)
	}

	// A tenant arriving now goes right after what was dispatched so far,
	// not behind acme's 47 waiting jobs.
	late := admitNew(t, s, "initech", at(3*time.Second))
	got = ids(claimN(t, s, 2, at(4*time.Second)))
	require.Contains(t, got, late.ID, "a new tenant's job waits a dispatch or two, not behind the backlog")
}

func testClaimWeights(t *testing.T, s store.Store) {
	heavy := store.Caps{Weight: 3}
	for i := range 12 {
		admitWith(t, s, "acme", at(time.Duration(i)*time.Millisecond), heavy, nil)
		admitWith(t, s, "globex", at(time.Duration(i)*time.Millisecond), store.Caps{}, nil)
	}
	count := map[string]int{}
	for _, j := range claimN(t, s, 8, at(time.Second)) {
		count[j.Tenant]++
	}
	require.Equal(t, map[string]int{"acme": 6, "globex": 2}, count, "weight 3 takes three turns to weight 1's one")
}

func testClaimKeys(t *testing.T, s store.Store) {
	key := func(k string, limit int) func(*contracts.Job) {
		return func(j *contracts.Job) { j.ConcurrencyKey, j.ConcurrencyLimit = k, limit }
	}
	var keyed []contracts.Job
	for i := range 5 {
		keyed = append(keyed, admitWith(t, s, "acme", at(time.Duration(i)*time.Millisecond), store.Caps{}, key("db", 2)))
	}
	other := admitWith(t, s, "globex", at(10*time.Millisecond), store.Caps{}, key("db", 1))
	free := admitNew(t, s, "acme", at(20*time.Millisecond))

	now := at(time.Second)
	got := ids(claimN(t, s, 10, now))
	require.ElementsMatch(t, []string{keyed[0].ID, other.ID, keyed[1].ID, free.ID}, got,
		"two of acme's db jobs, globex's own db key apart, and the unkeyed job")

	// A claimed job runs and holds its slot.
	require.Empty(t, claimN(t, s, 10, now), "both slots of acme/db held")
	finish(t, s, get(t, s, keyed[0].ID), contracts.StateSucceeded, now)
	require.Equal(t, []string{keyed[2].ID}, ids(claimN(t, s, 10, now)), "a finished job frees its slot")

	// keyed[1] and keyed[2] are given back: two slots free again, taken
	// in order.
	for _, j := range []contracts.Job{keyed[1], keyed[2]} {
		_, err := s.Transition(t.Context(), store.Expect{ID: j.ID, State: contracts.StateRunning, Claim: j.Claim + 1},
			store.ReleaseChange(now, nil))
		require.NoError(t, err)
	}
	got = ids(claimN(t, s, 10, now.Add(time.Second)))
	require.Equal(t, []string{keyed[1].ID, keyed[2].ID}, got)
}

func testClaimPerKind(t *testing.T, s store.Store) {
	for i := range 3 {
		admitWith(t, s, "acme", at(time.Duration(i)*time.Millisecond), store.Caps{}, func(j *contracts.Job) { j.Kind = "a" })
		admitWith(t, s, "acme", at(time.Duration(i)*time.Millisecond), store.Caps{}, func(j *contracts.Job) { j.Kind = "b" })
	}
	got, err := s.Claim(t.Context(), store.ClaimRequest{Now: at(time.Second),
		Slots: map[string][]string{"a": Slots("w1", 2), "b": Slots("w1", 1), "c": Slots("w2", 5), "d": nil}})
	require.NoError(t, err)
	count := map[string]int{}
	for _, j := range got {
		count[j.Kind]++
	}
	require.Equal(t, map[string]int{"a": 2, "b": 1}, count)
	got, err = s.Claim(t.Context(), store.ClaimRequest{Now: at(time.Second)})
	require.NoError(t, err)
	require.Empty(t, got, "no kinds, no claims")
}

func testConcurrentClaims(t *testing.T, s store.Store) {
	const jobs, claimers = 40, 4
	for i := range jobs {
		admitNew(t, s, fmt.Sprintf("t%d", i%4), at(time.Duration(i)*time.Millisecond))
	}
	var (
		mu   sync.Mutex
		seen = map[string]int{}
		errs []error
		wg   sync.WaitGroup
	)
	for range claimers {
		wg.Go(func() {
			for {
				got, err := s.Claim(t.Context(), store.ClaimRequest{Now: at(time.Second),
					Slots: map[string][]string{"test.kind": Slots("w1", 4)}})
				mu.Lock()
				for _, j := range got {
					seen[j.ID]++
				}
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
				if err != nil || len(got) == 0 {
					return // a driver looks again when others took its candidates
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	require.Len(t, seen, jobs, "every job claimed")
	for id, n := range seen {
		require.Equal(t, 1, n, "job %s claimed %d times", id, n)
	}
}

// testConcurrentClaimsKeyLimit checks that claimers racing for jobs of one
// concurrency key never take more of them together than its limit.
func testConcurrentClaimsKeyLimit(t *testing.T, s store.Store) {
	const jobs, claimers, limit = 20, 6, 2
	for i := range jobs {
		admitWith(t, s, "acme", at(time.Duration(i)*time.Millisecond), store.Caps{}, func(j *contracts.Job) {
			j.ConcurrencyKey, j.ConcurrencyLimit = "db", limit
		})
	}
	total := claimAtOnce(t, s, claimers, store.ClaimRequest{Now: at(time.Second),
		Slots: map[string][]string{"test.kind": Slots("w1", 5)}})
	require.Equal(t, limit, total, "the key's two slots, taken once")
	require.Empty(t, claimN(t, s, 5, at(2*time.Second)), "both slots are held by the jobs claimed")
}

// testConcurrentClaimsWorkerCapacity checks that claimers racing to fill
// one worker never start more jobs on it together than its capacity, each
// claim counting the jobs already running there: the store never shows a
// worker running more than its slots.
func testConcurrentClaimsWorkerCapacity(t *testing.T, s store.Store) {
	const jobs, claimers, capacity = 20, 4, 2
	for i := range jobs {
		admitNew(t, s, "acme", at(time.Duration(i)*time.Millisecond))
	}
	total := claimAtOnce(t, s, claimers, store.ClaimRequest{Now: at(time.Second),
		Slots:    map[string][]string{"test.kind": Slots("w1", capacity)},
		Room:     map[string]int{"w1": capacity},
		Capacity: map[string]int{"w1": capacity}})
	require.LessOrEqual(t, total, capacity, "the worker's two slots, taken once")
	running, _ := list(t, s, store.Query{State: contracts.StateRunning, Limit: jobs})
	require.LessOrEqual(t, len(running), capacity, "the store shows the worker running no more than its slots")
}

// claimAtOnce has claimers goroutines each make claim r at the same moment,
// requires that none failed and returns how many jobs they claimed in all.
func claimAtOnce(t *testing.T, s store.Store, claimers int, r store.ClaimRequest) int {
	var (
		mu    sync.Mutex
		total int
		errs  []error
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for range claimers {
		wg.Go(func() {
			<-start
			got, err := s.Claim(t.Context(), r)
			mu.Lock()
			defer mu.Unlock()
			total += len(got)
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	close(start)
	wg.Wait()
	require.Empty(t, errs)
	return total
}

func testRunErrorsRoundTrip(t *testing.T, s store.Store) {
	j := start(t, s, admitNew(t, s, "acme", at(0)), "w1", at(time.Second))
	var errs []contracts.RunError
	for i := range contracts.MaxRunErrors + 2 {
		errs = contracts.AppendRunError(errs, contracts.RunError{Attempt: i + 1, Claim: int64(3*i + 2), Error: fmt.Sprintf("handler: boom %d", i), At: at(time.Duration(i) * time.Second)})
	}
	require.Len(t, errs, contracts.MaxRunErrors)
	next := at(time.Minute)
	none := ""
	got, err := s.Transition(t.Context(), store.Expect{ID: j.ID, State: contracts.StateRunning, Claim: j.Claim},
		store.Change{Now: at(2 * time.Second), State: contracts.StatePending, Claim: j.Claim + 1, Worker: &none,
			NextDispatchAt: &next, Errors: errs})
	require.NoError(t, err)
	require.Equal(t, errs, got.Errors)
	requireJob(t, got, get(t, s, j.ID))
	require.Equal(t, "handler: boom 2", got.Errors[0].Error, "the oldest were dropped")
	require.Equal(t, 3, got.Errors[0].Attempt, "the run number (attempt) and the claim are kept apart")
	require.EqualValues(t, 8, got.Errors[0].Claim)
	require.Empty(t, claimN(t, s, 5, at(30*time.Second)), "not before the backoff ends")
	require.Len(t, claimN(t, s, 5, next), 1)
}

func testStaleDeadline(t *testing.T, s store.Store) {
	late := admitWith(t, s, "acme", at(0), store.Caps{}, func(j *contracts.Job) { j.DispatchDeadline = at(time.Minute) })
	admitWith(t, s, "acme", at(0), store.Caps{}, func(j *contracts.Job) { j.DispatchDeadline = at(time.Hour) })
	claimed := admitWith(t, s, "acme", at(0), store.Caps{}, func(j *contracts.Job) { j.DispatchDeadline = at(time.Minute) })
	claim(t, s, claimed, "", at(time.Minute), at(2*time.Minute))
	running := start(t, s, admitWith(t, s, "acme", at(0), store.Caps{}, func(j *contracts.Job) { j.DispatchDeadline = at(time.Minute) }), "w", at(time.Second))

	got, err := s.Stale(t.Context(), store.StaleQuery{Now: at(time.Minute), DeadlineBefore: at(time.Minute), Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []string{late.ID}, ids(got), "pending, past its deadline, no live claim")
	_ = running
}

// testBacklog: the ready jobs of a kind holding no claim are counted (up
// to the limit), with the oldest creation; claimed, delayed and held ones
// are not.
func testBacklog(t *testing.T, s store.Store) {
	ctx := t.Context()
	n, _, err := s.Backlog(ctx, "test.kind", at(time.Minute), 10)
	require.NoError(t, err)
	require.Zero(t, n)
	first := admitNew(t, s, "acme", base)
	admitNew(t, s, "acme", at(time.Second))
	admitWith(t, s, "acme", at(2*time.Second), store.Caps{}, func(j *contracts.Job) { j.NextDispatchAt = ptr(at(time.Hour)) })
	admitFanout(t, s, "acme", 5, 1, store.Caps{}, func(j *contracts.Job) { j.CreatedAt, j.UpdatedAt = at(3*time.Second), at(3*time.Second) })
	n, oldest, err := s.Backlog(ctx, "test.kind", at(time.Minute), 10)
	require.NoError(t, err)
	require.Equal(t, 3, n, "two plain jobs and the fan-out's one released child")
	requireTime(t, "oldest", &first.CreatedAt, &oldest)
	n, _, err = s.Backlog(ctx, "test.kind", at(time.Minute), 2)
	require.NoError(t, err)
	require.Equal(t, 2, n, "bounded by the limit")
	claimN(t, s, 1, at(time.Minute))
	n, _, err = s.Backlog(ctx, "test.kind", at(time.Minute), 10)
	require.NoError(t, err)
	require.Equal(t, 2, n, "a claimed job waits for no slot")
	n, _, err = s.Backlog(ctx, "other.kind", at(time.Minute), 10)
	require.NoError(t, err)
	require.Zero(t, n)
}

// testClaimClock: a claim's jobs start at its clock's time, read in the
// store's write, when that is later than the time the claim was planned
// at; never earlier.
func testClaimClock(t *testing.T, s store.Store) {
	a := admitNew(t, s, "acme", base)
	b := admitNew(t, s, "acme", base)
	late := func() time.Time { return at(5 * time.Second) }
	got, err := s.Claim(t.Context(), store.ClaimRequest{Now: at(time.Second), Slots: map[string][]string{"test.kind": Slots("w1", 1)}, Clock: late})
	require.NoError(t, err)
	require.Equal(t, []string{a.ID}, ids(got))
	requireTime(t, "started_at", ptr(at(5*time.Second)), got[0].StartedAt)
	requireJob(t, get(t, s, a.ID), got[0])
	early := func() time.Time { return at(0) }
	got, err = s.Claim(t.Context(), store.ClaimRequest{Now: at(6 * time.Second), Slots: map[string][]string{"test.kind": Slots("w1", 1)}, Clock: early})
	require.NoError(t, err)
	require.Equal(t, []string{b.ID}, ids(got))
	requireTime(t, "started_at", ptr(at(6*time.Second)), got[0].StartedAt)
	requireTime(t, "heartbeat_at", ptr(at(6*time.Second)), get(t, s, b.ID).HeartbeatAt)
}

// testClaimCapacity: a claim gives a worker no more jobs than its capacity
// less the jobs the store shows running on it, its room shared by the
// kinds it runs; a worker without a capacity is not bounded.
func testClaimCapacity(t *testing.T, s store.Store) {
	for i := range 3 {
		admitWith(t, s, "acme", at(time.Duration(i)*time.Millisecond), store.Caps{}, func(j *contracts.Job) { j.Kind = "a" })
		admitWith(t, s, "acme", at(time.Duration(i)*time.Millisecond), store.Caps{}, func(j *contracts.Job) { j.Kind = "b" })
	}
	running := start(t, s, admitWith(t, s, "acme", base, store.Caps{}, func(j *contracts.Job) { j.Kind = "c" }), "w1", at(time.Second))
	got, err := s.Claim(t.Context(), store.ClaimRequest{Now: at(time.Second),
		Slots:    map[string][]string{"a": Slots("w1", 3), "b": Slots("w1", 3)},
		Capacity: map[string]int{"w1": 3}})
	require.NoError(t, err)
	require.Len(t, got, 2, "three slots, one of them running already: two more, the first kind first")
	for _, j := range got {
		require.Equal(t, "a", j.Kind)
	}
	got, err = s.Claim(t.Context(), store.ClaimRequest{Now: at(time.Second),
		Slots: map[string][]string{"b": Slots("w1", 1)}, Capacity: map[string]int{"w1": 3}})
	require.NoError(t, err)
	require.Empty(t, got, "full in the store, whatever the slots asked")
	finish(t, s, running, contracts.StateSucceeded, at(2*time.Second))
	got, err = s.Claim(t.Context(), store.ClaimRequest{Now: at(2 * time.Second),
		Slots: map[string][]string{"b": append(Slots("w1", 2), "w2", "w2")}, Capacity: map[string]int{"w1": 3, "w2": 0}})
	require.NoError(t, err)
	workers := map[string]int{}
	for _, j := range got {
		workers[j.Worker]++
	}
	require.Equal(t, map[string]int{"w1": 1, "w2": 2}, workers, "w1 has one slot again; w2 has no bound")
}
