package devstack

import (
	"bytes"
	"encoding/json"
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

// Jobs are walls (DESIGN.md, guarantee 8), tried from inside a job as a
// hostile tenant would, on the real worker process.

// workerSecret is a credential in the worker process's environment, as
// SLUICE_API_TOKENS or a NATS password would be.
const workerSecret = "SLUICE_TEST_SECRET=s3cret-of-the-worker"

// sharedDir is a directory a test shares with its jobs' runs, which have
// a uid of their own and a private /tmp: name it in
// SLUICE_WORKER_EXEC_DIRS (the worker binds it into their namespaces at
// its own path). Anyone may write in it and pass through to it.
func sharedDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	require.NoError(t, os.Chmod(d, 0o777))
	for p := filepath.Dir(d); p != os.TempDir() && p != "/" && p != "."; p = filepath.Dir(p) {
		info, err := os.Stat(p)
		require.NoError(t, err)
		require.NoError(t, os.Chmod(p, info.Mode().Perm()|0o011))
	}
	return d
}

// startWalledWorker starts a worker process taking /bin/sh exec jobs, with
// workerSecret in its environment, and waits until the stack sees it.
func startWalledWorker(t *testing.T, b *bundle, extraEnv ...string) *os.Process {
	t.Helper()
	env := append([]string{"SLUICE_WORKER_EXEC_ALLOW=/bin/sh", workerSecret}, extraEnv...)
	proc := startWorkerProcess(t, b, "worker-00", env...)
	require.Eventually(t, func() bool {
		var st contracts.Stats
		b.getJSON("/v1/stats", &st)
		return len(st.Workers) == 1
	}, 10*time.Second, 20*time.Millisecond)
	return proc.Process
}

// needOwnUID skips the test, saying why, when the stack's workers give
// runs no uid of their own here (a test not run as root).
func needOwnUID(t *testing.T, b *bundle) {
	t.Helper()
	var st contracts.Stats
	b.getJSON("/v1/stats", &st)
	require.NotEmpty(t, st.Workers)
	if iso := st.Workers[0].Isolation; !iso.OwnIdentity() {
		t.Skipf("runs get no uid of their own on this host (isolation %q): the worker's log says why", iso)
	}
}

// execStdout is a finished exec job's stdout.
func execStdout(t *testing.T, j contracts.Job) string {
	t.Helper()
	var r struct{ Stdout string }
	require.NoError(t, json.Unmarshal(j.Result, &r), "%+v", j)
	return r.Stdout
}

// TestExecJobCannotReadItsWorker: a job reads its parent's environment,
// command line and descriptors (the worker's: credentials are there) and
// the embedded store's file, and lists the processes it can see. It
// gets none of it and sees only its own processes.
func TestExecJobCannotReadItsWorker(t *testing.T) {
	t.Parallel()
	// The data directory is open to everyone on the way to it, so only
	// the store file's own mode stands between a run and the store.
	b := setup(t, Options{Workers: -1}, nil)
	for d := b.dataDir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		require.NoError(t, os.Chmod(d, 0o755))
	}
	store := filepath.Join(b.dataDir, "sluice.db")
	_, err := os.Stat(store)
	require.NoError(t, err, "the embedded store's file")
	startWalledWorker(t, b)
	needOwnUID(t, b)

	script := `tr '\0' '\n' < /proc/$PPID/environ; echo "environ=$?"
tr '\0' ' ' < /proc/$PPID/cmdline; echo "cmdline=$?"
ls /proc/$PPID/fd; echo "fd=$?"
head -c 15 ` + store + `; echo "store=$?"
echo "parent visible=$(test -d /proc/$PPID && echo yes || echo no)"`
	j := b.mustSubmit("exec", map[string]any{"argv": []string{"/bin/sh", "-c", script}, "timeout": "30s"})
	done := b.waitFinal(j.ID, 30*time.Second)
	out := execStdout(t, done)
	require.NotContains(t, out, "s3cret", "the job read the worker's environment:\n%s", out)
	require.NotContains(t, out, "PATH=", "the job read the worker's environment:\n%s", out)
	require.NotContains(t, out, "SQLite format", "the job read the store:\n%s", out)
	for _, what := range []string{"environ", "cmdline", "fd", "store"} {
		require.NotContains(t, out, what+"=0", "the job read its worker's %s:\n%s", what, out)
	}
	require.Contains(t, out, "parent visible=no", out)
}

// stopped reports whether pid is stopped by a signal (SIGSTOP).
func stopped(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	return len(f) > 0 && f[0] == "T"
}

// TestExecStopsWhileItsWorkerIsFrozen: a worker process is stopped
// (SIGSTOP, as a paused VM or a debugger would) while its exec job runs,
// with a grandchild in a session of its own. Its lease passes unrenewed
// (2/3 of the stale threshold): the job's programs are killed while the
// worker is still stopped, before the job can run anywhere else. After
// SIGCONT the worker reports nothing for the fenced run, and the job runs
// again, alone.
func TestExecStopsWhileItsWorkerIsFrozen(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: -1}, nil)
	worker := startWalledWorker(t, b)

	script := `setsid sh -c 'echo $$ > "$SLUICE_SCRATCH_DIR/escaped"; exec sleep 300' &
echo $$ > "$SLUICE_SCRATCH_DIR/pid"; exec sleep 300`
	j := b.mustSubmit("exec", map[string]any{"argv": []string{"/bin/sh", "-c", script}, "timeout": "10m"})
	first := b.waitState(j.ID, contracts.StateRunning, 10*time.Second)
	run := filepath.Join(b.dataDir, "scratch", "worker-00", j.ID+"-"+strconv.FormatInt(first.Claim, 10))
	pids := map[string]int{}
	for _, f := range []string{"pid", "escaped"} {
		require.Eventually(t, func() bool {
			data, err := os.ReadFile(filepath.Join(run, f))
			if err != nil || !bytes.HasSuffix(data, []byte("\n")) {
				return false
			}
			pids[f], err = strconv.Atoi(strings.TrimSpace(string(data)))
			return err == nil
		}, 10*time.Second, 5*time.Millisecond, "the job never wrote %s", f)
	}
	t.Cleanup(func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})

	require.NoError(t, syscall.Kill(worker.Pid, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(worker.Pid, syscall.SIGCONT) })
	require.Eventually(t, func() bool { return stopped(worker.Pid) }, 5*time.Second, time.Millisecond)
	for what, pid := range pids {
		require.Eventually(t, func() bool { return !running(pid) }, 20*time.Second, 10*time.Millisecond,
			"the job's %s process %d ran on while its worker was stopped", what, pid)
	}
	require.True(t, stopped(worker.Pid), "the worker must still be stopped: nothing of it did the kill")

	require.NoError(t, syscall.Kill(worker.Pid, syscall.SIGCONT))
	require.Eventually(t, func() bool {
		again := b.job(j.ID)
		return again.State == contracts.StateRunning && again.Claim > first.Claim
	}, 30*time.Second, 20*time.Millisecond, "the job never ran again under a new claim")
	code, _ := b.cancelJob(j.ID)
	require.Equal(t, 202, code)
	b.waitFinal(j.ID, 30*time.Second)
}
