package metrics

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// StatsFunc counts the jobs in the store; store.Store.Stats is one.
type StatsFunc func(ctx context.Context) (store.Counts, error)

// Defaults of the active-jobs collector.
const (
	// DefaultStatsTimeout bounds the store query of one scrape.
	DefaultStatsTimeout = 2 * time.Second
	// DefaultStatsMaxAge is how long one store answer serves later scrapes.
	DefaultStatsMaxAge = 5 * time.Second
)

// activeJobs is sluice_gateway_active_jobs, read from the store when
// Prometheus scrapes. Querying at scrape time (rather than refreshing on a
// timer) needs no goroutine to own, costs the store nothing while nobody
// scrapes, and never serves a value older than maxAge. Because /metrics is
// unauthenticated and never rate limited, scrapes do not reach the store
// one for one: one query runs at a time (concurrent scrapes wait for it
// and share its answer), and an answer, or a failure, serves every scrape
// for maxAge. A failed or slow query (over timeout) leaves the gauge out of
// that scrape, rather than failing the whole scrape or serving a stale
// count, and counts in sluice_gateway_active_jobs_errors_total.
type activeJobs struct {
	stats   StatsFunc
	timeout time.Duration
	maxAge  time.Duration
	now     func() time.Time

	desc     *prometheus.Desc
	failures prometheus.Counter

	mu      sync.Mutex
	fetched time.Time // when counts (or err) were read; zero = never
	counts  store.Counts
	err     error
}

// RegisterActiveJobs registers sluice_gateway_active_jobs{state} (pending
// and running jobs, read through stats when scraped) and its error counter
// on reg. A zero timeout or maxAge takes its default; now nil is time.Now.
func RegisterActiveJobs(reg prometheus.Registerer, stats StatsFunc, timeout, maxAge time.Duration, now func() time.Time) error {
	if reg == nil || stats == nil {
		return errors.New("metrics: active jobs need a registerer and a stats function")
	}
	if timeout <= 0 {
		timeout = DefaultStatsTimeout
	}
	if maxAge <= 0 {
		maxAge = DefaultStatsMaxAge
	}
	if now == nil {
		now = time.Now
	}
	c := &activeJobs{
		stats: stats, timeout: timeout, maxAge: maxAge, now: now,
		desc: prometheus.NewDesc("sluice_gateway_active_jobs",
			"Active jobs in the store by state (pending, running), counted when scraped (cached up to a few seconds).",
			[]string{"state"}, nil),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_gateway_active_jobs_errors_total",
			Help: "Store counts that failed or timed out while serving sluice_gateway_active_jobs (the gauge is left out of that scrape).",
		}),
	}
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("metrics: register active jobs: %w", err)
	}
	return nil
}

// Describe implements prometheus.Collector.
func (c *activeJobs) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.desc
	c.failures.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *activeJobs) Collect(ch chan<- prometheus.Metric) {
	counts, err := c.read()
	if err == nil {
		for _, st := range []contracts.JobState{contracts.StatePending, contracts.StateRunning} {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts.ByState[st]), string(st))
		}
	}
	c.failures.Collect(ch)
}

// read returns the cached counts, or queries the store when they are older
// than maxAge. The lock makes concurrent scrapes share one query.
func (c *activeJobs) read() (store.Counts, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if !c.fetched.IsZero() && now.Sub(c.fetched) < c.maxAge {
		return c.counts, c.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	c.counts, c.err = c.stats(ctx)
	if c.err != nil {
		c.err = fmt.Errorf("metrics: count active jobs: %w", c.err)
		c.failures.Inc()
	}
	c.fetched = now
	return c.counts, c.err
}
