package storetest

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// A job's cold part, what never changes after its admission (its payload
// and its pinned inputs; a fan-out child's item), may live apart from
// what its life changes (the embedded store keeps it in a table of its
// own). It must still come back on every path out after every kind of
// write, and go with the job when the job goes.
var coldTests = []test{
	{"ColdPartKeptThroughItsLife", testColdKeptThroughLife},
	{"ColdPartKeptForChildren", testColdKeptForChildren},
	{"ColdPartGoesWithPurge", testColdGoesWithPurge},
	{"ColdPartOfAStagedFanoutTakenBack", testColdOfRejectedFanout},
	{"ColdPartKeptThroughABatch", testColdThroughBatch},
	{"ColdPartKeptForAFanoutStoredInChunks", testColdOfChunkedFanout},
}

// hot is a job without its cold part: Update and UpdateEach may hand
// decide, and return, a job without its payload and inputs (read them
// with Get).
func hot(j contracts.Job) contracts.Job {
	j.Payload, j.Inputs = nil, nil
	return j
}

// coldInputs are pinned inputs for the cold part's tests.
var coldInputs = []contracts.InputRef{{Name: "model", URI: "file:///data/m.bin", SHA256: strings.Repeat("cd", 32), Version: "7"}}

// bigPayload is a payload of about n bytes.
func bigPayload(n int) json.RawMessage {
	return json.RawMessage(`{"blob":"` + strings.Repeat("xyz", n/3) + `"}`)
}

// requireCold checks a job's payload and inputs.
func requireCold(t *testing.T, what string, payload json.RawMessage, inputs []contracts.InputRef, got contracts.Job) {
	t.Helper()
	requireBytes(t, what, string(payload), got.Payload)
	require.Equal(t, inputs, got.Inputs, "%s: inputs", what)
}

// testColdKeptThroughLife: a job's payload and inputs come back from Get,
// List, the claim, Stale and a dedup join, after every write of its
// life: a claim, a lease renewal, a retry through Update, a cancel
// request, the final result through UpdateEach.
func testColdKeptThroughLife(t *testing.T, s store.Store) {
	ctx := t.Context()
	payload := bigPayload(20 << 10) // past a page: it overflows
	j := admitWith(t, s, "acme", base, store.Caps{}, func(j *contracts.Job) {
		j.Payload, j.Inputs, j.Key = payload, coldInputs, "k1"
	})
	requireCold(t, "admit", payload, coldInputs, j)
	requireCold(t, "get", payload, coldInputs, get(t, s, j.ID))
	admitNew(t, s, "acme", base) // a job with the default payload, no inputs
	dup := NewJob("acme", at(time.Millisecond))
	dup.Key = "k1"
	got, adm, err := s.Admit(ctx, dup, store.Caps{})
	require.NoError(t, err)
	require.Equal(t, store.Joined, adm)
	requireCold(t, "dedup join", payload, coldInputs, got)

	claimed := claimN(t, s, 10, at(time.Second))
	require.Len(t, claimed, 2)
	var run contracts.Job
	for _, c := range claimed {
		if c.ID == j.ID {
			run = c
		}
	}
	require.Equal(t, j.ID, run.ID)
	requireCold(t, "claim", payload, coldInputs, run)

	_, err = s.Heartbeat(ctx, run.Worker, []contracts.Lease{leaseOf(run)}, at(2*time.Second), 0)
	require.NoError(t, err)
	requireCold(t, "get after a renewal", payload, coldInputs, get(t, s, j.ID))
	stale, err := s.Stale(ctx, store.StaleQuery{Now: at(time.Hour), HeartbeatBefore: at(time.Hour)})
	require.NoError(t, err)
	require.NotEmpty(t, stale)
	for _, st := range stale {
		if st.ID == j.ID {
			requireCold(t, "stale", payload, coldInputs, st)
		}
	}

	retryAt := at(3 * time.Second)
	_, err = s.Update(ctx, j.ID, func(cur contracts.Job) (store.Change, error) {
		return store.Change{Now: at(3 * time.Second), State: contracts.StatePending, Claim: cur.Claim + 1,
			Worker: ptr(""), ClearClaim: true, NextDispatchAt: &retryAt, Error: ptr("handler: boom")}, nil
	})
	require.NoError(t, err)
	requireCold(t, "get after a retry", payload, coldInputs, get(t, s, j.ID))

	again := claimN(t, s, 10, at(4*time.Second))
	require.Len(t, again, 1)
	requireCold(t, "claim of the retry", payload, coldInputs, again[0])
	_, err = s.Transition(ctx, store.Expect{ID: j.ID, State: contracts.StateRunning, Claim: again[0].Claim},
		store.Change{Now: at(5 * time.Second), State: contracts.StateRunning, CancelRequested: ptr(true)})
	require.NoError(t, err)
	out, err := s.UpdateEach(ctx, []string{j.ID}, func(int, contracts.Job) (store.Change, error) {
		return store.Change{Now: at(6 * time.Second), State: contracts.StateSucceeded, Result: json.RawMessage(`{"ok":1}`)}, nil
	})
	require.NoError(t, err)
	require.NoError(t, out[0].Err)
	done := get(t, s, j.ID)
	require.Equal(t, contracts.StateSucceeded, done.State)
	requireCold(t, "get after the result", payload, coldInputs, done)
	listed, _ := listAll(t, s, store.Query{Tenant: "acme", Limit: 10})
	require.Len(t, listed, 2)
	for _, l := range listed {
		if l.ID == j.ID {
			requireCold(t, "list", payload, coldInputs, l)
		} else {
			requireCold(t, "list of the other job", NewJob("acme", base).Payload, nil, l)
		}
	}
}

