package devstack

import (
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// TestResourcePackingEndToEnd (issue 26), through HTTP on the real stack:
// a worker of 2 cores and 4 slots runs two 1-core jobs at once, or one
// 2-core job, and never a 2-core job beside a 1-core one. Read from the
// jobs' started_at and finished_at (a job runs from its claim to its
// result's write), not from timing: two jobs overlap when one starts
// before the other finishes.
func TestResourcePackingEndToEnd(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{Workers: 1}, map[string]string{
		"SLUICE_WORKER_CPU":                  "2",
		"SLUICE_WORKER_MEMORY":               "4GiB",
		"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "4",
	})
	submit := func(cpu float64, ms int) contracts.Job {
		t.Helper()
		res, err := json.Marshal(contracts.Resources{CPU: cpu})
		require.NoError(t, err)
		code, j := b.submit(contracts.SubmitRequest{Kind: "sleep", Payload: json.RawMessage(`{"ms":` + strconv.Itoa(ms) + `}`), Resources: res})
		require.Equal(t, http.StatusAccepted, code)
		require.Equal(t, &contracts.Resources{CPU: cpu}, j.Resources)
		return j
	}

	// Two 1-core jobs fit at once; a 2-core one comes after them.
	a := submit(1, 3000)
	b.waitState(a.ID, contracts.StateRunning, 10*time.Second)
	c := submit(1, 3000)
	big := submit(2, 10)

	// Then a mixed stream, in an order that would put a 2-core job beside
	// a 1-core one on a count of slots alone.
	jobs := []contracts.Job{a, c, big}
	for _, cpu := range []float64{1, 2, 1, 1, 2, 2, 1} {
		jobs = append(jobs, submit(cpu, 200))
	}
	for i, j := range jobs {
		jobs[i] = b.waitFinal(j.ID, 30*time.Second)
		require.Equal(t, contracts.StateSucceeded, jobs[i].State, jobs[i].Error)
	}
	require.True(t, overlap(jobs[0], jobs[1]), "the first two 1-core jobs ran at once")
	for i, x := range jobs {
		for _, y := range jobs[i+1:] {
			if overlap(x, y) {
				require.LessOrEqual(t, x.Resources.CPU+y.Resources.CPU, 2.0,
					"a %g-core and a %g-core job ran at once on a 2-core worker (%s %s–%s, %s %s–%s)",
					x.Resources.CPU, y.Resources.CPU, x.ID, x.StartedAt, x.FinishedAt, y.ID, y.StartedAt, y.FinishedAt)
			}
		}
	}
	// Dispatch packed them: no offer was turned away busy (a worker turns
	// away what does not fit in what it has free; on a count of slots
	// alone the 2-core jobs would have been offered beside 1-core ones).
	busy, _ := scrapeMetrics(t, b.base+"/metrics").value("sluice_scheduler_offers_total", map[string]string{"outcome": "busy"})
	require.Zero(t, busy, "offers answered busy")
	var st contracts.Stats
	require.Equal(t, http.StatusOK, b.getJSON("/v1/stats", &st))
	require.Len(t, st.Workers, 1)
	require.Equal(t, &contracts.Resources{CPU: 2, Memory: 4 << 30}, st.Workers[0].Resources, "/v1/stats shows the capacity")
}

// overlap reports whether two finished jobs' runs overlapped: one started
// before the other finished.
func overlap(x, y contracts.Job) bool {
	return x.StartedAt.Before(*y.FinishedAt) && y.StartedAt.Before(*x.FinishedAt)
}
