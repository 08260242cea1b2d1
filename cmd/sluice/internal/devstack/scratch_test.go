package devstack

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// execResult reads a finished exec job's result.
func execResult(t *testing.T, j contracts.Job) struct{ Stdout string } {
	t.Helper()
	var r struct{ Stdout string }
	require.NoError(t, json.Unmarshal(j.Result, &r), string(j.Result))
	return r
}

// waitGone waits until path no longer exists.
func waitGone(t *testing.T, path, msg string) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := os.Stat(path)
		return os.IsNotExist(err)
	}, 10*time.Second, 10*time.Millisecond, msg+": %s is still there", path)
}

// readWhenWritten waits for a file to hold a line and returns it.
func readWhenWritten(t *testing.T, path string) string {
	t.Helper()
	var s string
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(path)
		s = strings.TrimSpace(string(data))
		return err == nil && s != ""
	}, 20*time.Second, 10*time.Millisecond, "%s never written", path)
	return s
}

// runDir is where a worker keeps the scratch directory of a job's claim.
func runDir(root string, j contracts.Job) string {
	return filepath.Join(root, j.Worker, j.ID+"-"+strconv.FormatInt(j.Claim, 10))
}

// isolation is the isolation the stack's first worker announces.
func isolation(b *bundle) contracts.Isolation {
	var st contracts.Stats
	b.getJSON("/v1/stats", &st)
	if len(st.Workers) == 0 {
		return ""
	}
	return st.Workers[0].Isolation
}

// TestExecRunsInAScratchDirOnLeastPrivilege: every exec run works in a
// fresh scratch directory of its own (told in SLUICE_SCRATCH_DIR), gone
// after success, failure and cancel; a job that sets a variable or picks a
// dir the operator did not allow fails input: after one run; a run that
// fills its scratch past SLUICE_WORKER_MAX_SCRATCH_BYTES fails handler:.
func TestExecRunsInAScratchDirOnLeastPrivilege(t *testing.T) {
	t.Parallel()
	scratch, root, marks := t.TempDir(), sharedDir(t), t.TempDir()
	b := setup(t, Options{Workers: 1}, map[string]string{
		"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "4",
		"SLUICE_WORKER_EXEC_ALLOW":           "/bin/sh",
		"SLUICE_WORKER_EXEC_ENV_ALLOW":       "GREETING",
		"SLUICE_WORKER_EXEC_DIRS":            root,
		"SLUICE_WORKER_SCRATCH_DIR":          scratch,
		"SLUICE_WORKER_MAX_SCRATCH_BYTES":    "100000",
	})
	sh := func(script string, extra map[string]any) contracts.Job {
		p := map[string]any{"argv": []string{"/bin/sh", "-c", script}}
		for k, v := range extra {
			p[k] = v
		}
		raw, err := json.Marshal(p)
		require.NoError(t, err)
		code, j := b.submit(contracts.SubmitRequest{Kind: "exec", Payload: raw, MaxAttempts: 3})
		require.Equal(t, http.StatusAccepted, code)
		return j
	}

	// Success: it ran in its own directory, which is gone afterwards.
	ok := b.waitFinal(sh(`pwd; echo "$SLUICE_SCRATCH_DIR"; echo "$GREETING"; echo data > file; ls`,
		map[string]any{"env": map[string]string{"GREETING": "hello"}}).ID, 20*time.Second)
	require.Equal(t, contracts.StateSucceeded, ok.State, ok.Error)
	lines := strings.Split(strings.TrimSpace(execResult(t, ok).Stdout), "\n")
	require.Len(t, lines, 4)
	require.Equal(t, lines[0], lines[1], "SLUICE_SCRATCH_DIR is the working directory")
	// Where the worker keeps it: under SLUICE_WORKER_SCRATCH_DIR, named
	// after the job and its claim; where the run sees it: there, or, in a
	// namespace of its own, at a fixed path.
	dir := runDir(scratch, ok)
	if isolation(b) == contracts.IsolationNamespace {
		require.Equal(t, "/tmp/sluice/scratch", lines[0])
	} else {
		require.Equal(t, dir, lines[0])
	}
	require.Equal(t, []string{"hello", "file"}, lines[2:])
	waitGone(t, dir, "after success")

	// Failure: gone too (the result keeps what the program printed).
	failed := b.waitFinal(sh(`pwd; exit 3`, map[string]any{}).ID, 30*time.Second)
	require.Equal(t, contracts.StateFailed, failed.State)
	waitGone(t, runDir(scratch, failed), "after failure")

	// Cancel: gone too.
	long := sh(`sleep 300`, nil)
	running := runDir(scratch, b.waitState(long.ID, contracts.StateRunning, 20*time.Second))
	require.Eventually(t, func() bool { _, err := os.Stat(running); return err == nil }, 20*time.Second, 10*time.Millisecond)
	code, _ := b.cancelJob(long.ID)
	require.Equal(t, http.StatusAccepted, code)
	require.Equal(t, contracts.StateCancelled, b.waitFinal(long.ID, 20*time.Second).State)
	waitGone(t, running, "after cancel")

	// A dir under an allowed root, or inside the scratch directory, is fine.
	require.NoError(t, os.Mkdir(filepath.Join(root, "work"), 0o755))
	inRoot := b.waitFinal(sh(`pwd`, map[string]any{"dir": filepath.Join(root, "work")}).ID, 20*time.Second)
	require.Equal(t, contracts.StateSucceeded, inRoot.State, inRoot.Error)
	require.Equal(t, filepath.Join(root, "work")+"\n", execResult(t, inRoot).Stdout)

	// What the operator did not allow fails input: after one run.
	for name, extra := range map[string]map[string]any{
		"env name not allowed": {"env": map[string]string{"BASH_ENV": "/tmp/evil"}},
		"PATH not allowed":     {"env": map[string]string{"PATH": marks}},
		"dir outside":          {"dir": marks},
		"dir up and out":       {"dir": "../.."},
	} {
		j := b.waitFinal(sh(`echo ran`, extra).ID, 20*time.Second)
		require.Equal(t, contracts.StateFailed, j.State, name)
		require.Equal(t, contracts.ClassInput, contracts.ClassOf(j.Error), "%s: %s", name, j.Error)
		require.Equal(t, 1, j.Attempt, "%s: an input error is not retried", name)
	}

	// Filling the scratch directory past its bound stops the run.
	full := b.waitFinal(sh(`head -c 1000000 /dev/zero > big; sleep 30`, map[string]any{}).ID, 60*time.Second)
	require.Equal(t, contracts.StateFailed, full.State)
	require.Contains(t, full.Error, "scratch directory over its limit")
	require.Equal(t, contracts.ClassHandler, contracts.ClassOf(full.Error))
}