// testColdKeptForChildren: a fan-out's children have their items as
// payloads and the parent's inputs, on Get, List and the claim, and keep
// them through their runs; the parent keeps its own.
func testColdKeptForChildren(t *testing.T, s store.Store) {
	ctx := t.Context()
	p, adm := admitFanout(t, s, "acme", 5, 2, store.Caps{}, func(j *contracts.Job) { j.Inputs = coldInputs })
	require.Equal(t, store.Admitted, adm)
	requireCold(t, "parent", nil, coldInputs, get(t, s, p.ID))
	its := items(5)
	for i, c := range children(t, s, p.ID, "") {
		requireCold(t, "list child", its[i], coldInputs, c)
	}
	now := at(time.Second)
	for range 5 {
		got := claimN(t, s, 10, now)
		if len(got) == 0 {
			break
		}
		for _, c := range got {
			requireCold(t, "claim child", its[*c.Index], coldInputs, c)
			out, err := s.UpdateEach(ctx, []string{c.ID}, func(int, contracts.Job) (store.Change, error) {
				return store.Change{Now: now, State: contracts.StateSucceeded}, nil
			})
			require.NoError(t, err)
			require.NoError(t, out[0].Err)
			requireCold(t, "child after its result", its[*c.Index], coldInputs, get(t, s, c.ID))
		}
		now = now.Add(time.Second)
	}
	require.Equal(t, contracts.StateSucceeded, get(t, s, p.ID).State)
	requireCold(t, "parent after its children", nil, coldInputs, get(t, s, p.ID))
}

// testColdGoesWithPurge: a purged job's cold part goes with it: a job
// admitted again under the same id (a plain job, a parent and its
// children) has its own payload and inputs, not the purged ones.
func testColdGoesWithPurge(t *testing.T, s store.Store) {
	ctx := t.Context()
	j := admitWith(t, s, "acme", base, store.Caps{}, func(j *contracts.Job) { j.Payload, j.Inputs = bigPayload(5000), coldInputs })
	p, adm := admitFanout(t, s, "acme", 3, 3, store.Caps{}, nil)
	require.Equal(t, store.Admitted, adm)
	for _, c := range claimN(t, s, 10, at(time.Second)) {
		if c.IsChild() {
			finishChild(t, s, c, contracts.StateSucceeded, at(time.Second))
		} else {
			finish(t, s, c, contracts.StateFailed, at(time.Second))
		}
	}
	require.Equal(t, contracts.StateSucceeded, get(t, s, p.ID).State)
	n, err := s.Purge(ctx, at(time.Hour), 10)
	require.NoError(t, err)
	require.Equal(t, 5, n)
	requireMissing(t, s, j.ID)

	again := NewJob("acme", at(2*time.Hour))
	again.ID, again.Payload = j.ID, json.RawMessage(`{"second":true}`)
	admit(t, s, again)
	requireCold(t, "a new job of a purged job's id", again.Payload, nil, get(t, s, j.ID))
	np := NewJob("acme", at(2*time.Hour))
	np.ID, np.Payload, np.Concurrency = p.ID, nil, 2
	res, err := s.AdmitBatch(ctx, []store.AdmitRequest{{Job: np, Items: []json.RawMessage{json.RawMessage(`"a"`), json.RawMessage(`"b"`)}}})
	require.NoError(t, err)
	require.Equal(t, store.Admitted, res[0].Admission)
	requireCold(t, "a new child of a purged parent's id", json.RawMessage(`"b"`), nil, get(t, s, contracts.ChildID(p.ID, 1)))
	_, err = s.Get(ctx, contracts.ChildID(p.ID, 2))
	require.True(t, errors.Is(err, store.ErrNotFound), "the purged third child is gone")
}

