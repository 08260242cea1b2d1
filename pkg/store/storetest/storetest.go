// Package storetest is the conformance suite every store.Store driver must
// pass. A driver's own test calls Run with a factory of fresh stores:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store {
//			s, err := mydriver.Open(t.Context(), …)
//			require.NoError(t, err)
//			t.Cleanup(func() { _ = s.Close() })
//			return s
//		})
//	}
//
// Every subtest asks the factory for its own store and runs in parallel
// with the others, so the factory must hand out independent stores (a new
// file, a new database name). The suite uses only times with millisecond
// precision, so drivers that keep no finer times pass it too; it never
// looks at the wall clock, but passes every "now" explicitly.
package storetest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// Run runs the whole conformance suite against the stores newStore makes.
// newStore is called once per subtest, from that subtest, and must return
// an empty store that no other subtest uses; it should register its own
// cleanup with t.Cleanup.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Helper()
	for _, group := range [][]test{admitTests, transitionTests, heartbeatTests, leaseTests, reaperTests, queryTests, claimTests, batchTests, updateTests, fanoutTests, payloadTests, coldTests, itemsTests, stateCountTests, writeTests, ruleTests, resourceTests} {
		for _, tc := range group {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.fn(t, newStore(t))
			})
		}
	}
}

// test is one subtest of the suite.
type test struct {
	name string
	fn   func(t *testing.T, s store.Store)
}

// base is the suite's "now": a fixed time with milliseconds, far from the
// wall clock so that no driver can get away with using it.
var base = time.Date(2031, time.March, 4, 5, 6, 7, 890_000_000, time.UTC)

// at is base plus d.
func at(d time.Duration) time.Time { return base.Add(d) }

// ptr returns a pointer to v.
func ptr[T any](v T) *T { return &v }

// NewJob is a fresh pending job of tenant created at created, as the
// gateway makes it (kind "test.kind", priority 5, max attempts 3, an hour's
// dispatch deadline, due at once), for the conformance suite and for any
// test that puts a job in a store directly.
func NewJob(tenant string, created time.Time) contracts.Job {
	return contracts.Job{
		ID:               uuid.NewString(),
		Tenant:           tenant,
		Kind:             "test.kind",
		Payload:          json.RawMessage(`{"n":1}`),
		Priority:         5,
		MaxAttempts:      3,
		State:            contracts.StatePending,
		CreatedAt:        created,
		UpdatedAt:        created,
		DispatchDeadline: created.Add(time.Hour),
		NextDispatchAt:   ptr(created),
	}
}

// admit admits job with no caps and requires it to be admitted.
func admit(t *testing.T, s store.Store, job contracts.Job) contracts.Job {
	t.Helper()
	got, adm, err := s.Admit(t.Context(), job, store.Caps{})
	require.NoError(t, err)
	require.Equal(t, store.Admitted, adm)
	return got
}

// admitNew admits a fresh job of tenant created at created.
func admitNew(t *testing.T, s store.Store, tenant string, created time.Time) contracts.Job {
	t.Helper()
	return admit(t, s, NewJob(tenant, created))
}

// claim takes a dispatch claim on a pending job: next attempt, worker,
// claim until `until`, as the scheduler does before it offers the job.
func claim(t *testing.T, s store.Store, j contracts.Job, worker string, now, until time.Time) contracts.Job {
	t.Helper()
	got, err := s.Transition(t.Context(),
		store.Expect{ID: j.ID, State: contracts.StatePending, Claim: j.Claim},
		store.Change{Now: now, State: contracts.StatePending, Claim: j.Claim + 1, Worker: ptr(worker), ClaimUntil: ptr(until)})
	require.NoError(t, err)
	return got
}

// start moves a pending job straight to running on worker at `now`, with
// its next claim and run, as a claim does. A job a claim started already
// is returned as it is: it must be running on worker.
func start(t *testing.T, s store.Store, j contracts.Job, worker string, now time.Time) contracts.Job {
	t.Helper()
	if j.State == contracts.StateRunning {
		require.Equal(t, worker, j.Worker, "claimed for another worker")
		return j
	}
	got, err := s.Transition(t.Context(),
		store.Expect{ID: j.ID, State: contracts.StatePending, Claim: j.Claim},
		store.Change{Now: now, State: contracts.StateRunning, Claim: j.Claim + 1, IncAttempt: true,
			Worker: ptr(worker), ClearClaim: true, StartedAt: ptr(now), HeartbeatAt: ptr(now)})
	require.NoError(t, err)
	return got
}

// finish moves an active job to a final state at `now`.
func finish(t *testing.T, s store.Store, j contracts.Job, state contracts.JobState, now time.Time) contracts.Job {
	t.Helper()
	got, err := s.Transition(t.Context(),
		store.Expect{ID: j.ID, State: j.State, Claim: j.Claim},
		store.Change{Now: now, State: state})
	require.NoError(t, err)
	return got
}

// get reads a job that must exist.
func get(t *testing.T, s store.Store, id string) contracts.Job {
	t.Helper()
	j, err := s.Get(t.Context(), id)
	require.NoError(t, err)
	return j
}

