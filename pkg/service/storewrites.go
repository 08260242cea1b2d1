package service

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/pkg/store"
)

// StoreWrites exports a store's write counts on /metrics: each write it
// committed by operation (sluice_store_writes_total), the job rows those
// writes changed by operation (sluice_store_rows_written_total), the
// other rows they changed (sluice_store_side_rows_written_total) and the
// transactions that carried them (sluice_store_commits_total), read when
// scraped.
type StoreWrites struct {
	src      store.WriteCounter
	writes   *prometheus.Desc
	rows     *prometheus.Desc
	sideRows *prometheus.Desc
	commits  *prometheus.Desc
}

// NewStoreWrites is the collector of src's write counts.
func NewStoreWrites(src store.WriteCounter) *StoreWrites {
	return &StoreWrites{
		src: src,
		writes: prometheus.NewDesc("sluice_store_writes_total",
			"Writes the store committed, by operation (embedded store: write requests; MongoDB: write commands).",
			[]string{"operation"}, nil),
		rows: prometheus.NewDesc("sluice_store_rows_written_total",
			"Job rows the store's committed writes inserted, updated or deleted, by operation (embedded store: rows of the jobs table; MongoDB: documents of the jobs collection).",
			[]string{"operation"}, nil),
		sideRows: prometheus.NewDesc("sluice_store_side_rows_written_total",
			"Other rows the store's committed writes changed: admission counters, counts of jobs by state, key locks.", nil, nil),
		commits: prometheus.NewDesc("sluice_store_commits_total",
			"Transactions the store committed (the embedded store commits several writes in one under load).", nil, nil),
	}
}

// RegisterStoreWrites registers the collector of st's write counts on reg
// when st counts its writes (both drivers do), and, when st has a single
// writer (the embedded store), how that writer spends its wall time, read
// when scraped: the seconds it was busy on transactions
// (sluice_store_writer_busy_seconds_total; its rate near 1 means the
// writer bounds the writes) and the part of them spent committing
// (sluice_store_writer_commit_seconds_total).
func RegisterStoreWrites(reg prometheus.Registerer, st store.Store) error {
	if wt, ok := st.(store.WriterTimer); ok {
		for _, c := range []prometheus.Collector{
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_store_writer_busy_seconds_total",
				Help: "Wall time the embedded store's single writer spent on transactions, waiting for a CPU and the disk included (the rest it waited for writes)."},
				func() float64 { return wt.WriterTimes().Busy.Seconds() }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_store_writer_commit_seconds_total",
				Help: "Part of the writer's busy time spent committing: the log's writes and its fsync."},
				func() float64 { return wt.WriterTimes().Commit.Seconds() }),
		} {
			if err := reg.Register(c); err != nil {
				return err
			}
		}
	}
	wc, ok := st.(store.WriteCounter)
	if !ok {
		return nil
	}
	return reg.Register(NewStoreWrites(wc))
}

// Describe implements prometheus.Collector.
func (c *StoreWrites) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.writes
	ch <- c.rows
	ch <- c.sideRows
	ch <- c.commits
}

// Collect implements prometheus.Collector.
func (c *StoreWrites) Collect(ch chan<- prometheus.Metric) {
	n := c.src.WriteCounts()
	for _, op := range store.WriteOps() {
		ch <- prometheus.MustNewConstMetric(c.writes, prometheus.CounterValue, float64(n.Writes[op]), op.String())
		ch <- prometheus.MustNewConstMetric(c.rows, prometheus.CounterValue, float64(n.Rows[op]), op.String())
	}
	ch <- prometheus.MustNewConstMetric(c.sideRows, prometheus.CounterValue, float64(n.SideRows))
	ch <- prometheus.MustNewConstMetric(c.commits, prometheus.CounterValue, float64(n.Commits))
}