// testColdOfRejectedFanout: a fan-out refused by the caps has its
// children (and their cold parts) taken back: the same parent admitted
// again with other items has those.
func testColdOfRejectedFanout(t *testing.T, s store.Store) {
	ctx := t.Context()
	np := NewJob("acme", base)
	np.Payload, np.Concurrency = nil, 2
	first := make([]json.RawMessage, 40)
	second := make([]json.RawMessage, 40)
	for i := range first {
		first[i] = json.RawMessage(`{"first":` + strings.Repeat("1", i+1) + `}`)
		second[i] = json.RawMessage(`{"second":` + strings.Repeat("2", i+1) + `}`)
	}
	res, err := s.AdmitBatch(ctx, []store.AdmitRequest{{Job: np, Items: first, Caps: store.Caps{TenantItems: 10}}})
	require.NoError(t, err)
	require.Equal(t, store.RejectedTenantItems, res[0].Admission)
	res, err = s.AdmitBatch(ctx, []store.AdmitRequest{{Job: np, Items: second}})
	require.NoError(t, err)
	require.Equal(t, store.Admitted, res[0].Admission)
	for i, c := range children(t, s, np.ID, "") {
		requireCold(t, "child", second[i], nil, c)
	}
}

// testColdThroughBatch: one AdmitBatch of plain jobs with a payload and
// inputs, with only inputs, with neither, and a fan-out whose parent has
// inputs of its own: each job's cold part comes back from the admission,
// Get, List and the claim, and goes with Purge (the same ids admitted
// again without one have none).
func testColdThroughBatch(t *testing.T, s store.Store) {
	ctx := t.Context()
	otherInputs := []contracts.InputRef{{Name: "data", URI: "https://example.com/d.csv", SHA256: strings.Repeat("ab", 32)}}
	mk := func(i int, payload json.RawMessage, inputs []contracts.InputRef) contracts.Job {
		j := NewJob("acme", at(time.Duration(i)*time.Millisecond))
		j.Payload, j.Inputs = payload, inputs
		return j
	}
	jobs := []contracts.Job{
		mk(0, bigPayload(3000), coldInputs),
		mk(1, nil, otherInputs),
		mk(2, nil, nil),
		mk(3, json.RawMessage(`{"small":true}`), nil),
	}
	parent := mk(4, nil, otherInputs)
	parent.Concurrency = 2
	its := items(3)
	reqs := make([]store.AdmitRequest, 0, len(jobs)+1)
	for _, j := range jobs {
		reqs = append(reqs, store.AdmitRequest{Job: j})
	}
	reqs = append(reqs, store.AdmitRequest{Job: parent, Items: its})
	res, err := s.AdmitBatch(ctx, reqs)
	require.NoError(t, err)
	require.Len(t, res, len(reqs))
	type cold struct {
		payload json.RawMessage
		inputs  []contracts.InputRef
	}
	want := map[string]cold{}
	for i, j := range jobs {
		require.Equal(t, store.Admitted, res[i].Admission)
		requireCold(t, "admit batch", j.Payload, j.Inputs, res[i].Job)
		want[j.ID] = cold{j.Payload, j.Inputs}
	}
	require.Equal(t, store.Admitted, res[len(jobs)].Admission)
	requireCold(t, "admit batch parent", nil, otherInputs, res[len(jobs)].Job)
	want[parent.ID] = cold{nil, otherInputs}
	for i, it := range its {
		want[contracts.ChildID(parent.ID, i)] = cold{it, otherInputs}
	}

	for id, c := range want {
		requireCold(t, "get "+id, c.payload, c.inputs, get(t, s, id))
	}
	top, _ := listAll(t, s, store.Query{Tenant: "acme", Limit: 2})
	require.Len(t, top, len(jobs)+1)
	for _, j := range top {
		requireCold(t, "list "+j.ID, want[j.ID].payload, want[j.ID].inputs, j)
	}
	for _, c := range children(t, s, parent.ID, "") {
		requireCold(t, "list child "+c.ID, want[c.ID].payload, want[c.ID].inputs, c)
	}
	now := at(time.Second)
	for range 4 {
		got := claimN(t, s, 10, now)
		if len(got) == 0 {
			break
		}
		for _, c := range got {
			requireCold(t, "claim "+c.ID, want[c.ID].payload, want[c.ID].inputs, c)
			if c.IsChild() {
				finishChild(t, s, c, contracts.StateSucceeded, now)
			} else {
				finish(t, s, c, contracts.StateSucceeded, now)
			}
		}
		now = now.Add(time.Second)
	}
	require.Equal(t, contracts.StateSucceeded, get(t, s, parent.ID).State)
	n, err := s.Purge(ctx, at(time.Hour), 100)
	require.NoError(t, err)
	require.Equal(t, len(want), n)
	for id := range want {
		requireMissing(t, s, id)
	}

	// The same ids again, none with a cold part: none comes back.
	reqs = reqs[:0]
	for i, j := range jobs {
		again := mk(10+i, nil, nil)
		again.ID = j.ID
		reqs = append(reqs, store.AdmitRequest{Job: again})
	}
	np := mk(20, nil, nil)
	np.ID, np.Concurrency = parent.ID, 2
	reqs = append(reqs, store.AdmitRequest{Job: np, Items: []json.RawMessage{json.RawMessage(`"x"`)}})
	res, err = s.AdmitBatch(ctx, reqs)
	require.NoError(t, err)
	for i, r := range res {
		require.Equal(t, store.Admitted, r.Admission, "request %d", i)
	}
	for _, j := range jobs {
		requireCold(t, "get again "+j.ID, nil, nil, get(t, s, j.ID))
	}
	requireCold(t, "get the parent again", nil, nil, get(t, s, parent.ID))
	requireCold(t, "get its child again", json.RawMessage(`"x"`), nil, get(t, s, contracts.ChildID(parent.ID, 0)))
}

