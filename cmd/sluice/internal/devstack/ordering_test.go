package devstack

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/client"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// sleepReq is a sleep job of ms milliseconds.
func sleepReq(ms int) contracts.SubmitRequest {
	return contracts.SubmitRequest{Kind: "sleep", Payload: json.RawMessage(fmt.Sprintf(`{"ms":%d}`, ms))}
}

// submitAs submits req through c and requires a 202.
func submitAs(t *testing.T, c *client.Client, req contracts.SubmitRequest) contracts.Job {
	t.Helper()
	j, created, err := c.Submit(context.Background(), req)
	require.NoError(t, err)
	require.True(t, created)
	return j
}

// startOrder waits until every job is final and returns their ids in the
// order they started.
func (b *bundle) startOrder(ids []string, within time.Duration) []string {
	b.t.Helper()
	jobs := make([]contracts.Job, len(ids))
	for i, id := range ids {
		jobs[i] = b.waitFinal(id, within)
		require.Equal(b.t, contracts.StateSucceeded, jobs[i].State, jobs[i].Error)
	}
	sort.SliceStable(jobs, func(i, k int) bool { return jobs[i].StartedAt.Before(*jobs[k].StartedAt) })
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// TestPriorityOrdersTheWaitingJobs: with one slot taken, a later job of
// higher priority starts before every waiting job of lower priority. The
// slot is held until every job is in (the blocker runs until it is
// cancelled), so a slow submit cannot let a low job start first.
func TestPriorityOrdersTheWaitingJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 1}, nil)
	blocker := b.mustSubmit("sleep", map[string]int{"ms": 60_000})
	b.waitState(blocker.ID, contracts.StateRunning, 10*time.Second)
	var low []string
	for range 4 {
		req := sleepReq(10)
		req.Priority = 1
		_, j := b.submit(req)
		low = append(low, j.ID)
	}
	req := sleepReq(10)
	req.Priority = 9
	code, high := b.submit(req)
	require.Equal(t, http.StatusAccepted, code)
	require.Equal(t, 9, high.Priority)
	code, body := b.cancelJob(blocker.ID)
	require.Equal(t, http.StatusAccepted, code, string(body))
	require.Equal(t, contracts.StateCancelled, b.waitFinal(blocker.ID, 20*time.Second).State)

	order := b.startOrder(append([]string{high.ID}, low...), 20*time.Second)
	require.Equal(t, high.ID, order[0], "the priority-9 job goes before the priority-1 jobs that were waiting")
	require.Equal(t, low, order[1:], "equal priority keeps its order")
}

// TestTenantsTakeTurns: a tenant that queued many jobs delays another
// tenant's jobs by a dispatch or two, not by its whole backlog.
func TestTenantsTakeTurns(t *testing.T) {
	t.Parallel()
	b := startTokenStack(t, Options{Workers: 1}, map[string]string{"SLUICE_API_TOKENS": dashTenant + ":" + dashToken + ",globex:globex-token"})
	acme, err := client.New(b.base, client.WithToken(dashToken))
	require.NoError(t, err)
	globex, err := client.New(b.base, client.WithToken("globex-token"))
	require.NoError(t, err)

	blocker := submitAs(t, acme, sleepReq(400))
	require.Eventually(t, func() bool {
		j, err := acme.Get(context.Background(), blocker.ID)
		return err == nil && j.State == contracts.StateRunning
	}, 10*time.Second, 5*time.Millisecond)
	var backlog []string
	for range 20 {
		backlog = append(backlog, submitAs(t, acme, sleepReq(5)).ID)
	}
	var late []string
	for range 2 {
		late = append(late, submitAs(t, globex, sleepReq(5)).ID)
	}

	all := append(append([]string{blocker.ID}, backlog...), late...)
	jobs := map[string]contracts.Job{}
	for _, id := range all {
		c := acme
		if slices.Contains(late, id) {
			c = globex
		}
		require.Eventually(t, func() bool {
			j, err := c.Get(context.Background(), id)
			jobs[id] = j
			return err == nil && j.State == contracts.StateSucceeded
		}, 30*time.Second, 10*time.Millisecond)
	}
	started := func(id string) time.Time { return *jobs[id].StartedAt }
	for i, id := range late {
		// acme's jobs that started after globex's job arrived and before it.
		ahead := 0
		for _, a := range backlog {
			if started(a).After(jobs[id].CreatedAt) && started(a).Before(started(id)) {
				ahead++
			}
		}
		require.LessOrEqual(t, ahead, 2+i, "globex's job %s waited behind %d of acme's queued jobs", id, ahead)
	}
	last := started(backlog[len(backlog)-1])
	for _, id := range late {
		require.True(t, started(id).Before(last), "globex's jobs do not wait for acme's backlog to drain")
	}
}

