package devstack

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// TestSpawnFromZeroWorkersAndBack: a stack with no worker and
// SLUICE_SCHEDULER_SPAWN=dev grows on demand up to SLUICE_SCHEDULER_MAX_SPAWNED spawned workers,
// runs every job, and shrinks back to none when they go idle.
func TestSpawnFromZeroWorkersAndBack(t *testing.T) {
	t.Parallel()
	shared := sharedDir(t)
	b := setup(t, Options{Workers: -1}, map[string]string{
		"SLUICE_WORKER_EXEC_DIRS":            shared,
		"SLUICE_SCHEDULER_SPAWN":             "dev",
		"SLUICE_SCHEDULER_MAX_SPAWNED":       "2",
		"SLUICE_SCHEDULER_SPAWN_COOLDOWN":    "100ms",
		"SLUICE_WORKER_IDLE_TIMEOUT":         "1500ms",
		"SLUICE_SCHEDULER_NO_WORKER_GRACE":   "0s",
		"SLUICE_HEARTBEAT_INTERVAL":          "100ms",
		"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "1",
		"SLUICE_WORKER_EXEC_ALLOW":           "/bin/sh",
	})
	// The jobs run until the test has seen the stack grow to its bound, so
	// that it grows there however slowly this machine starts a worker.
	release := filepath.Join(shared, "release")
	wait := "while [ ! -e " + release + " ]; do sleep 0.05; done"
	var ids []string
	for range 8 {
		ids = append(ids, b.mustSubmit("exec", map[string][]string{"argv": {"/bin/sh", "-c", wait}}).ID)
	}
	most := 0
	deadline := time.Now().Add(60 * time.Second)
	for {
		var st contracts.Stats
		b.getJSON("/v1/stats", &st)
		spawned := 0
		for _, w := range st.Workers {
			require.True(t, w.Spawned, "only spawned workers: %+v", w)
			spawned++
		}
		require.LessOrEqual(t, spawned, 2, "never past SLUICE_SCHEDULER_MAX_SPAWNED")
		most = max(most, spawned)
		if most == 2 {
			require.NoError(t, os.WriteFile(release, nil, 0o600))
		}
		if st.Counts[contracts.StateSucceeded] == len(ids) {
			break
		}
		require.True(t, time.Now().Before(deadline), "jobs never all ran: %+v", st.Counts)
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, 2, most, "grew to SLUICE_SCHEDULER_MAX_SPAWNED")
	var st contracts.Stats
	b.getJSON("/v1/stats", &st)
	require.NotEmpty(t, st.RecentScaleRequests, "the gateway heard the scale requests")
	require.Equal(t, "exec", st.RecentScaleRequests[0].Kind)
	require.Equal(t, "dev", st.RecentScaleRequests[0].Spawner, "the requests say what acts on them")
	for _, id := range ids {
		require.Equal(t, contracts.StateSucceeded, b.job(id).State)
	}
	// Idle, they leave: back to none.
	require.Eventually(t, func() bool {
		var st contracts.Stats
		b.getJSON("/v1/stats", &st)
		return len(st.Workers) == 0
	}, 20*time.Second, 50*time.Millisecond, "the spawned workers never left")

	resp, err := http.Get(b.base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, string(body), `sluice_scheduler_scale_requests_total{kind="exec",outcome="published"}`)
	require.False(t, strings.Contains(string(body), `outcome="command_failed"} 1`))
}

// TestOlderWorkersGetNoOffer: with SLUICE_SCHEDULER_MIN_WORKER_VERSION, a worker
// announcing an older version is listed (with its version) but offered
// nothing, though it sorts first.
func TestOlderWorkersGetNoOffer(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 1}, map[string]string{"SLUICE_SCHEDULER_MIN_WORKER_VERSION": contracts.Release})
	startWorkerProcess(t, b, "worker-00", "SLUICE_WORKER_VERSION=0.1.0")
	var st contracts.Stats
	require.Eventually(t, func() bool {
		b.getJSON("/v1/stats", &st)
		return len(st.Workers) == 2
	}, 10*time.Second, 20*time.Millisecond)
	versions := map[string]string{}
	for _, w := range st.Workers {
		versions[w.ID] = w.Version
	}
	require.Equal(t, map[string]string{"worker-00": "0.1.0", "worker-01": contracts.Release}, versions)
	for range 3 {
		j := b.waitFinal(b.mustSubmit("sleep", map[string]int{"ms": 10}).ID, 20*time.Second)
		require.Equal(t, contracts.StateSucceeded, j.State)
		require.Equal(t, "worker-01", j.Worker, "the older worker-00 is skipped")
	}
}