// chunkedItems is a fan-out large enough that a store writing big
// admissions in chunks writes it in several.
const chunkedItems = 2100

// testColdOfChunkedFanout: the children of a fan-out stored in several
// chunks each have their own item and the parent's inputs, on Get, the
// claim and the list of one state, at both ends of every chunk.
func testColdOfChunkedFanout(t *testing.T, s store.Store) {
	its := make([]json.RawMessage, chunkedItems)
	for i := range its {
		its[i] = json.RawMessage(`{"n":` + strconv.Itoa(i) + `}`)
	}
	parent := NewJob("acme", base)
	parent.Payload, parent.Inputs, parent.Concurrency = json.RawMessage(`{"parent":1}`), coldInputs, 3
	res, err := s.AdmitBatch(t.Context(), []store.AdmitRequest{{Job: parent, Items: its}})
	require.NoError(t, err)
	require.Equal(t, store.Admitted, res[0].Admission)
	requireCold(t, "parent", parent.Payload, coldInputs, get(t, s, parent.ID))
	for _, i := range []int{0, 1, 63, 64, 999, 1000, 1001, 1999, 2000, chunkedItems - 1} {
		requireCold(t, "get child "+strconv.Itoa(i), its[i], coldInputs, get(t, s, contracts.ChildID(parent.ID, i)))
	}
	got := claimN(t, s, 10, at(time.Second))
	require.Len(t, got, 3)
	for _, c := range got {
		requireCold(t, "claim "+c.ID, its[*c.Index], coldInputs, c)
	}
	running, _ := listAll(t, s, store.Query{Parent: parent.ID, State: contracts.StateRunning, Limit: 2})
	require.Len(t, running, 3)
	for _, c := range running {
		requireCold(t, "list "+c.ID, its[*c.Index], coldInputs, c)
	}
}
