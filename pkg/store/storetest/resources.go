package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// resourceTests: a job's resource request and its runs' usage (issue 26).
var resourceTests = []test{
	{"ResourcesStoredAtAdmission", testResourcesStored},
	{"ResourcesInheritedByChildren", testResourcesInherited},
	{"UsageStoredWithTheResult", testUsageStored},
	{"ClaimPacksByResources", testClaimPacksByResources},
}

// testClaimPacksByResources: a claim gives each job, in claim order, to the
// first worker whose free resources fit it (store.Slots), free counted from
// what the store shows running there, undeclared jobs at the worker's
// defaults.
func testClaimPacksByResources(t *testing.T, s store.Store) {
	cpu := func(c float64) func(*contracts.Job) {
		return func(j *contracts.Job) { j.Resources = &contracts.Resources{CPU: c} }
	}
	two := store.WorkerResources{Capacity: contracts.Resources{CPU: 2, Memory: 4 << 30},
		Defaults: contracts.ResourceDefaults{Share: contracts.Resources{CPU: 0.5}}}
	claim := func(now time.Time) []contracts.Job {
		got, err := s.Claim(t.Context(), store.ClaimRequest{Now: now,
			Slots:     map[string][]string{"test.kind": append(Slots("w1", 4), Slots("w2", 4)...)},
			Resources: map[string]store.WorkerResources{"w1": two, "w2": two}})
		require.NoError(t, err)
		return got
	}
	a := admitWith(t, s, "acme", at(0), store.Caps{}, cpu(1))
	b := admitWith(t, s, "acme", at(time.Millisecond), store.Caps{}, cpu(2))
	c := admitWith(t, s, "acme", at(2*time.Millisecond), store.Caps{}, cpu(1))
	got := claim(at(time.Second))
	require.Equal(t, []string{a.ID, b.ID, c.ID}, ids(got))
	require.Equal(t, []string{"w1", "w2", "w1"}, []string{got[0].Worker, got[1].Worker, got[2].Worker},
		"2 cores never beside 1 on a 2-core worker; first fit in worker order")

	d := admitWith(t, s, "acme", at(3*time.Millisecond), store.Caps{}, nil)
	require.Empty(t, claim(at(2*time.Second)), "the running jobs the store shows leave no core free")
	finish(t, s, get(t, s, a.ID), contracts.StateSucceeded, at(3*time.Second))
	got = claim(at(4 * time.Second))
	require.Equal(t, []string{d.ID}, ids(got))
	require.Equal(t, "w1", got[0].Worker, "an undeclared job takes a slot's share")
}

// testResourcesStored: a job's request comes back from Admit, AdmitBatch,
// Get, List and Claim as it was declared; a job without one has none
// (nil, not a zero request), and a zero request stays a zero request.
func testResourcesStored(t *testing.T, s store.Store) {
	req := &contracts.Resources{CPU: 1.5, Memory: 512 << 20}
	one := admitWith(t, s, "acme", at(0), store.Caps{}, func(j *contracts.Job) { j.Resources = req })
	require.Equal(t, req, one.Resources, "admit returns it")
	requireJob(t, one, get(t, s, one.ID))

	none := admitWith(t, s, "acme", at(time.Millisecond), store.Caps{}, nil)
	require.Nil(t, none.Resources)
	require.Nil(t, get(t, s, none.ID).Resources, "no request: none, not zero")

	cpuOnly := NewJob("acme", at(2*time.Millisecond))
	cpuOnly.Resources = &contracts.Resources{CPU: 0.25}
	zero := NewJob("acme", at(3*time.Millisecond))
	zero.Resources = &contracts.Resources{}
	res, err := s.AdmitBatch(t.Context(), []store.AdmitRequest{{Job: cpuOnly}, {Job: zero}})
	require.NoError(t, err)
	require.Equal(t, cpuOnly.Resources, res[0].Job.Resources)
	require.Equal(t, &contracts.Resources{CPU: 0.25}, get(t, s, cpuOnly.ID).Resources)
	require.Equal(t, &contracts.Resources{}, get(t, s, zero.ID).Resources, "a zero request is kept")

	page, _, err := s.List(t.Context(), store.Query{Tenant: "acme", Limit: 10})
	require.NoError(t, err)
	byID := map[string]contracts.Job{}
	for _, j := range page {
		byID[j.ID] = j
	}
	require.Equal(t, req, byID[one.ID].Resources, "list returns it")
	require.Nil(t, byID[none.ID].Resources)

	claimed := claimN(t, s, 10, at(time.Second))
	require.Len(t, claimed, 4)
	for _, c := range claimed {
		require.Equal(t, byID[c.ID].Resources, c.Resources, "the claim returns it for the offer: %s", c.ID)
	}
}

