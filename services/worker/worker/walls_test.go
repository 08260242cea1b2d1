package worker_test

import (
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
	"github.com/sluicehq/sluice/services/worker/internal/sandbox"
	"github.com/sluicehq/sluice/services/worker/worker"
)

// Jobs are walls: a run cannot change its limits or leave them, whatever
// it tries from inside. These tests run the attempts a hostile job makes
// through a real worker (its sandbox and enforcer as Run builds them).

// needIsolation skips the test, saying why, when this host lets the worker
// give no run a uid of its own (a worker not run as root).
func needIsolation(t *testing.T) {
	t.Helper()
	r, err := sandbox.ParseRange(sandbox.DefaultUIDs)
	require.NoError(t, err)
	sb := sandbox.New(sandbox.Options{UIDs: r})
	defer func() { require.NoError(t, sb.Close()) }()
	if !sb.Isolation().OwnIdentity() {
		t.Skipf("runs get no uid of their own on this host: %s", sb.Reason())
	}
}

// execOutput decodes an exec job's result.
func execOutput(t *testing.T, r contracts.Result) (stdout, stderr string) {
	t.Helper()
	var out struct{ Stdout, Stderr string }
	require.NoError(t, json.Unmarshal(r.Result, &out), "%+v", r)
	return out.Stdout, out.Stderr
}

// cgroupFiles is a shell function printing each control file named $1 of
// the calling process's cgroups (v1 and v2), one a line; with $2 = up, of
// their parents' and the hierarchies' roots too.
const cgroupFiles = `cgfiles() {
  while IFS=: read -r _ ctrl path; do
    case "$ctrl" in "") base=/sys/fs/cgroup/unified; [ -d "$base" ] || base=/sys/fs/cgroup ;; *) base=/sys/fs/cgroup/${ctrl%%,*} ;; esac
    [ -f "$base$path/$1" ] && echo "$base$path/$1"
    if [ "${2:-}" = up ]; then
      [ -f "$base$path/../$1" ] && echo "$base$path/../$1"
      [ -f "$base/$1" ] && echo "$base/$1"
    fi
  done </proc/self/cgroup
}
`

// TestRunCannotRaiseItsOwnMemoryLimit: a job declaring 64 MiB tries to
// raise its cgroup's memory limit to 16 GiB (memory.limit_in_bytes, or
// memory.max under v2) and then uses 256 MiB. Its cgroup's files are not
// its identity's to write: the write is refused and the job fails
// resources:.
func TestRunCannotRaiseItsOwnMemoryLimit(t *testing.T) {
	t.Parallel()
	needCgroups(t)
	needIsolation(t)
	b := setup(t)
	id := "w-raise"
	b.start(execConfig(t, id, ""), nil)
	script := cgroupFiles + `for f in $(cgfiles memory.memsw.limit_in_bytes; cgfiles memory.limit_in_bytes; cgfiles memory.max); do
  if echo 17179869184 > "$f"; then echo "raised $f"; else echo "refused $f"; fi
done 2>/dev/null
awk '` + hogScript + `'`
	require.Equal(t, contracts.OfferAccepted, b.offer(id, execJob(t, "raise", 64<<20, "sh", "-c", script)).Status)
	r := b.nextResult()
	stdout, _ := execOutput(t, r)
	require.Contains(t, stdout, "refused", "the job found no limit to try: %q", stdout)
	require.NotContains(t, stdout, "raised", "the job raised its own limit")
	require.Equal(t, contracts.StateFailed, r.State, "%+v", r)
	require.Equal(t, contracts.ClassResources, contracts.ClassOf(r.Error), r.Error)
}