// TestScratchOfAKilledWorkerIsRemoved: a worker killed with -9 in the
// middle of a run leaves its scratch directory behind; the next worker to
// start on that scratch root removes it (its lock is free), and the job
// runs again elsewhere.
func TestScratchOfAKilledWorkerIsRemoved(t *testing.T) {
	t.Parallel()
	scratch, marks := t.TempDir(), sharedDir(t)
	b := setup(t, Options{Workers: -1}, nil)
	env := []string{"SLUICE_WORKER_EXEC_ALLOW=/bin/sh", "SLUICE_WORKER_SCRATCH_DIR=" + scratch, "SLUICE_WORKER_EXEC_DIRS=" + marks}
	proc := startWorkerProcess(t, b, "worker-doomed", env...)
	mark := filepath.Join(marks, "started")
	raw, err := json.Marshal(map[string]any{"argv": []string{"/bin/sh", "-c", `echo started >> ` + mark + `; sleep 2`}})
	require.NoError(t, err)
	code, j := b.submit(contracts.SubmitRequest{Kind: "exec", Payload: raw})
	require.Equal(t, http.StatusAccepted, code)
	readWhenWritten(t, mark)
	left := runDir(scratch, b.job(j.ID))
	require.NoError(t, syscall.Kill(proc.Process.Pid, syscall.SIGKILL))
	_, _ = proc.Process.Wait()
	require.DirExists(t, left, "a killed worker leaves its run's directory")

	startWorkerProcess(t, b, "worker-next", env...)
	waitGone(t, left, "after the next worker started")
	done := b.waitFinal(j.ID, 30*time.Second)
	require.Equal(t, contracts.StateSucceeded, done.State, done.Error)
	require.Equal(t, "worker-next", done.Worker)
	waitGone(t, filepath.Join(scratch, "worker-doomed"), "the dead worker's folder")
}

// TestRunLimitsStopStalledAndLongRuns: an exec job that prints nothing for
// its stall_timeout is stopped and fails timeout:, one that keeps printing
// runs on; a run past its max_runtime fails timeout:; limits out of bounds
// are refused 422.
func TestRunLimitsStopStalledAndLongRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 1}, map[string]string{
		"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "4",
		"SLUICE_WORKER_EXEC_ALLOW":           "/bin/sh",
		"SLUICE_MAX_RUNTIME":                 "1h",
		// What stops these runs is their own limits, never staleness: a
		// loaded machine may hold the bundle's 2 s heartbeat age back.
		"SLUICE_STALE_THRESHOLD": "30s",
	})
	sh := func(script string, limits contracts.SubmitRequest) contracts.Job {
		raw, err := json.Marshal(map[string]any{"argv": []string{"/bin/sh", "-c", script}})
		require.NoError(t, err)
		limits.Kind, limits.Payload, limits.MaxAttempts = "exec", raw, 1
		code, j := b.submit(limits)
		require.Equal(t, http.StatusAccepted, code)
		return j
	}
	stalled := sh(`echo started; sleep 60`, contracts.SubmitRequest{StallTimeout: "1s"})
	chatty := sh(`for i in 1 2 3 4 5 6 7 8; do echo $i; sleep 0.3; done`, contracts.SubmitRequest{StallTimeout: "1s"})
	long := sh(`sleep 60`, contracts.SubmitRequest{MaxRuntime: "1500ms"})
	require.Equal(t, contracts.Duration(time.Second), stalled.StallTimeout)

	j := b.waitFinal(stalled.ID, 20*time.Second)
	require.Equal(t, contracts.StateFailed, j.State)
	require.Equal(t, "timeout: no progress for 1s (stall_timeout)", j.Error)
	j = b.waitFinal(chatty.ID, 20*time.Second)
	require.Equal(t, contracts.StateSucceeded, j.State, j.Error)
	j = b.waitFinal(long.ID, 20*time.Second)
	require.Equal(t, contracts.StateFailed, j.State)
	require.Equal(t, "timeout: ran longer than its max_runtime 1.5s", j.Error)

	for _, bad := range []contracts.SubmitRequest{
		{Kind: "sleep", StallTimeout: "soon"},
		{Kind: "sleep", StallTimeout: "-1s"},
		{Kind: "sleep", MaxRuntime: "2h"}, // over SLUICE_MAX_RUNTIME
	} {
		code, _ := b.submit(bad)
		require.Equal(t, http.StatusUnprocessableEntity, code, "%+v", bad)
	}
}
