package chaos

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCounterTotalAcrossRestarts(t *testing.T) {
	t.Parallel()
	c := newCounterTotal()
	c.observe("s1", 3)
	c.observe("s2", 1)
	c.observe("s1", 5)
	c.restarted("s1") // killed at 5
	c.observe("s1", 2)
	c.observe("s2", 0) // restarted unseen: 1 banked
	c.observe("s2", 4)
	require.InDelta(t, 5+2+1+4, c.total(), 0)
}

func TestScrapeCounter(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "# HELP sluice_scheduler_results_total Worker results.")
		fmt.Fprintln(w, `sluice_scheduler_results_total{outcome="applied"} 40`)
		fmt.Fprintln(w, `sluice_scheduler_results_total{outcome="stale"} 7`)
	}))
	t.Cleanup(srv.Close)
	v, err := scrapeCounter(context.Background(), srv.Client(), srv.URL, staleResultsSeries)
	require.NoError(t, err)
	require.InDelta(t, 7, v, 0)
	v, err = scrapeCounter(context.Background(), srv.Client(), srv.URL, `absent{a="b"}`)
	require.NoError(t, err)
	require.Zero(t, v)
}