// TestConcurrencyKeyLimitsRunningJobs: at most concurrency_limit jobs of
// the tenant's key run at once; the others wait pending and all finish.
func TestConcurrencyKeyLimitsRunningJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 1}, map[string]string{"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "6"})
	var keyed []string
	for range 6 {
		req := sleepReq(250)
		req.ConcurrencyKey, req.ConcurrencyLimit = "customer-db", 2
		code, j := b.submit(req)
		require.Equal(t, http.StatusAccepted, code)
		require.Equal(t, "customer-db", j.ConcurrencyKey)
		require.Equal(t, 2, j.ConcurrencyLimit)
		keyed = append(keyed, j.ID)
	}
	free := b.mustSubmit("sleep", map[string]int{"ms": 250})

	jobs := map[string]contracts.Job{}
	for _, id := range append(keyed, free.ID) {
		jobs[id] = b.waitFinal(id, 30*time.Second)
		require.Equal(t, contracts.StateSucceeded, jobs[id].State)
	}
	// From the jobs' own times: never more than two keyed runs overlap.
	var runs []contracts.Job
	for _, id := range keyed {
		runs = append(runs, jobs[id])
	}
	peak := peakOverlap(t, runs)
	t.Logf("most keyed runs at once: %d (limit 2)", peak)
	// Two at a time, never three (on a loaded machine the submits can come
	// so far apart that no two of them meet: the limit is what is proven).
	require.LessOrEqual(t, peak, 2, "a concurrency key's limit of 2 was exceeded")
	require.True(t, jobs[free.ID].StartedAt.Before(*jobs[keyed[5]].StartedAt), "an unkeyed job does not wait behind the key")
}

// TestFailedRunsRetryWithBackoff: a handler failure runs again after a
// backoff until max_attempts runs; the job shows each run's error.
func TestFailedRunsRetryWithBackoff(t *testing.T) {
	t.Parallel()
	shared := sharedDir(t) // the job's marker outlives its run
	b := setup(t, Options{Workers: 1}, map[string]string{
		"SLUICE_WORKER_EXEC_ALLOW":       "/bin/sh",
		"SLUICE_SCHEDULER_RETRY_BACKOFF": "100ms",
		"SLUICE_WORKER_EXEC_DIRS":        shared,
	})
	always := contracts.SubmitRequest{Kind: "exec", MaxAttempts: 3,
		Payload: json.RawMessage(`{"argv":["/bin/sh","-c","echo broken >&2; exit 3"]}`)}
	code, j := b.submit(always)
	require.Equal(t, http.StatusAccepted, code)
	got := b.waitFinal(j.ID, 30*time.Second)
	require.Equal(t, contracts.StateFailed, got.State)
	require.Equal(t, 3, got.Attempt, "max_attempts counts runs")
	require.Len(t, got.Errors, 3)
	for i, e := range got.Errors {
		require.Equal(t, i+1, e.Attempt)
		require.Equal(t, contracts.ClassHandler, contracts.ClassOf(e.Error), e.Error)
	}
	require.Equal(t, got.Errors[2].Error, got.Error)
	require.GreaterOrEqual(t, got.Errors[1].At.Sub(got.Errors[0].At), 50*time.Millisecond, "a backoff between runs")

	// Fails its first run, succeeds on the second.
	marker := filepath.Join(shared, "ran-once")
	once := contracts.SubmitRequest{Kind: "exec", MaxAttempts: 3,
		Payload: json.RawMessage(fmt.Sprintf(`{"argv":["/bin/sh","-c","if [ -e %[1]s ]; then exit 0; fi; touch %[1]s; exit 1"]}`, marker))}
	_, j = b.submit(once)
	got = b.waitFinal(j.ID, 30*time.Second)
	require.Equal(t, contracts.StateSucceeded, got.State)
	require.Equal(t, 2, got.Attempt)
	require.Len(t, got.Errors, 1)
	require.Empty(t, got.Error)

	// Bad input is not retried: a program the worker does not allow (a
	// payload the gateway can check is refused at submit instead).
	_, j = b.submit(contracts.SubmitRequest{Kind: "exec", MaxAttempts: 3, Payload: json.RawMessage(`{"argv":["/bin/false"]}`)})
	got = b.waitFinal(j.ID, 30*time.Second)
	require.Equal(t, contracts.StateFailed, got.State)
	require.Equal(t, 1, got.Attempt)
}

