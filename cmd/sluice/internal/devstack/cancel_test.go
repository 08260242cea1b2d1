package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/client"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// cancelJob posts a cancel through the Go client and returns the status
// and body; a transport error is status 0 with the error as the body, so
// it is safe to call from any goroutine.
func (b *bundle) cancelJob(id string) (int, []byte) {
	c, err := client.New(b.base)
	if err != nil {
		return 0, []byte(err.Error())
	}
	body, code, err := c.Raw(context.Background(), http.MethodPost, "/v1/jobs/"+id+"/cancel", nil)
	if apiErr, ok := errors.AsType[*client.Error](err); ok {
		return apiErr.Status, apiErr.Body
	}
	if err != nil {
		return 0, []byte(err.Error())
	}
	return code, body
}

// alive reports whether a process with that pid still exists.
func alive(pid int) bool {
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func TestCancelReachesTheExecProcessGroupAndFreesTheSlot(t *testing.T) {
	t.Parallel()
	dir := sharedDir(t)
	b := setup(t, Options{Workers: 1}, map[string]string{"SLUICE_WORKER_EXEC_ALLOW": "/bin/sh", "SLUICE_WORKER_EXEC_DIRS": dir})
	pidFile := filepath.Join(dir, "child.pid")
	// The shell starts a grandchild and waits for it: only killing the
	// whole process group stops both.
	job := b.mustSubmit("exec", map[string]any{
		"argv":    []string{"/bin/sh", "-c", "sleep 300 & echo $! > " + pidFile + "; wait"},
		"timeout": "10m",
	})
	b.waitState(job.ID, contracts.StateRunning, 20*time.Second)
	var child int
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		child, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil && child > 0
	}, 20*time.Second, 10*time.Millisecond, "the job's grandchild never started")
	require.True(t, alive(child))

	start := time.Now()
	code, body := b.cancelJob(job.ID)
	require.Equal(t, http.StatusAccepted, code, string(body))
	var requested contracts.Job
	require.NoError(t, json.Unmarshal(body, &requested))
	require.True(t, requested.CancelRequested || requested.State == contracts.StateCancelled)

	final := b.waitFinal(job.ID, 20*time.Second)
	took := time.Since(start)
	require.Equal(t, contracts.StateCancelled, final.State)
	require.Equal(t, contracts.ClassCancelled, contracts.ClassOf(final.Error), final.Error)
	require.Eventually(t, func() bool { return !alive(child) }, 20*time.Second, 10*time.Millisecond,
		"the grandchild %d outlived the cancel", child)
	t.Logf("cancel of a running exec job: cancelled in the store %s after the request", took.Round(time.Millisecond))

	// The slot is free: the worker takes the next job at once.
	next := b.mustSubmit("sleep", map[string]int{"ms": 0})
	require.Equal(t, contracts.StateSucceeded, b.waitFinal(next.ID, 20*time.Second).State)

	// Cancel is idempotent; a job finished otherwise answers 409 naming its state.
	code, body = b.cancelJob(job.ID)
	require.Equal(t, http.StatusAccepted, code, string(body))
	code, body = b.cancelJob(next.ID)
	require.Equal(t, http.StatusConflict, code)
	require.Contains(t, string(body), string(contracts.StateSucceeded))
}

func TestCancelRacingCompletionEndsInOneFinalState(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 2}, map[string]string{"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "4"})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, resp := b.openSSE(ctx, "/v1/events", nil)
	require.NotNil(t, ch, "status %d", resp.StatusCode)

	// 40 jobs of 0–400 ms on 8 slots, each cancelled at a moment spread
	// over the whole run, starting while the others are still submitted:
	// some cancels land while the job waits, some while it runs, some
	// after its result.
	const n = 40
	ids := make([]string, n)
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		id := b.mustSubmit("sleep", map[string]int{"ms": (i % 5) * 100}).ID
		ids[i] = id
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i%8) * 60 * time.Millisecond)
			codes[i], _ = b.cancelJob(id)
		}()
	}
	wg.Wait()

	finals := map[string]contracts.JobState{}
	for i, id := range ids {
		j := b.waitFinal(id, 30*time.Second)
		finals[id] = j.State
		require.Contains(t, []contracts.JobState{contracts.StateSucceeded, contracts.StateCancelled}, j.State)
		switch codes[i] {
		case http.StatusAccepted:
		case http.StatusConflict:
			require.Equal(t, contracts.StateSucceeded, j.State, "409 only for a job that finished first")
		default:
			t.Fatalf("cancel of %s answered %d", id, codes[i])
		}
	}

	// The event stream shows exactly one final state per job, the one the
	// store keeps.
	seen := map[string][]contracts.JobState{}
	deadline := time.After(30 * time.Second)
	for len(seen) < n {
		select {
		case ev, ok := <-ch:
			require.True(t, ok)
			e := decodeEvent(t, ev)
			if e.Type == contracts.EventState && e.State.Final() {
				seen[e.JobID] = append(seen[e.JobID], e.State)
			}
		case <-deadline:
			t.Fatalf("final events for %d of %d jobs", len(seen), n)
		}
	}
	// Give a duplicate final event the chance to show up.
	quiet := time.After(500 * time.Millisecond)
	for done := false; !done; {
		select {
		case ev := <-ch:
			e := decodeEvent(t, ev)
			if e.Type == contracts.EventState && e.State.Final() {
				seen[e.JobID] = append(seen[e.JobID], e.State)
			}
		case <-quiet:
			done = true
		}
	}
	counts := map[contracts.JobState]int{}
	for _, id := range ids {
		require.Equal(t, []contracts.JobState{finals[id]}, seen[id], "job %s", id)
		require.Equal(t, finals[id], b.job(id).State, "a final state never changes")
		counts[finals[id]]++
	}
	t.Logf("cancel racing completion: %v", counts)
	require.True(t, slices.ContainsFunc(ids, func(id string) bool { return finals[id] == contracts.StateCancelled }),
		"no cancel won the race: the test did not race")
}

// TestCancelOfAJobWhoseWorkerFreezesEndsCancelled: a running job is
// cancelled while its worker process is frozen (SIGSTOP: it neither hears
// the cancel nor heartbeats). Once the job is stale it ends cancelled, as
// asked, with its one run: it is not dispatched again.
func TestCancelOfAJobWhoseWorkerFreezesEndsCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: -1}, nil)
	proc := startWorkerProcess(t, b, "worker-frozen")
	j := b.mustSubmit("sleep", map[string]int{"ms": 60000})
	running := b.waitState(j.ID, contracts.StateRunning, 10*time.Second)
	require.Equal(t, "worker-frozen", running.Worker)

	require.NoError(t, syscall.Kill(proc.Process.Pid, syscall.SIGSTOP))
	code, body := b.cancelJob(j.ID)
	require.Equal(t, http.StatusAccepted, code, string(body))

	done := b.waitFinal(j.ID, 20*time.Second)
	require.Equal(t, contracts.StateCancelled, done.State, done.Error)
	require.Equal(t, contracts.CancelledByRequest, done.Error)
	require.Equal(t, running.Claim, done.Claim, "not dispatched again")
	require.Equal(t, 1, done.Attempt)
}
