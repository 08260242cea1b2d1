package metrics

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/observe/clocktest"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// fakeStats answers Stats from fields the test sets.
type fakeStats struct {
	mu      sync.Mutex
	pending int
	running int
	err     error
	block   bool // wait for ctx to end
	calls   atomic.Int64
}

func (f *fakeStats) stats(ctx context.Context) (store.Counts, error) {
	f.calls.Add(1)
	f.mu.Lock()
	pending, running, err, block := f.pending, f.running, f.err, f.block
	f.mu.Unlock()
	if block {
		<-ctx.Done()
		return store.Counts{}, ctx.Err()
	}
	if err != nil {
		return store.Counts{}, err
	}
	return store.Counts{ByState: map[contracts.JobState]int{
		contracts.StatePending: pending, contracts.StateRunning: running, contracts.StateSucceeded: 99,
	}}, nil
}

func (f *fakeStats) set(fn func(f *fakeStats)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func activeSetup(t *testing.T, f *fakeStats, timeout time.Duration) (*prometheus.Registry, *clocktest.Clock) {
	t.Helper()
	reg := prometheus.NewRegistry()
	clock := clocktest.At(time.Unix(1_700_000_000, 0))
	require.NoError(t, RegisterActiveJobs(reg, f.stats, timeout, 5*time.Second, clock.Now))
	return reg, clock
}

const activeHelp = `
# HELP sluice_gateway_active_jobs Active jobs in the store by state (pending, running), counted when scraped (cached up to a few seconds).
# TYPE sluice_gateway_active_jobs gauge
`

func activeText(pending, running string) string {
	return activeHelp + `sluice_gateway_active_jobs{state="pending"} ` + pending + "\n" +
		`sluice_gateway_active_jobs{state="running"} ` + running + "\n"
}

func TestActiveJobsReadTheStoreAndCache(t *testing.T) {
	t.Parallel()
	f := &fakeStats{pending: 3, running: 2}
	reg, clock := activeSetup(t, f, time.Second)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(activeText("3", "2")), "sluice_gateway_active_jobs"))
	require.EqualValues(t, 1, f.calls.Load())

	// Within the max age the answer is reused.
	f.set(func(f *fakeStats) { f.pending, f.running = 1, 1 })
	clock.Advance(4 * time.Second)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(activeText("3", "2")), "sluice_gateway_active_jobs"))
	require.EqualValues(t, 1, f.calls.Load())

	// After it, the store is asked again.
	clock.Advance(time.Second)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(activeText("1", "1")), "sluice_gateway_active_jobs"))
	require.EqualValues(t, 2, f.calls.Load())
}

func TestActiveJobsLeftOutWhenTheStoreFails(t *testing.T) {
	t.Parallel()
	f := &fakeStats{err: errors.New("store down")}
	reg, clock := activeSetup(t, f, time.Second)
	n, err := testutil.GatherAndCount(reg, "sluice_gateway_active_jobs")
	require.NoError(t, err, "a failing store does not fail the scrape")
	require.Zero(t, n)
	require.Equal(t, 1.0, gatherValue(t, reg, "sluice_gateway_active_jobs_errors_total"))

	// The failure is cached too: a down store is not hammered.
	_, err = testutil.GatherAndCount(reg, "sluice_gateway_active_jobs")
	require.NoError(t, err)
	require.EqualValues(t, 1, f.calls.Load())

	f.set(func(f *fakeStats) { f.err = nil; f.pending = 7 })
	clock.Advance(5 * time.Second)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(activeText("7", "0")), "sluice_gateway_active_jobs"))
	require.Equal(t, 1.0, gatherValue(t, reg, "sluice_gateway_active_jobs_errors_total"))
}

func TestActiveJobsQueryIsBoundedAndShared(t *testing.T) {
	t.Parallel()
	f := &fakeStats{block: true}
	reg, _ := activeSetup(t, f, 50*time.Millisecond)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			_, err := testutil.GatherAndCount(reg, "sluice_gateway_active_jobs")
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	require.EqualValues(t, 1, f.calls.Load(), "concurrent scrapes share one store query")
	require.Equal(t, 1.0, gatherValue(t, reg, "sluice_gateway_active_jobs_errors_total"), "the timed-out query counts as an error")
}

func TestRegisterActiveJobsChecksItsArguments(t *testing.T) {
	t.Parallel()
	f := &fakeStats{}
	require.Error(t, RegisterActiveJobs(nil, f.stats, 0, 0, nil))
	require.Error(t, RegisterActiveJobs(prometheus.NewRegistry(), nil, 0, 0, nil))
	reg := prometheus.NewRegistry()
	require.NoError(t, RegisterActiveJobs(reg, f.stats, 0, 0, nil))
	require.ErrorContains(t, RegisterActiveJobs(reg, f.stats, 0, 0, nil), "metrics: register active jobs")
}

// gatherValue reads the value of an unlabelled counter or gauge.
func gatherValue(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
