package devstack

import (
	"bytes"
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

// hogScript doubles a string until it holds 256 MiB: far past a 64 MiB
// limit, with every byte touched.
const hogScript = `BEGIN { s = "x"; for (i = 0; i < 28; i++) s = s s; print length(s) }`

// TestExecLimitsEndToEnd (issue 26), through HTTP on the real stack, the
// worker enforcing with the strongest mechanism the host allows (cgroup
// v2 or v1, else rlimit): a memory hog declaring 64 MiB fails resources:
// while a sibling exec job on the same worker succeeds, GET /v1/jobs/{id}
// shows what each used (mechanism, peak memory); a cancel through HTTP of
// a job whose grandchild left its process group (setsid) kills the
// grandchild (under rlimit, where a process that leaves the group
// survives by design, the grandchild stays in the group).
func TestExecLimitsEndToEnd(t *testing.T) {
	t.Parallel()
	shared := sharedDir(t) // where the jobs and the test meet
	b := setup(t, Options{Workers: 1}, map[string]string{
		"SLUICE_WORKER_EXEC_ALLOW":           "/bin/sh",
		"SLUICE_WORKER_EXEC_DIRS":            shared,
		"SLUICE_WORKER_EXEC_GRACE":           "100ms",
		"SLUICE_WORKER_CPU":                  "2",
		"SLUICE_WORKER_MEMORY":               "1GiB",
		"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "4",
	})
	submit := func(script string) contracts.Job {
		t.Helper()
		payload, err := json.Marshal(map[string]any{"argv": []string{"/bin/sh", "-c", script}, "timeout": "10m"})
		require.NoError(t, err)
		code, j := b.submit(contracts.SubmitRequest{Kind: "exec", Payload: payload, MaxAttempts: 1,
			Resources: json.RawMessage(`{"cpu":0.5,"memory":"64MiB"}`)})
		require.Equal(t, http.StatusAccepted, code)
		require.Equal(t, &contracts.Resources{CPU: 0.5, Memory: 64 << 20}, j.Resources)
		return j
	}

	// A sibling that runs until the hog is stopped, then the hog.
	gate := filepath.Join(shared, "gate")
	sibling := submit("while [ ! -e " + gate + " ]; do sleep 0.01; done; echo ok")
	b.waitState(sibling.ID, contracts.StateRunning, 20*time.Second)
	hog := submit("exec awk '" + hogScript + "'")
	hogDone := b.waitFinal(hog.ID, 60*time.Second)
	require.NoError(t, os.WriteFile(gate, nil, 0o600))
	sibDone := b.waitFinal(sibling.ID, 60*time.Second)

	require.NotNil(t, hogDone.Usage, "the hog's run reports its usage")
	mech := hogDone.Usage.Mechanism
	if mech == contracts.LimitNone {
		t.Skipf("this host allows the worker neither a cgroup nor rlimit (mechanism %s): nothing is enforced", mech)
	}
	t.Logf("the worker enforced with %s", mech)
	require.Equal(t, contracts.StateFailed, hogDone.State)
	require.Equal(t, contracts.ClassResources, contracts.ClassOf(hogDone.Error), hogDone.Error)
	require.Contains(t, hogDone.Error, "went past its memory of 64MiB")
	require.Equal(t, hogDone.Worker, sibDone.Worker, "both ran on the one worker")
	require.Equal(t, contracts.StateSucceeded, sibDone.State, sibDone.Error)

	// GET /v1/jobs/{id} shows what each run used.
	for _, id := range []string{hog.ID, sibling.ID} {
		var raw struct {
			Usage *struct {
				Mechanism  string   `json:"mechanism"`
				PeakMemory *int64   `json:"peak_memory"`
				CPUSeconds *float64 `json:"cpu_seconds"`
			} `json:"usage"`
		}
		require.Equal(t, http.StatusOK, b.getJSON("/v1/jobs/"+id, &raw))
		require.NotNil(t, raw.Usage, "job %s shows no usage", id)
		require.Equal(t, string(mech), raw.Usage.Mechanism)
		require.NotNil(t, raw.Usage.PeakMemory)
		require.Positive(t, *raw.Usage.PeakMemory, "job %s: peak memory", id)
		require.NotNil(t, raw.Usage.CPUSeconds)
	}

	// Cancel through HTTP kills a grandchild, one that left the job's
	// process group too where a cgroup holds the run.
	start := "sleep 300"
	if mech == contracts.LimitCgroupV1 || mech == contracts.LimitCgroupV2 {
		start = "setsid sleep 300"
	}
	pidFile := filepath.Join(shared, "grandchild.pid")
	tree := submit(start + " >/dev/null 2>&1 & echo $! > " + pidFile + "; wait")
	b.waitState(tree.ID, contracts.StateRunning, 20*time.Second)
	var pid int
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(pidFile)
		if err != nil || !bytes.HasSuffix(data, []byte("\n")) {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil && pid > 0
	}, 20*time.Second, 10*time.Millisecond, "the job's grandchild never started")
	require.True(t, running(pid), "the grandchild runs")
	t.Cleanup(func() {
		if running(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	code, body := b.cancelJob(tree.ID)
	require.Equal(t, http.StatusAccepted, code, string(body))
	require.Equal(t, contracts.StateCancelled, b.waitFinal(tree.ID, 20*time.Second).State)
	require.Eventually(t, func() bool { return !running(pid) }, 20*time.Second, 10*time.Millisecond,
		"the grandchild %d (%q) outlived its cancelled job", pid, start)
}

// running reports whether pid is a live process (a zombie is dead: its
// parent, the worker's run or init, has yet to reap it).
func running(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}
