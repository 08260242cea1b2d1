package devstack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/worker/worker"
)

// batchBody is a batch of n no-op sleep jobs.
func batchBody(n int) []byte { return batchOf(n, `{"kind":"sleep"}`) }

// batchOf is a batch of n copies of the job request job.
func batchOf(n int, job string) []byte {
	var sb strings.Builder
	sb.WriteString(`{"jobs":[`)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(job)
	}
	sb.WriteString(`]}`)
	return []byte(sb.String())
}

// submitBatches posts total jobs in batches of size from conc clients and
// returns how many were admitted and how long it took.
func submitBatches(b *testing.B, base string, total, size, conc int) (int64, time.Duration) {
	b.Helper()
	return submitBatchesOf(b, base, total, size, conc, `{"kind":"sleep"}`)
}

// submitBatchesOf is submitBatches of copies of the job request job.
func submitBatchesOf(b *testing.B, base string, total, size, conc int, job string) (int64, time.Duration) {
	b.Helper()
	body := batchOf(size, job)
	var (
		admitted atomic.Int64
		next     atomic.Int64
		wg       sync.WaitGroup
		failed   atomic.Value
	)
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for next.Add(int64(size)) <= int64(total) {
				resp, err := benchClient.Post(base+"/v1/jobs/batch", "application/json", bytes.NewReader(body))
				if err != nil {
					failed.Store(err.Error())
					return
				}
				var br contracts.BatchReply
				err = json.NewDecoder(resp.Body).Decode(&br)
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK {
					failed.Store(fmt.Sprintf("status %d: %v", resp.StatusCode, err))
					return
				}
				for _, r := range br.Results {
					if r.Status == http.StatusAccepted {
						admitted.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		b.Fatalf("batch submit failed: %v", f)
	}
	return admitted.Load(), time.Since(start)
}

// BenchmarkBatchAdmission measures jobs admitted per second through
// POST /v1/jobs/batch (batches of 1,000 from 8 clients), every admission
// fsynced.
func BenchmarkBatchAdmission(b *testing.B) {
	_, base := benchStack(b, -1, map[string]string{"SLUICE_MAX_ACTIVE": "0"})
	const total = 100_000
	admitted, took := submitBatches(b, base, total, 1000, 8)
	rate := float64(admitted) / took.Seconds()
	b.ReportMetric(rate, "admitted/s")
	fmt.Printf("batch admission: %.0f jobs/s (%d in %s, batches of 1,000 from 8 clients; target ≥ 50,000)\n", rate, admitted, took.Round(time.Millisecond))
}

// startWorkers starts n workers of slots slots each, each on its own NATS
// connection as separate services would be, and stops them when b ends.
func startWorkers(b *testing.B, s *Stack, n, slots int) {
	b.Helper()
	startWorkersShared(b, s, n, slots, n)
}

// BenchmarkBurnDown admits 100,000 no-op jobs through the batch endpoint
// before any worker exists, then starts 4 workers × 256 slots and reports
// how fast the backlog completes.
func BenchmarkBurnDown(b *testing.B) {
	s, base := benchStack(b, -1, map[string]string{"SLUICE_MAX_ACTIVE": "0", "SLUICE_SCHEDULER_NO_WORKER_GRACE": "0", "SLUICE_SCHEDULER_MAX_CONCURRENT": "256"})
	const total = 100_000
	before := writeCounts(b, s)
	admitted, took := submitBatches(b, base, total, 1000, 8)
	if admitted != total {
		b.Fatalf("admitted %d of %d", admitted, total)
	}
	fmt.Printf("burn-down: %d jobs admitted in %s\n", admitted, took.Round(time.Millisecond))
	stopProfile, stopTrace := burnProfile(b), burnTrace(b)
	writerBefore := writerTimes(s)
	start := time.Now()
	startWorkers(b, s, 4, 256)
	waitSucceeded(b, base, total, 10*time.Minute)
	burn := time.Since(start)
	writerBurn := writerTimes(s).Sub(writerBefore)
	stopTrace()
	stopProfile()
	rate := float64(total) / burn.Seconds()
	b.ReportMetric(rate, "jobs/s")
	offers, dispatched := offerFigures(b, s)
	fmt.Printf("burn-down: %d jobs completed in %s = %.0f jobs/s (4 workers × 256 slots; %.3f offers per dispatched job; target ≥ 10,000)\n",
		total, burn.Round(time.Millisecond), rate, offers/dispatched)
	reportWrites(b, s, "burn-down", before, total)
	reportWriter(b, "burn-down", writerBurn, burn)
	rss := peakRSS()
	b.ReportMetric(float64(rss)/1024, "peak-rss-MiB")
	fmt.Printf("peak RSS after 100k jobs, the whole stack and the load in one process: %.1f MiB (target ≤ 128)\n", float64(rss)/1024)
}

// burnProfile starts a CPU profile into the file SLUICE_BENCH_BURN_PROFILE
// names, if set, and returns what stops it: the burn-down profiles its burn
// phase alone (workers started → every job succeeded), without the
// admission before it.
func burnProfile(b *testing.B) func() {
	b.Helper()
	return burnRecord(b, "SLUICE_BENCH_BURN_PROFILE", "burn profile", pprof.StartCPUProfile, pprof.StopCPUProfile)
}

// burnTrace starts an execution trace into the file
// SLUICE_BENCH_BURN_TRACE names, if set, and returns what stops it: the
// burn phase alone, as burnProfile (go tool trace reads it).
func burnTrace(b *testing.B) func() {
	b.Helper()
	return burnRecord(b, "SLUICE_BENCH_BURN_TRACE", "burn trace", trace.Start, trace.Stop)
}

// burnRecord starts a recording (start, stop) into the file the variable
// env names, if set, and returns what stops it and closes the file.
func burnRecord(b *testing.B, env, what string, start func(io.Writer) error, stop func()) func() {
	b.Helper()
	path := os.Getenv(env)
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatalf("%s: %v", what, err)
	}
	if err := start(f); err != nil {
		_ = f.Close()
		b.Fatalf("%s: %v", what, err)
	}
	return func() {
		stop()
		if err := f.Close(); err != nil {
			b.Errorf("%s: %v", what, err)
		}
	}
}

// writerTimes reads s's store writer's clock (zero when the store has no
// single writer: MongoDB).
func writerTimes(s *Stack) store.WriterTimes {
	if wt, ok := s.Store.(store.WriterTimer); ok {
		return wt.WriterTimes()
	}
	return store.WriterTimes{}
}

// reportWriter prints how busy the store's single writer was over wall,
// and how much of that it spent committing (the log's writes and fsync):
// "writer busy during <what>: X % of wall, of which commit/fsync Y %".
func reportWriter(b *testing.B, what string, d store.WriterTimes, wall time.Duration) {
	b.Helper()
	if d == (store.WriterTimes{}) || wall <= 0 { // no single writer (writerTimes)
		return
	}
	busy := 100 * d.Busy.Seconds() / wall.Seconds()
	var commit, perTx float64
	if d.Busy > 0 {
		commit = 100 * d.Commit.Seconds() / d.Busy.Seconds()
	}
	if d.Transactions > 0 {
		perTx = float64(d.Requests) / float64(d.Transactions)
	}
	b.ReportMetric(busy, "writer-busy-%")
	fmt.Printf("writer busy during %s: %.1f %% of wall, of which commit/fsync %.1f %% (%s busy, %s committing, %s yielded, of %s; %d transactions, %d requests, %.1f requests per transaction)\n",
		what, busy, commit, d.Busy.Round(time.Millisecond), d.Commit.Round(time.Millisecond), d.Yield.Round(time.Millisecond),
		wall.Round(time.Millisecond), d.Transactions, d.Requests, perTx)
}

// BenchmarkManyWorkers offers jobs to 1,000 single-slot workers kept about
// 90 % busy (900 jobs/s of 1 s each) and reports the offers each
// dispatched job took: the stable order packs load onto the low workers,
// and the roster's view of who is full keeps offers from going to busy
// ones.
func BenchmarkManyWorkers(b *testing.B) {
	s, base := benchStack(b, -1, map[string]string{"SLUICE_MAX_ACTIVE": "0", "SLUICE_SCHEDULER_MAX_CONCURRENT": "256"})
	const workers = 1000
	startWorkersShared(b, s, workers, 1, 8)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var st contracts.Stats
		if httpJSON(base+"/v1/stats", &st) == http.StatusOK && len(st.Workers) == workers {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("workers never all announced")
		}
		time.Sleep(200 * time.Millisecond)
	}
	before, beforeDispatched := offerFigures(b, s)
	const perSec, seconds = 900, 8
	body := sleepBody(1000)
	tick := time.NewTicker(time.Second / perSec)
	var wg sync.WaitGroup
	for range perSec * seconds {
		<-tick.C
		wg.Go(func() { hammer(base, 1, time.Minute, 1, body) })
	}
	tick.Stop()
	wg.Wait()
	waitSucceeded(b, base, perSec*seconds, 2*time.Minute)
	offers, dispatched := offerFigures(b, s)
	offers, dispatched = offers-before, dispatched-beforeDispatched
	b.ReportMetric(offers/dispatched, "offers/dispatch")
	fmt.Printf("offers per dispatched job, 1,000 single-slot workers ~90%% busy: %.3f (%.0f offers for %.0f dispatches; target ≤ 1.2)\n",
		offers/dispatched, offers, dispatched)
}

// startWorkersShared starts n workers of slots slots each, sharing conns
// NATS connections, and stops them when b ends.
func startWorkersShared(b *testing.B, s *Stack, n, slots, conns int) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	b.Cleanup(func() { cancel(); wg.Wait() })
	ncs := make([]*nats.Conn, conns)
	for i := range ncs {
		nc, err := nats.Connect(s.NATSURL, nats.Name(fmt.Sprintf("bench-workers-%d", i)))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		ncs[i] = nc
	}
	dir := b.TempDir()
	for i := range n {
		cfg, err := worker.LoadConfig(map[string]string{
			"SLUICE_WORKER_ID":                   fmt.Sprintf("w-%04d", i+1),
			"SLUICE_WORKER_MAX_CONCURRENT_TASKS": fmt.Sprint(slots),
			"SLUICE_HEARTBEAT_INTERVAL":          "1s",
			"SLUICE_DATA_DIR":                    dir,
		})
		if err != nil {
			b.Fatal(err)
		}
		w, err := worker.New(cfg, worker.Deps{NC: ncs[i%conns], Log: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() { _ = w.Run(ctx) })
	}
}
