package devstack

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// TestSpawnFromZeroWorkersAndBack: a stack with no worker and
// SLUICE_SPAWN=dev grows on demand up to SLUICE_SPAWN_MAX spawned workers,
// runs every job, and shrinks back to none when they go idle.
func TestSpawnFromZeroWorkersAndBack(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: -1}, map[string]string{
		"SLUICE_SPAWN":                       "dev",
		"SLUICE_SPAWN_MAX":                   "2",
		"SLUICE_SPAWN_COOLDOWN":              "100ms",
		"SLUICE_WORKER_IDLE_TIMEOUT":         "1500ms",
		"SLUICE_NO_WORKER_GRACE":             "0s",
		"SLUICE_HEARTBEAT_INTERVAL":          "100ms",
		"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "1",
	})
	var ids []string
	for range 8 {
		ids = append(ids, b.mustSubmit("sleep", map[string]int{"ms": 300}).ID)
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
		most = max(most, spawned)
		if st.Counts[contracts.StateSucceeded] == len(ids) {
			break
		}
		require.True(t, time.Now().Before(deadline), "jobs never all ran: %+v", st.Counts)
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, 2, most, "grew to SLUICE_SPAWN_MAX, never past it")
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
	require.Contains(t, string(body), `sluice_scheduler_scale_requests_total{kind="sleep",outcome="published"}`)
	require.False(t, strings.Contains(string(body), `outcome="command_failed"} 1`))
}