// TestRunAtDelaysTheJob: a job is not offered before run_at, and the
// dispatch deadline counts from it.
func TestRunAtDelaysTheJob(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 1}, nil)
	req := sleepReq(0)
	req.RunAt = "700ms"
	req.Deadline = "10s"
	code, j := b.submit(req)
	require.Equal(t, http.StatusAccepted, code)
	require.NotNil(t, j.RunAt)
	require.InDelta(t, 700, j.RunAt.Sub(j.CreatedAt).Milliseconds(), 50)
	require.InDelta(t, 10_700, j.DispatchDeadline.Sub(j.CreatedAt).Milliseconds(), 50, "the deadline counts from run_at")
	require.Equal(t, contracts.StatePending, b.job(j.ID).State)
	got := b.waitFinal(j.ID, 20*time.Second)
	require.Equal(t, contracts.StateSucceeded, got.State)
	require.False(t, got.StartedAt.Before(*got.RunAt), "started %s, run_at %s", got.StartedAt, got.RunAt)

	at := time.Now().Add(500 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	req = sleepReq(0)
	req.RunAt = at
	code, j = b.submit(req)
	require.Equal(t, http.StatusAccepted, code)
	got = b.waitFinal(j.ID, 20*time.Second)
	require.False(t, got.StartedAt.Before(*got.RunAt))
}

func TestOrderingFieldsAreValidated(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 0}, nil)
	for name, tc := range map[string]struct {
		req   contracts.SubmitRequest
		field string
	}{
		"run_at too far":      {contracts.SubmitRequest{Kind: "sleep", RunAt: "800h"}, "run_at"},
		"run_at garbage":      {contracts.SubmitRequest{Kind: "sleep", RunAt: "tomorrow"}, "run_at"},
		"limit without key":   {contracts.SubmitRequest{Kind: "sleep", ConcurrencyLimit: 2}, "concurrency_key"},
		"key without limit":   {contracts.SubmitRequest{Kind: "sleep", ConcurrencyKey: "db"}, "concurrency_limit"},
		"key too long":        {contracts.SubmitRequest{Kind: "sleep", ConcurrencyKey: string(make([]byte, 129)), ConcurrencyLimit: 1}, "concurrency_key"},
		"priority over 9":     {contracts.SubmitRequest{Kind: "sleep", Priority: 10}, "priority"},
		"deadline before run": {contracts.SubmitRequest{Kind: "sleep", RunAt: "1h", Deadline: time.Now().Add(time.Minute).UTC().Format(time.RFC3339)}, "deadline"},
	} {
		code, detail := b.submitError(tc.req)
		require.Equal(t, http.StatusUnprocessableEntity, code, name)
		require.Contains(t, detail.Message, tc.field, name)
	}
}
