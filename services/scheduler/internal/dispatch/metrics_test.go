package dispatch

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe/clocktest"
	"github.com/sluicehq/sluice/services/scheduler/internal/consume"
	"github.com/sluicehq/sluice/services/scheduler/internal/metrics"
)

func TestDispatchMetrics(t *testing.T) {
	t.Parallel()
	clock := clocktest.New()
	b := setupClock(t, Config{RetryInterval: retry, OfferTimeout: 200 * time.Millisecond}, clock.Now)
	reg := prometheus.NewRegistry()
	b.d.m = metrics.New(reg)
	b.worker("w1", 1, contracts.OfferBusy)
	b.worker("w2", 1, "") // announced, but nobody answers its subject
	b.worker("w3", 1, contracts.OfferAccepted)
	b.admit(time.Minute)
	for range 3 {
		require.Len(t, b.round(), 1) // to w1 (busy), w2 (no answer), w3 (accepts)
	}

	// Past its deadline with nobody to take it, a job fails capacity:.
	late := b.admit(time.Millisecond)
	clock.Advance(time.Millisecond) // its deadline passes before its message comes
	require.Equal(t, consume.Ack(), b.handle(late))
	require.Equal(t, contracts.ClassCapacity, contracts.ClassOf(b.get(late.ID).Error))

	text := gatherText(t, reg)
	for _, want := range []string{
		`sluice_scheduler_offers_total{outcome="accepted"} 1`,
		`sluice_scheduler_offers_total{outcome="busy"} 1`,
		`sluice_scheduler_offers_total{outcome="no_responders"} 1`,
		`sluice_scheduler_offers_total{outcome="evicted"} 0`,
		`sluice_scheduler_dispatches_total{outcome="dispatched"} 1`,
		`sluice_scheduler_dispatches_total{outcome="capacity_failed"} 1`,
		`sluice_scheduler_dispatches_total{outcome="overflow"} 2`,
		`sluice_scheduler_claims_total 3`,
		`sluice_scheduler_capacity_failures_total 1`,
		`sluice_scheduler_queue_wait_seconds_count 1`,
	} {
		require.Contains(t, text, want)
	}
}

// gatherText renders reg in the text exposition format, as /metrics does.
func gatherText(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	return rec.Body.String()
}