// requireMissing says no job has that id.
func requireMissing(t *testing.T, s store.Store, id string) {
	t.Helper()
	_, err := s.Get(t.Context(), id)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// stats reads the store's counts.
func stats(t *testing.T, s store.Store) store.Counts {
	t.Helper()
	c, err := s.Stats(t.Context())
	require.NoError(t, err)
	return c
}

// requireTime checks two optional times are both nil or the same instant.
func requireTime(t *testing.T, field string, want, got *time.Time) {
	t.Helper()
	if want == nil || got == nil {
		require.Equal(t, want == nil, got == nil, "%s: want %v, got %v", field, want, got)
		return
	}
	require.True(t, want.Equal(*got), "%s: want %s, got %s", field, want.Format(time.RFC3339Nano), got.Format(time.RFC3339Nano))
}

// requireUTC checks a time comes back in UTC.
func requireUTC(t *testing.T, field string, tm *time.Time) {
	t.Helper()
	if tm != nil {
		require.Equal(t, time.UTC, tm.Location(), "%s is not in UTC", field)
	}
}

// requireJSON checks two optional JSON documents are both empty or equal.
func requireJSON(t *testing.T, field string, want, got json.RawMessage) {
	t.Helper()
	if len(want) == 0 || len(got) == 0 {
		require.Equal(t, len(want) == 0, len(got) == 0, "%s: want %s, got %s", field, want, got)
		return
	}
	require.JSONEq(t, string(want), string(got), field)
}

// requireJob checks every field of got against want.
func requireJob(t *testing.T, want, got contracts.Job) {
	t.Helper()
	require.Equal(t, want.ID, got.ID, "id")
	require.Equal(t, want.Tenant, got.Tenant, "tenant")
	require.Equal(t, want.Kind, got.Kind, "kind")
	requireJSON(t, "payload", want.Payload, got.Payload)
	require.Equal(t, want.Key, got.Key, "key")
	require.Equal(t, want.Priority, got.Priority, "priority")
	require.Equal(t, want.State, got.State, "state")
	require.Equal(t, want.Claim, got.Claim, "claim")
	require.Equal(t, want.Attempt, got.Attempt, "attempt")
	require.Equal(t, want.MaxAttempts, got.MaxAttempts, "max_attempts")
	require.Equal(t, want.Worker, got.Worker, "worker")
	require.Equal(t, want.Error, got.Error, "error")
	requireJSON(t, "result", want.Result, got.Result)
	require.Equal(t, want.Progress, got.Progress, "progress")
	require.Equal(t, want.CancelRequested, got.CancelRequested, "cancel_requested")
	requireTime(t, "created_at", &want.CreatedAt, &got.CreatedAt)
	requireTime(t, "updated_at", &want.UpdatedAt, &got.UpdatedAt)
	requireTime(t, "started_at", want.StartedAt, got.StartedAt)
	requireTime(t, "finished_at", want.FinishedAt, got.FinishedAt)
	requireTime(t, "next_dispatch_at", want.NextDispatchAt, got.NextDispatchAt)
	requireTime(t, "dispatch_deadline", &want.DispatchDeadline, &got.DispatchDeadline)
	requireTime(t, "claim_until", want.ClaimUntil, got.ClaimUntil)
	requireTime(t, "heartbeat_at", want.HeartbeatAt, got.HeartbeatAt)
	requireTime(t, "run_at", want.RunAt, got.RunAt)
	require.Equal(t, want.ConcurrencyKey, got.ConcurrencyKey, "concurrency_key")
	require.Equal(t, want.ConcurrencyLimit, got.ConcurrencyLimit, "concurrency_limit")
	require.Equal(t, want.Parent, got.Parent, "parent")
	require.Equal(t, want.Index, got.Index, "index")
	require.Equal(t, want.Concurrency, got.Concurrency, "concurrency")
	require.Equal(t, want.FailFast, got.FailFast, "fail_fast")
	require.Equal(t, want.Children, got.Children, "children")
	require.Equal(t, want.RunLimits, got.RunLimits, "run limits")
	require.Equal(t, want.Inputs, got.Inputs, "inputs")
	require.Equal(t, want.Resources, got.Resources, "resources")
	require.Equal(t, want.Usage, got.Usage, "usage")
	require.Len(t, got.Errors, len(want.Errors), "errors")
	for i := range want.Errors {
		w, g := want.Errors[i], got.Errors[i]
		require.Equal(t, w.Attempt, g.Attempt, "errors[%d].run", i)
		require.Equal(t, w.Claim, g.Claim, "errors[%d].attempt", i)
		require.Equal(t, w.Error, g.Error, "errors[%d].error", i)
		requireTime(t, fmt.Sprintf("errors[%d].at", i), &w.At, &g.At)
	}
}

// ids lists the ids of jobs, in order.
func ids(jobs []contracts.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// leaseOf is the lease of a job's current attempt.
func leaseOf(j contracts.Job) contracts.Lease {
	return contracts.Lease{JobID: j.ID, Claim: j.Claim}
}

// Slots is n free slots of one worker, as a store.ClaimRequest lists them.
func Slots(worker string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = worker
	}
	return out
}
