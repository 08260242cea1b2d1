package devstack

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/client"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// sleepItems are n sleep items of ms milliseconds; the indexes in bad get
// an item the sleep kind refuses (an input error: no retry).
func sleepItems(n, ms int, bad ...int) json.RawMessage {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`{"ms":%d}`, ms)
		for _, b := range bad {
			if b == i {
				parts[i] = `{"ms":-1}`
			}
		}
	}
	return json.RawMessage("[" + strings.Join(parts, ",") + "]")
}

// fanout submits a sleep fan-out and requires a 202.
func (b *bundle) fanout(items json.RawMessage, window int, failFast bool) contracts.Job {
	b.t.Helper()
	code, p := b.submit(contracts.SubmitRequest{Kind: "sleep", Items: items, Concurrency: window, FailFast: failFast})
	require.Equal(b.t, http.StatusAccepted, code)
	require.True(b.t, p.IsParent())
	return p
}

// children lists every child of parent through the API, by index.
func (b *bundle) children(parent string, state contracts.JobState) []contracts.Job {
	b.t.Helper()
	var all []contracts.Job
	q := client.Query{Parent: parent, State: state, Limit: 500}
	for {
		page, err := b.api().List(context.Background(), q)
		require.NoError(b.t, err)
		all = append(all, page.Jobs...)
		if page.NextCursor == "" {
			break
		}
		q.Cursor = page.NextCursor
	}
	sort.Slice(all, func(i, k int) bool { return *all[i].Index < *all[k].Index })
	return all
}

// peakOverlap is the most of jobs that ran at once, from their own times.
func peakOverlap(t *testing.T, kids []contracts.Job) int {
	t.Helper()
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, c := range kids {
		if c.StartedAt == nil {
			continue
		}
		require.NotNil(t, c.FinishedAt, c.ID)
		edges = append(edges, edge{*c.StartedAt, +1}, edge{*c.FinishedAt, -1})
	}
	sort.Slice(edges, func(i, k int) bool {
		if edges[i].at.Equal(edges[k].at) {
			return edges[i].delta < edges[k].delta
		}
		return edges[i].at.Before(edges[k].at)
	})
	running, peak := 0, 0
	for _, e := range edges {
		running += e.delta
		peak = max(peak, running)
	}
	return peak
}

// TestFanoutWindowHoldsAndRefills: a fan-out of 24 items with a window of
// 3 on 16 free slots runs exactly 3 at a time, every child succeeds, and
// the parent ends succeeded with its counts.
func TestFanoutWindowHoldsAndRefills(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 2}, map[string]string{"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "8"})
	p := b.fanout(sleepItems(24, 60), 3, false)
	require.Equal(t, &contracts.ChildCounts{Total: 24, Pending: 24}, p.Children)
	require.Equal(t, 3, p.Concurrency)

	// Sampled while it runs: never more than 3 running.
	done := false
	for !done {
		j := b.job(p.ID)
		require.LessOrEqual(t, j.Children.Running, 3)
		done = j.State.Final()
		time.Sleep(20 * time.Millisecond)
	}
	par := b.waitFinal(p.ID, 30*time.Second)
	require.Equal(t, contracts.StateSucceeded, par.State, par.Error)
	require.Equal(t, &contracts.ChildCounts{Total: 24, Succeeded: 24}, par.Children)
	require.NotNil(t, par.StartedAt)
	var res contracts.FanoutResult
	require.NoError(t, json.Unmarshal(par.Result, &res))
	require.Equal(t, 24, res.Children.Succeeded)

	kids := b.children(p.ID, "")
	require.Len(t, kids, 24)
	for i, c := range kids {
		require.Equal(t, i, *c.Index)
		require.Equal(t, p.ID, c.Parent)
		require.Equal(t, contracts.StateSucceeded, c.State)
		require.JSONEq(t, `{"slept_ms":60}`, string(c.Result))
	}
	require.Equal(t, 3, peakOverlap(t, kids), "the window is full while children wait, and never over")

	// The top-level list shows the parent, not the children.
	page, err := b.api().List(context.Background(), client.Query{})
	require.NoError(t, err)
	require.Len(t, page.Jobs, 1)
	require.Equal(t, p.ID, page.Jobs[0].ID)
	// Its slots are free again.
	var st contracts.Stats
	b.getJSON("/v1/stats", &st)
	require.Zero(t, st.Active)
}

