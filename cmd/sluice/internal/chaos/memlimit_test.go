package chaos

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/service"
)

// TestServiceMemoryLimit starts the real binaries as separate processes
// and reads the Go runtime's memory limit from a scheduler's /metrics: a
// service binary started without GOMEMLIMIT runs with the default soft
// limit (service.DefaultMemoryLimit), not the runtime's none.
func TestServiceMemoryLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: skipped with -short")
	}
	cfg := Config{BinDir: binaries(t.Context(), t, StoreEmbedded), WorkDir: t.TempDir(),
		Gateways: 1, Schedulers: 1, Workers: 1}
	c, err := Start(cfg)
	t.Cleanup(c.Close) // every process, by pid
	require.NoError(t, err)

	const series = "go_gc_gomemlimit_bytes"
	url := c.Schedulers[0] + "/metrics"
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var (
		limit float64
		last  error
	)
	for limit == 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("no %s from %s: %v", series, url, last)
		case <-time.After(100 * time.Millisecond):
		}
		limit, last = scrapeCounter(ctx, http.DefaultClient, url, series)
	}
	require.Equal(t, float64(service.DefaultMemoryLimit), limit, "the scheduler binary's soft memory limit")
}
