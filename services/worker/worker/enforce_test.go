package worker_test

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
	"github.com/sluicehq/sluice/services/worker/internal/limit"
	"github.com/sluicehq/sluice/services/worker/worker"
)

// hogScript doubles a string until it holds 256 MiB: far past a 64 MiB
// limit, with every byte touched (awk is on every POSIX host).
const hogScript = `BEGIN { s = "x"; for (i = 0; i < 28; i++) s = s s; print length(s) }`

// needCgroups skips the test, saying why, when this host lets no worker
// make cgroups.
func needCgroups(t *testing.T) contracts.LimitMechanism {
	t.Helper()
	l := limit.New(limit.Options{Name: "probe-" + strings.ReplaceAll(t.Name(), "/", "-")})
	defer func() { require.NoError(t, l.Close()) }()
	if m := l.Mechanism(); m != contracts.LimitCgroupV1 && m != contracts.LimitCgroupV2 {
		t.Skipf("no cgroup can be made on this host (%s): %s", m, l.Reason())
	}
	return l.Mechanism()
}

// execJob is an offered exec job that declares memory.
func execJob(t *testing.T, id string, memory int64, argv ...string) contracts.JobSpec {
	t.Helper()
	payload, err := json.Marshal(map[string]any{"argv": argv})
	require.NoError(t, err)
	s := spec(id, "exec", 1, string(payload))
	s.Resources = &contracts.Resources{CPU: 0.5, Memory: memory}
	return s
}

// execConfig is a worker running exec jobs of awk and sh.
func execConfig(t *testing.T, id, limits string) worker.Config {
	cfg := testConfig(t, id)
	cfg.Kinds = []string{"exec"}
	cfg.ExecAllow = []string{"awk", "sh"}
	cfg.ExecGrace = 100 * time.Millisecond
	cfg.MaxConcurrent = 4
	cfg.CPU, cfg.Memory = 2, "1GiB"
	cfg.Limits = limits
	return cfg
}

// results collects n results by job id.
func (b *bundle) resultsByID(n int) map[string]contracts.Result {
	b.t.Helper()
	out := map[string]contracts.Result{}
	for range n {
		r := b.nextResult()
		out[r.JobID] = r
	}
	return out
}

// hogBesideSibling offers a memory hog and a small job, both declaring
// 64 MiB, to one worker, and checks the hog fails resources: while the
// sibling succeeds and the worker takes a job after.
func hogBesideSibling(t *testing.T, limits string, want contracts.LimitMechanism) {
	b := setup(t)
	id := "w-hog-" + limits
	b.start(execConfig(t, id, limits), nil)
	require.Equal(t, contracts.OfferAccepted, b.offer(id, execJob(t, "hog", 64<<20, "awk", hogScript)).Status)
	require.Equal(t, contracts.OfferAccepted, b.offer(id, execJob(t, "sibling", 64<<20, "sh", "-c", "echo ok")).Status)
	got := b.resultsByID(2)

	hog := got["hog"]
	require.Equal(t, contracts.StateFailed, hog.State, "%+v", hog)
	require.Equal(t, contracts.ClassResources, contracts.ClassOf(hog.Error), hog.Error)
	require.Contains(t, hog.Error, "went past its memory of 64MiB")
	require.False(t, hog.Permanent, "the job's retry policy decides")
	require.NotNil(t, hog.Usage)
	require.Equal(t, want, hog.Usage.Mechanism)

	sib := got["sibling"]
	require.Equal(t, contracts.StateSucceeded, sib.State, "%+v", sib)
	require.NotNil(t, sib.Usage)
	require.Equal(t, want, sib.Usage.Mechanism)
	require.Positive(t, sib.Usage.PeakMemory)

	// The worker goes on serving.
	require.Equal(t, contracts.OfferAccepted, b.offer(id, execJob(t, "after", 64<<20, "sh", "-c", "echo ok")).Status)
	require.Equal(t, contracts.StateSucceeded, b.nextResult().State)
}

// TestMemoryHogKilledInItsCgroup: under a 64 MiB cgroup the hog is killed
// by the kernel and fails resources:, its sibling succeeds, the worker
// lives on.
func TestMemoryHogKilledInItsCgroup(t *testing.T) {
	t.Parallel()
	m := needCgroups(t)
	hogBesideSibling(t, "", m)
}