// TestRunCannotLeaveItsCgroup: a job starts a child in a new session
// (setsid) that tries to move itself into its parent cgroups (the
// worker's); the moves are refused, and when the job is cancelled the
// escaped child dies with it.
func TestRunCannotLeaveItsCgroup(t *testing.T) {
	t.Parallel()
	needCgroups(t)
	needIsolation(t)
	b := setup(t)
	id := "w-leave"
	cfg := execConfig(t, id, "")
	b.start(cfg, nil)
	script := cgroupFiles + `setsid sh -c '` + strings.ReplaceAll(cgroupFiles, "'", `'"'"'`) + `
for f in $(cgfiles cgroup.procs up); do
  case "$f" in */../*|/sys/fs/cgroup/*/cgroup.procs|/sys/fs/cgroup/cgroup.procs) if echo $$ > "$f"; then echo "moved $f"; else echo "refused $f"; fi ;; esac
done > "$SLUICE_SCRATCH_DIR/moves" 2>/dev/null
echo $$ > "$SLUICE_SCRATCH_DIR/pid"
exec sleep 300' &
wait`
	require.Equal(t, contracts.OfferAccepted, b.offer(id, execJob(t, "leave", 64<<20, "sh", "-c", script)).Status)
	run := filepath.Join(cfg.ScratchDir, id, "leave-1")
	var pid int
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(filepath.Join(run, "pid"))
		if err != nil || !strings.HasSuffix(string(data), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil
	}, waitFor, 5*time.Millisecond, "the escaped child never wrote its pid")
	moves, err := os.ReadFile(filepath.Join(run, "moves"))
	require.NoError(t, err)
	require.Contains(t, string(moves), "refused", "the child found no cgroup to try: %q", moves)
	require.NotContains(t, string(moves), "moved", "the child left its run's cgroup")

	data, err := json.Marshal(contracts.CancelJob{JobID: "leave", Claim: 1})
	require.NoError(t, err)
	require.NoError(t, b.nc.Publish(contracts.WorkerCancelSubject(id), data))
	require.Equal(t, contracts.StateCancelled, b.nextResult().State)
	if processAlive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the escaped child %d outlived its cancelled job", pid)
	}
}

// TestForkBombStopsAtThePidsLimit: a job forks 200 sleepers under a
// bound of 32 processes; a fork past the bound fails (the shell stops
// there, saying so), so it never gets to 200.
func TestForkBombStopsAtThePidsLimit(t *testing.T) {
	t.Parallel()
	needIsolation(t)
	b := setup(t)
	id := "w-forks"
	cfg := execConfig(t, id, "")
	cfg.MaxRunPids = 32
	b.start(cfg, nil)
	script := `i=0; while [ $i -lt 200 ]; do sleep 30 & i=$((i+1)); done; echo "forked $i"`
	require.Equal(t, contracts.OfferAccepted, b.offer(id, execJob(t, "forks", 256<<20, "sh", "-c", script)).Status)
	r := b.nextResult()
	stdout, stderr := execOutput(t, r)
	require.NotContains(t, stdout, "forked 200", "the job forked past its bound of 32")
	require.Contains(t, strings.ToLower(stderr), "fork", "%+v", r)
	require.Equal(t, contracts.StateFailed, r.State)
}