// TestFanoutFailureModes: by default a failed child fails the parent at
// the end, after every other child ran; with fail_fast the children still
// waiting are cancelled at the first failure.
func TestFanoutFailureModes(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 1}, map[string]string{"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "4"})

	p := b.fanout(sleepItems(8, 20, 2), 2, false)
	par := b.waitFinal(p.ID, 30*time.Second)
	require.Equal(t, contracts.StateFailed, par.State)
	require.Equal(t, &contracts.ChildCounts{Total: 8, Succeeded: 7, Failed: 1}, par.Children)
	var res contracts.FanoutResult
	require.NoError(t, json.Unmarshal(par.Result, &res))
	require.Equal(t, []string{contracts.ChildID(p.ID, 2)}, res.Failed)
	require.Contains(t, par.Error, "1 of 8 children failed")
	require.Equal(t, contracts.ClassInput, contracts.ClassOf(b.job(contracts.ChildID(p.ID, 2)).Error))

	q := b.fanout(sleepItems(12, 50, 1), 2, true)
	par = b.waitFinal(q.ID, 30*time.Second)
	require.Equal(t, contracts.StateFailed, par.State)
	require.Equal(t, 1, par.Children.Failed)
	require.GreaterOrEqual(t, par.Children.Cancelled, 9, "the waiting children are cancelled at the first failure")
	require.Equal(t, 12, par.Children.Finished())
	for _, c := range b.children(q.ID, contracts.StateCancelled) {
		// The waiting ones and the one still running: the rest.
		require.Equal(t, contracts.ClassCancelled, contracts.ClassOf(c.Error))
		require.NotEqual(t, 1, *c.Index)
	}
}

// TestFanoutCancelCascades: cancelling a parent ends its waiting children
// at once, stops its running ones, and the parent ends cancelled;
// cancelling one child cancels only that child.
func TestFanoutCancelCascades(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 1}, map[string]string{"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "4"})
	api := b.api()
	ctx := context.Background()

	one := b.fanout(sleepItems(4, 30), 1, false)
	held, err := api.Cancel(ctx, contracts.ChildID(one.ID, 3))
	require.NoError(t, err)
	require.Equal(t, contracts.StateCancelled, held.State)
	par := b.waitFinal(one.ID, 30*time.Second)
	require.Equal(t, &contracts.ChildCounts{Total: 4, Succeeded: 3, Cancelled: 1}, par.Children)

	p := b.fanout(sleepItems(20, 5000), 2, false)
	require.Eventually(t, func() bool { return b.job(p.ID).Children.Running == 2 }, 10*time.Second, 10*time.Millisecond)
	got, err := api.Cancel(ctx, p.ID)
	require.NoError(t, err)
	require.True(t, got.CancelRequested)
	require.Equal(t, 18, got.Children.Cancelled, "the waiting children end at once")
	par = b.waitFinal(p.ID, 10*time.Second)
	require.Equal(t, contracts.StateCancelled, par.State)
	require.Equal(t, &contracts.ChildCounts{Total: 20, Cancelled: 20}, par.Children)
	for _, c := range b.children(p.ID, "") {
		require.Equal(t, contracts.StateCancelled, c.State)
	}
}