// TestMemoryHogUnderRlimit runs everywhere: without cgroups the hog's
// allocations fail past RLIMIT_AS and it fails resources: too.
func TestMemoryHogUnderRlimit(t *testing.T) {
	t.Parallel()
	hogBesideSibling(t, "rlimit", contracts.LimitRlimit)
}

// How a job's run is stopped in stopTree.
const (
	byCancel     = "cancel"
	byTimeout    = "timeout"     // the exec payload's timeout
	byMaxRuntime = "max-runtime" // the job's max_runtime
)

// cancelTree is stopTree by cancel.
func cancelTree(t *testing.T, limits string, escape bool) bool {
	return stopTree(t, limits, escape, byCancel)
}

// stopTree starts a shell that leaves a grandchild behind (escaped from
// its process group when escape), stops the job (how), and reports
// whether the grandchild is gone.
func stopTree(t *testing.T, limits string, escape bool, how string) bool {
	b := setup(t)
	id := "w-tree-" + limits + strconv.FormatBool(escape) + how
	cfg := execConfig(t, id, limits)
	b.start(cfg, nil)
	// The job writes in its own scratch directory (all it may write in),
	// which the test reads where the worker keeps it.
	pidFile := filepath.Join(cfg.ScratchDir, id, "tree-1", "pid")
	start := "sleep 300"
	if escape {
		start = "setsid sleep 300"
	}
	script := start + ` >/dev/null 2>&1 & echo $! > "$SLUICE_SCRATCH_DIR/pid"; wait`
	job := execJob(t, "tree", 64<<20, "sh", "-c", script)
	switch how {
	case byTimeout:
		job.Payload = json.RawMessage(`{"argv":["sh","-c",` + strconv.Quote(script) + `],"timeout":"1s"}`)
	case byMaxRuntime:
		job.MaxRuntime = contracts.Duration(time.Second)
	}
	require.Equal(t, contracts.OfferAccepted, b.offer(id, job).Status)
	var pid int
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(pidFile)
		if err != nil || !bytes.HasSuffix(data, []byte("\n")) {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil
	}, waitFor, 5*time.Millisecond, "the job never wrote its grandchild's pid")
	require.True(t, processAlive(pid), "the grandchild runs")

	res := contracts.Result{}
	if how == byCancel {
		data, err := json.Marshal(contracts.CancelJob{JobID: "tree", Claim: 1})
		require.NoError(t, err)
		require.NoError(t, b.nc.Publish(contracts.WorkerCancelSubject(id), data))
		res = b.nextResult()
		require.Equal(t, contracts.StateCancelled, res.State)
	} else {
		res = b.nextResult()
		require.Equal(t, contracts.StateFailed, res.State)
		require.Equal(t, contracts.ClassTimeout, contracts.ClassOf(res.Error), res.Error)
	}
	if processAlive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return false
	}
	return true
}

// processAlive reports whether pid is a live process (a zombie is dead).
func processAlive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// TestCancelKillsEscapedGrandchildren: cancel kills a job's grandchild
// even when it left the job's process group (setsid): the cgroup holds
// it.
func TestCancelKillsEscapedGrandchildren(t *testing.T) {
	t.Parallel()
	needCgroups(t)
	require.True(t, cancelTree(t, "", true), "the grandchild outlived its cancelled job")
}

// TestCancelKillsGrandchildrenUnderRlimit runs everywhere: without a
// cgroup the process group still goes, grandchildren included.
func TestCancelKillsGrandchildrenUnderRlimit(t *testing.T) {
	t.Parallel()
	require.True(t, cancelTree(t, "rlimit", false), "the grandchild outlived its cancelled job")
}

// TestTimeoutAndMaxRuntimeKillTheWholeTree: a run stopped by its exec
// timeout or its job's max_runtime takes its escaped grandchildren with it.
func TestTimeoutAndMaxRuntimeKillTheWholeTree(t *testing.T) {
	t.Parallel()
	needCgroups(t)
	for _, how := range []string{byTimeout, byMaxRuntime} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			require.True(t, stopTree(t, "", true, how), "the grandchild outlived its stopped job")
		})
	}
}
