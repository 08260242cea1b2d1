package devstack

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/worker/worker"
)

// TestEndToEndBoundedPerWorker pushes 500 sleep jobs through the gateway,
// two scheduler replicas and three workers limited to two jobs each: every job
// succeeds, and no worker is ever seen running more than two.
func TestEndToEndBoundedPerWorker(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 3, Schedulers: 2}, map[string]string{
		"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "2",
		"SLUICE_RETRY_INTERVAL":              "200ms",
	})
	const jobs = 500

	// Sample the workers' own slot counts while the jobs run, from before
	// the first submit: jobs of a few ms can all end before the last one
	// is in.
	var maxInFlight atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, w := range b.stack.Workers {
				if n := int64(w.InFlight()); n > maxInFlight.Load() {
					maxInFlight.Store(n)
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	ids := make([]string, jobs)
	for i := range jobs {
		ids[i] = b.mustSubmit("sleep", map[string]int{"ms": i % 7}).ID
	}
	// From the store afterwards: each job's handler ran at least from its
	// started_at for its sleep. (A sampled "running" count per worker is
	// not this: a worker frees the slot when the handler returns, before
	// the scheduler records the result, so the store can briefly show one
	// job more than the worker runs.)
	type window struct{ from, to time.Time }
	perWorker := map[string][]window{}
	for i, id := range ids {
		j := b.waitFinal(id, 60*time.Second)
		require.Equal(t, contracts.StateSucceeded, j.State, "job %s: %s", id, j.Error)
		require.NotNil(t, j.StartedAt)
		perWorker[j.Worker] = append(perWorker[j.Worker], window{*j.StartedAt, j.StartedAt.Add(time.Duration(i%7) * time.Millisecond)})
	}
	close(stop)
	wg.Wait()
	maxPerWorker := 0
	for _, ws := range perWorker {
		for _, w := range ws {
			n := 0
			for _, o := range ws {
				if !o.from.After(w.from) && o.to.After(w.from) {
					n++ // o was running at the moment w started
				}
			}
			maxPerWorker = max(maxPerWorker, n)
		}
	}
	t.Logf("most jobs one worker ran at once, from the store: %d (limit 2); from its own slots: %d", maxPerWorker, maxInFlight.Load())
	require.LessOrEqual(t, maxPerWorker, 2, "a worker ran more than its limit (store windows)")
	require.LessOrEqual(t, maxInFlight.Load(), int64(2), "a worker ran more than its limit")
	require.Positive(t, maxInFlight.Load())
	var st contracts.Stats
	b.getJSON("/v1/stats", &st)
	require.Equal(t, jobs, st.Counts[contracts.StateSucceeded])
	require.Zero(t, st.Active)
}

// TestOverflowRunsWhenAWorkerFreesUp fills the only slot, so the next job
// waits: it stays pending in the store without spending a dispatch claim,
// and runs as soon as the slot frees — woken by the freed slot, not by a
// poll (the poll interval here is an hour).
func TestOverflowRunsWhenAWorkerFreesUp(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 1}, map[string]string{"SLUICE_RETRY_INTERVAL": "1h"})
	first := b.mustSubmit("sleep", map[string]int{"ms": 700})
	b.waitState(first.ID, contracts.StateRunning, 5*time.Second)
	second := b.mustSubmit("sleep", map[string]int{"ms": 0})

	require.Never(t, func() bool {
		seen := b.job(second.ID)
		return seen.State != contracts.StatePending || seen.Claim != 0
	}, 300*time.Millisecond, 10*time.Millisecond, "no room: the job waits pending, no claim spent")

	f := b.waitFinal(first.ID, 5*time.Second)
	s := b.waitFinal(second.ID, 10*time.Second)
	require.Equal(t, contracts.StateSucceeded, f.State)
	require.Equal(t, contracts.StateSucceeded, s.State)
	require.Equal(t, int64(1), s.Claim, "one claim, taken when the slot was free")
	// The first handler ran 700 ms after its start was recorded; the second
	// could only start once that slot was free. (Its start may be recorded
	// before the first job's result is: the slot frees before the result
	// reaches the store.)
	require.False(t, s.StartedAt.Before(f.StartedAt.Add(700*time.Millisecond)), "the waiting job started before the slot was free")
}

// TestDispatchDeadlineFailsWithCapacity: with no worker at all, a job waits
// until its dispatch deadline and then fails with a capacity: error.
func TestDispatchDeadlineFailsWithCapacity(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: -1}, map[string]string{"SLUICE_DISPATCH_DEADLINE": "1s", "SLUICE_RETRY_INTERVAL": "200ms"})
	j := b.mustSubmit("sleep", map[string]int{"ms": 1})
	got := b.waitFinal(j.ID, 10*time.Second)
	require.Equal(t, contracts.StateFailed, got.State)
	require.Equal(t, contracts.ClassCapacity, contracts.ClassOf(got.Error), got.Error)
	require.False(t, got.FinishedAt.Before(j.DispatchDeadline), "failed before its deadline")

	// A job whose own deadline is shorter fails sooner.
	code, short := b.submit(contracts.SubmitRequest{Kind: "sleep", Deadline: "300ms"})
	require.Equal(t, http.StatusAccepted, code)
	got = b.waitFinal(short.ID, 5*time.Second)
	require.True(t, strings.HasPrefix(got.Error, "capacity:"), got.Error)
}

// TestRunningOnAcceptance: a handler's first step already sees its job
// recorded as running.
func TestRunningOnAcceptance(t *testing.T) {
	t.Parallel()
	seen := make(chan contracts.JobState, 1)
	var st atomic.Value // store.Store, set before any job is submitted
	b := setup(t, Options{Workers: 1, SetupWorker: func(_ int, w *worker.Worker) error {
		return w.Handle("probe", func(ctx context.Context, job worker.Job) (worker.Result, error) {
			j, err := st.Load().(store.Store).Get(ctx, job.ID)
			if err != nil {
				return nil, err
			}
			seen <- j.State
			return worker.JSON(map[string]string{"seen": string(j.State)})
		})
	}}, nil)
	st.Store(b.stack.Store)
	j := b.mustSubmit("probe", nil)
	select {
	case state := <-seen:
		require.Equal(t, contracts.StateRunning, state)
	case <-time.After(10 * time.Second):
		t.Fatal("handler never ran")
	}
	done := b.waitFinal(j.ID, 5*time.Second)
	require.Equal(t, contracts.StateSucceeded, done.State)
	var res map[string]string
	require.NoError(t, json.Unmarshal(done.Result, &res))
	require.Equal(t, "running", res["seen"])
	require.NotEmpty(t, done.Worker)
	require.Equal(t, 1, done.Attempt)
}