// TestRunsHaveTheirOwnUID: two runs at once on one worker have two uids,
// neither the worker's, and neither may enter the other's scratch
// directory.
func TestRunsHaveTheirOwnUID(t *testing.T) {
	t.Parallel()
	needIsolation(t)
	b := setup(t)
	id := "w-uids"
	cfg := execConfig(t, id, "")
	b.start(cfg, nil)
	script := `id -u > "$SLUICE_SCRATCH_DIR/uid"; while [ ! -f "$SLUICE_SCRATCH_DIR/go" ]; do sleep 0.01; done; id -u`
	for _, j := range []string{"one", "two"} {
		require.Equal(t, contracts.OfferAccepted, b.offer(id, execJob(t, j, 64<<20, "sh", "-c", script)).Status)
	}
	uids := map[string]string{}
	for _, j := range []string{"one", "two"} {
		dir := filepath.Join(cfg.ScratchDir, id, j+"-1")
		require.Eventually(t, func() bool {
			data, err := os.ReadFile(filepath.Join(dir, "uid"))
			uids[j] = strings.TrimSpace(string(data))
			return err == nil && uids[j] != ""
		}, waitFor, 5*time.Millisecond)
		info, err := os.Stat(dir)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o700), info.Mode().Perm(), "a run's scratch directory is its own")
		require.Equal(t, uids[j], strconv.Itoa(int(info.Sys().(*syscall.Stat_t).Uid)))
	}
	require.NotEqual(t, uids["one"], uids["two"])
	require.NotEqual(t, strconv.Itoa(os.Geteuid()), uids["one"])
	for _, j := range []string{"one", "two"} {
		require.NoError(t, os.WriteFile(filepath.Join(cfg.ScratchDir, id, j+"-1", "go"), nil, 0o644))
	}
	got := b.resultsByID(2)
	for _, j := range []string{"one", "two"} {
		stdout, _ := execOutput(t, got[j])
		require.Equal(t, uids[j], strings.TrimSpace(stdout))
	}
}

// TestRequireIsolationRefusesExec: a worker that may not give runs their
// own uid (here: no run uids configured) does not take the exec kind when
// SLUICE_WORKER_EXEC_REQUIRE_ISOLATION is set.
func TestRequireIsolationRefusesExec(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := "w-require"
	cfg := execConfig(t, id, "")
	cfg.Kinds = []string{"exec", "sleep"}
	cfg.RunUIDs = ""
	cfg.ExecRequireIsolation = true
	w := b.start(cfg, nil).w
	require.Eventually(t, func() bool { return len(w.Kinds()) == 1 }, waitFor, 5*time.Millisecond)
	require.Equal(t, []string{"sleep"}, w.Kinds())
	res := b.offer(id, execJob(t, "refused", 64<<20, "sh", "-c", "echo ran"))
	require.NotEqual(t, contracts.OfferAccepted, res.Status, "%+v", res)
}

// TestRunUIDsDefault: the default range is the sandbox's.
func TestRunUIDsDefault(t *testing.T) {
	t.Parallel()
	require.Equal(t, sandbox.DefaultUIDs, worker.DefaultConfig().RunUIDs)
}

// TestARunWithAUIDAndNoNamespace: capped at uid (a host without
// CAP_SYS_ADMIN), a run still has a uid of its own and works in its
// scratch directory at its real path (the worker's folder lets it
// through, not list), and may not read its worker's environment.
func TestARunWithAUIDAndNoNamespace(t *testing.T) {
	t.Parallel()
	needIsolation(t)
	b := setup(t)
	id := "w-uid-only"
	cfg := execConfig(t, id, "")
	cfg.Isolation = string(contracts.IsolationUID)
	// The scratch root's ancestors must let other uids through.
	for d := cfg.ScratchDir; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		info, err := os.Stat(d)
		require.NoError(t, err)
		require.NoError(t, os.Chmod(d, info.Mode().Perm()|0o011))
	}
	b.start(cfg, nil)
	script := `id -u; pwd; if cat /proc/$PPID/environ >/dev/null 2>&1; then echo "environ read"; else echo "environ refused"; fi; ls .. >/dev/null 2>&1 && echo listed || echo "not listed"`
	require.Equal(t, contracts.OfferAccepted, b.offer(id, execJob(t, "uid-only", 64<<20, "sh", "-c", script)).Status)
	r := b.nextResult()
	require.Equal(t, contracts.StateSucceeded, r.State, "%+v", r)
	stdout, _ := execOutput(t, r)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	require.Len(t, lines, 4, "%q", stdout)
	require.NotEqual(t, strconv.Itoa(os.Geteuid()), lines[0])
	require.Equal(t, filepath.Join(cfg.ScratchDir, id, "uid-only-1"), lines[1], "its real path")
	require.Equal(t, "environ refused", lines[2])
	require.Equal(t, "not listed", lines[3], "the worker's folder lets runs through, not list it")
}
