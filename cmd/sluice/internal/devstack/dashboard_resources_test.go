package devstack

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDashboardDrawsWorkerResources (issue 26): each worker's row draws
// the CPU and memory its running jobs declared (as the worker counts
// them: a job that declares nothing takes one slot's share) against its
// capacity, from /v1/stats' resources and free_resources; the bars empty
// again when the jobs end.
func TestDashboardDrawsWorkerResources(t *testing.T) {
	t.Parallel()
	chromium := needChromium(t)
	b := startTokenStack(t, Options{Workers: 1}, map[string]string{
		"SLUICE_API_TOKENS":                  dashTenant + ":" + dashToken,
		"SLUICE_WORKER_CPU":                  "2",
		"SLUICE_WORKER_MEMORY":               "1GiB",
		"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "4",
	})
	ctx, problems := openDashboard(t, chromium, b)
	const res = `#worker-rows .worker .res`
	waitFor(t, ctx, res+`[data-cpu-used="0"][data-cpu-capacity="2"][data-memory-used="0"][data-memory-capacity="1073741824"]`,
		"the worker's capacity never showed")

	// A job declaring 1.5 cores and 512MiB, and one declaring nothing:
	// one slot's share, half a core and 256MiB.
	big := b.tokenSubmit(t, `{"kind":"sleep","payload":{"ms":600000},"resources":{"cpu":1.5,"memory":"512MiB"}}`)
	t.Cleanup(func() { b.tokenDo(t, http.MethodPost, "/v1/jobs/"+big+"/cancel", "") })
	small := b.tokenSubmit(t, `{"kind":"sleep","payload":{"ms":600000}}`)
	t.Cleanup(func() { b.tokenDo(t, http.MethodPost, "/v1/jobs/"+small+"/cancel", "") })
	waitFor(t, ctx, res+`[data-cpu-used="2"][data-memory-used="805306368"]`, "the declared cpu and memory never showed")
	require.Equal(t, "2 / 2 cores", evalJS[string](t, ctx, `document.querySelector('`+res+` .meter[data-resource="cpu"] .amount').textContent`))
	require.Equal(t, "768 MiB / 1 GiB", evalJS[string](t, ctx, `document.querySelector('`+res+` .meter[data-resource="memory"] .amount').textContent`))
	require.Equal(t, "100", evalJS[string](t, ctx, `document.querySelector('`+res+` .meter[data-resource="cpu"]').dataset.percent`))
	require.Equal(t, "75", evalJS[string](t, ctx, `document.querySelector('`+res+` .meter[data-resource="memory"]').dataset.percent`))
	ratio := evalJS[float64](t, ctx, `(() => {
		const m = document.querySelector('`+res+` .meter[data-resource="memory"]');
		return m.querySelector('.fill').getBoundingClientRect().width / m.querySelector('.bar').getBoundingClientRect().width;
	})()`)
	require.InDelta(t, 0.75, ratio, 0.02, "the memory bar is drawn to its share")

	// Cancelled, the jobs give their resources back.
	status, body := b.tokenDo(t, http.MethodPost, "/v1/jobs/"+small+"/cancel", "")
	require.Equal(t, http.StatusAccepted, status, body)
	waitFor(t, ctx, res+`[data-cpu-used="1.5"][data-memory-used="536870912"]`, "the cancelled job's share never came back")
	status, body = b.tokenDo(t, http.MethodPost, "/v1/jobs/"+big+"/cancel", "")
	require.Equal(t, http.StatusAccepted, status, body)
	waitFor(t, ctx, res+`[data-cpu-used="0"][data-memory-used="0"]`, "the bars never emptied")
	require.Empty(t, problems(), "the page reported errors")
}