// testResourcesInherited: a fan-out's children have their parent's
// request, those released at once and those released later alike.
func testResourcesInherited(t *testing.T, s store.Store) {
	req := &contracts.Resources{CPU: 2, Memory: 1 << 30}
	p, adm := admitFanout(t, s, "acme", 3, 1, store.Caps{}, func(j *contracts.Job) { j.Resources = req })
	require.Equal(t, store.Admitted, adm)
	require.Equal(t, req, get(t, s, p.ID).Resources)
	for i := range 3 {
		require.Equal(t, req, get(t, s, contracts.ChildID(p.ID, i)).Resources, "child %d", i)
	}
	first := claimN(t, s, 10, at(time.Second))
	require.Len(t, first, 1)
	require.Equal(t, req, first[0].Resources)
	finishChild(t, s, first[0], contracts.StateSucceeded, at(2*time.Second))
	next := claimN(t, s, 10, at(3*time.Second))
	require.Len(t, next, 1)
	require.Equal(t, req, next[0].Resources, "a child released later has it too")
}

// testUsageStored: the usage a result reports is stored with the run's
// end (store.ResultChange) and read back; a retried run's usage stays
// until the next run ends; a result without usage leaves it.
func testUsageStored(t *testing.T, s store.Store) {
	j := admitWith(t, s, "acme", at(0), store.Caps{}, func(j *contracts.Job) { j.Resources = &contracts.Resources{CPU: 1} })
	require.Nil(t, j.Usage)
	run := start(t, s, j, "w1", at(time.Second))
	backoff := func(int) time.Duration { return time.Second }
	used := &contracts.Usage{Mechanism: contracts.LimitCgroupV2, PeakMemory: 70 << 20, CPUSeconds: 1.25}
	res := contracts.Result{JobID: j.ID, Claim: run.Claim, WorkerID: "w1", State: contracts.StateFailed,
		Error: "resources: memory went past 64MiB", Usage: used}
	ch := store.ResultChange(run, res, at(2*time.Second), backoff)
	require.Equal(t, contracts.StatePending, ch.State, "retried")
	retried, err := s.Transition(t.Context(), store.Expect{ID: j.ID, State: run.State, Claim: run.Claim}, ch)
	require.NoError(t, err)
	require.Equal(t, used, retried.Usage)
	requireJob(t, retried, get(t, s, j.ID))
	require.Equal(t, used, get(t, s, j.ID).Usage)

	again := start(t, s, retried, "w1", at(4*time.Second))
	require.Equal(t, used, again.Usage, "the last finished run's until this one ends")
	second := &contracts.Usage{Mechanism: contracts.LimitRlimit, PeakMemory: 10 << 20, CPUSeconds: 0.5}
	res = contracts.Result{JobID: j.ID, Claim: again.Claim, WorkerID: "w1", State: contracts.StateSucceeded, Usage: second}
	done, err := s.Transition(t.Context(), store.Expect{ID: j.ID, State: again.State, Claim: again.Claim},
		store.ResultChange(again, res, at(5*time.Second), backoff))
	require.NoError(t, err)
	require.Equal(t, second, done.Usage)
	got := get(t, s, j.ID)
	require.Equal(t, second, got.Usage)
	require.Equal(t, &contracts.Resources{CPU: 1}, got.Resources)

	other := admitWith(t, s, "acme", at(6*time.Second), store.Caps{}, nil)
	orun := start(t, s, other, "w1", at(7*time.Second))
	res = contracts.Result{JobID: other.ID, Claim: orun.Claim, WorkerID: "w1", State: contracts.StateSucceeded}
	_, err = s.Transition(t.Context(), store.Expect{ID: other.ID, State: orun.State, Claim: orun.Claim},
		store.ResultChange(orun, res, at(8*time.Second), backoff))
	require.NoError(t, err)
	require.Nil(t, get(t, s, other.ID).Usage, "a worker that does not measure reports none")
}