// TestFanoutParentEventsAndValidation: the parent's event stream carries
// its progress and closes after its final state; bad fan-outs get 422 and
// write nothing; a parent is admitted whole under the cap.
func TestFanoutParentEventsAndValidation(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 1}, map[string]string{"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "4", "SLUICE_MAX_ACTIVE": "5"})
	p := b.fanout(sleepItems(6, 30), 2, false)
	var progress []float64
	final, err := b.api().Wait(context.Background(), p.ID, func(ev contracts.Event) {
		if ev.Type == contracts.EventProgress && ev.Progress != nil {
			progress = append(progress, ev.Progress.Percent)
		}
	})
	require.NoError(t, err)
	require.Equal(t, contracts.StateSucceeded, final.State)
	require.NotEmpty(t, progress)
	require.Equal(t, 100.0, progress[len(progress)-1])

	for _, bad := range []contracts.SubmitRequest{
		{Kind: "sleep", Items: json.RawMessage(`[]`)},
		{Kind: "sleep", Items: json.RawMessage(`{"a":1}`)},
		{Kind: "sleep", Items: json.RawMessage(`[1]`), Concurrency: 1001},
		{Kind: "sleep", Concurrency: 3},
		{Kind: "sleep", FailFast: true},
		{Kind: "sleep", Items: json.RawMessage(`[1]`), Payload: json.RawMessage(`{}`)},
	} {
		code, _ := b.submit(bad)
		require.Equal(t, http.StatusUnprocessableEntity, code, "%+v", bad)
	}
	// The cap is 5: a window of 6 can never be admitted, a window of 5 can.
	code, _ := b.submit(contracts.SubmitRequest{Kind: "sleep", Items: sleepItems(10, 1), Concurrency: 6})
	require.Equal(t, http.StatusTooManyRequests, code)
	q := b.fanout(sleepItems(10, 1), 5, false)
	require.Equal(t, contracts.StateSucceeded, b.waitFinal(q.ID, 30*time.Second).State)
}

// TestFanoutSurvivesAKilledWorker: a worker process killed with -9 in the
// middle of a fan-out: its children are found stale and run again
// elsewhere, the window still holds, and every child ends.
func TestFanoutSurvivesAKilledWorker(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 1}, map[string]string{"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "4"})
	proc := startWorkerProcess(t, b, "worker-00", "SLUICE_WORKER_MAX_CONCURRENT_TASKS=4")
	require.Eventually(t, func() bool {
		var st contracts.Stats
		b.getJSON("/v1/stats", &st)
		return len(st.Workers) == 2
	}, 10*time.Second, 20*time.Millisecond)

	p := b.fanout(sleepItems(16, 300), 3, false)
	// worker-00 sorts first: it takes the window's children.
	require.Eventually(t, func() bool {
		for _, c := range b.children(p.ID, contracts.StateRunning) {
			if c.Worker == "worker-00" {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, syscall.Kill(proc.Process.Pid, syscall.SIGKILL))
	_, _ = proc.Process.Wait()

	par := b.waitFinal(p.ID, 60*time.Second)
	require.Equal(t, contracts.StateSucceeded, par.State, par.Error)
	kids := b.children(p.ID, "")
	require.Len(t, kids, 16)
	requeued := 0
	for _, c := range kids {
		require.Equal(t, contracts.StateSucceeded, c.State)
		if c.Runs > 1 {
			requeued++
		}
	}
	require.Positive(t, requeued, "the killed worker's children ran again")
	// The store's times of the last runs never overlap more than the window.
	require.LessOrEqual(t, peakOverlap(t, kids), 3)
}

// TestFanoutAcrossARestart: a whole-stack restart in the middle of a
// fan-out loses nothing: the parent picks up where it was.
func TestFanoutAcrossARestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := map[string]string{"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "4"}
	b := start(t, dir, Options{Workers: 1}, env)
	p := b.fanout(sleepItems(30, 40), 2, false)
	require.Eventually(t, func() bool { return b.job(p.ID).Children.Succeeded >= 4 }, 20*time.Second, 10*time.Millisecond)
	b.stop()

	b = start(t, dir, Options{Workers: 1}, env)
	par := b.waitFinal(p.ID, 60*time.Second)
	require.Equal(t, contracts.StateSucceeded, par.State, par.Error)
	require.Equal(t, &contracts.ChildCounts{Total: 30, Succeeded: 30}, par.Children)
	require.LessOrEqual(t, peakOverlap(t, b.children(p.ID, "")), 2)
}
