package service

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/pkg/store"
)

// StoreWriter exports how a store's single writer spends its wall time
// on /metrics: the seconds it was busy on transactions
// (sluice_store_writer_busy_seconds_total) and the part of them it spent
// committing, the log's writes and fsync
// (sluice_store_writer_commit_seconds_total), read when scraped. The
// rate of the busy seconds is the share of the wall time the writer is
// busy: near 1, the store's writer bounds the writes.
type StoreWriter struct {
	src    store.WriterTimer
	busy   *prometheus.Desc
	commit *prometheus.Desc
}

// NewStoreWriter is the collector of src's writer times.
func NewStoreWriter(src store.WriterTimer) *StoreWriter {
	return &StoreWriter{
		src: src,
		busy: prometheus.NewDesc("sluice_store_writer_busy_seconds_total",
			"Wall time the embedded store's single writer spent on transactions, waiting for a CPU and the disk included (the rest it waited for writes).", nil, nil),
		commit: prometheus.NewDesc("sluice_store_writer_commit_seconds_total",
			"Part of the writer's busy time spent committing: the log's writes and its fsync.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *StoreWriter) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.busy
	ch <- c.commit
}

// Collect implements prometheus.Collector.
func (c *StoreWriter) Collect(ch chan<- prometheus.Metric) {
	t := c.src.WriterTimes()
	ch <- prometheus.MustNewConstMetric(c.busy, prometheus.CounterValue, t.Busy.Seconds())
	ch <- prometheus.MustNewConstMetric(c.commit, prometheus.CounterValue, t.Commit.Seconds())
}
