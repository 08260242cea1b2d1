package devstack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/cmd/sluice/internal/procmem"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// benchStack starts a stack for a benchmark and stops it when it ends.
func benchStack(b *testing.B, workers int, extra map[string]string) (*Stack, string) {
	b.Helper()
	o := Options{Workers: workers, NATSListen: "127.0.0.1:0", Log: zerolog.Nop()}
	// The benchmarks hold more jobs in flight than a tenant should.
	o.Environ = testEnv(b.TempDir(), map[string]string{"SLUICE_HEARTBEAT_INTERVAL": "1s", "SLUICE_STALE_THRESHOLD": "10s", "SLUICE_RETRY_INTERVAL": "100ms", "SLUICE_GATEWAY_RETRY_AFTER": "100ms",
		"SLUICE_GATEWAY_TENANT_MAX_ITEMS": "0"})
	for k, v := range extra {
		o.Environ[k] = v
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	o.HTTPListener = ln
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Start(ctx, o)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	base := "http://" + s.HTTPAddr
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st contracts.Stats
		code := httpJSON(base+"/v1/stats", &st)
		if code == http.StatusOK && len(st.Workers) == max(workers, 0) {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("stack not ready: /v1/stats answers %d with %d workers", code, len(st.Workers))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s, base
}

var benchClient = &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}}

func httpJSON(url string, v any) int {
	resp, err := benchClient.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if v != nil {
		_ = jsonDecode(resp.Body, v)
	}
	return resp.StatusCode
}

// hammer posts body from conc clients for d (or n requests) and counts answers by status.
func hammer(base string, conc int, d time.Duration, n int64, body func() []byte) (map[int]int64, time.Duration) {
	var mu sync.Mutex
	counts := map[int]int64{}
	var sent atomic.Int64
	stop := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := map[int]int64{}
			for time.Now().Before(stop) && (n <= 0 || sent.Add(1) <= n) {
				resp, err := benchClient.Post(base+"/v1/jobs", "application/json", bytes.NewReader(body()))
				if err != nil {
					local[0]++
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				local[resp.StatusCode]++
			}
			mu.Lock()
			for k, v := range local {
				counts[k] += v
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return counts, time.Since(start)
}

func sleepBody(ms int) func() []byte {
	b := []byte(`{"kind":"sleep","payload":{"ms":` + strconv.Itoa(ms) + `}}`)
	return func() []byte { return b }
}

// BenchmarkAdmission measures HTTP admission decisions per second, accepted
// and rejected separately.
func BenchmarkAdmission(b *testing.B) {
	b.Run("accepted", func(b *testing.B) {
		_, base := benchStack(b, -1, map[string]string{"SLUICE_MAX_ACTIVE": "0"})
		counts, took := hammer(base, 32, 3*time.Second, 0, sleepBody(0))
		rate := float64(counts[http.StatusAccepted]) / took.Seconds()
		b.ReportMetric(rate, "accepted/s")
		fmt.Printf("admission, single submits, accepted: %.0f decisions/s (%d in %s, other answers %v; target ≥ 10,000)\n", rate, counts[http.StatusAccepted], took.Round(time.Millisecond), others(counts, http.StatusAccepted))
	})
	b.Run("rejected", func(b *testing.B) {
		_, base := benchStack(b, -1, map[string]string{"SLUICE_MAX_ACTIVE": "1"})
		hammer(base, 1, time.Second, 1, sleepBody(0))
		counts, took := hammer(base, 32, 3*time.Second, 0, sleepBody(0))
		rate := float64(counts[http.StatusTooManyRequests]) / took.Seconds()
		b.ReportMetric(rate, "rejected/s")
		fmt.Printf("admission, single submits, rejected: %.0f decisions/s (%d in %s, other answers %v)\n", rate, counts[http.StatusTooManyRequests], took.Round(time.Millisecond), others(counts, http.StatusTooManyRequests))
	})
}

func others(counts map[int]int64, except int) map[int]int64 {
	out := map[int]int64{}
	for k, v := range counts {
		if k != except {
			out[k] = v
		}
	}
	return out
}

// BenchmarkEndToEnd is the steady case: 64 HTTP clients submit one no-op
// job per request while 4 workers × 64 slots run them; it reports jobs
// completed per second. Then it measures submit → running latency at a
// paced 500 and 2,000 jobs/s with free capacity, and the process's peak
// RSS.
func BenchmarkEndToEnd(b *testing.B) {
	s, base := benchStack(b, 4, map[string]string{"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "64", "SLUICE_MAX_ACTIVE": "0"})
	const jobs = 30000
	before := writeCounts(b, s)
	start := time.Now()
	counts, _ := hammer(base, 64, 5*time.Minute, jobs, sleepBody(0))
	submitted := time.Since(start)
	if counts[http.StatusAccepted] != jobs {
		b.Fatalf("submitted %v", counts)
	}
	waitSucceeded(b, base, jobs, 5*time.Minute)
	took := time.Since(start)
	rate := float64(jobs) / took.Seconds()
	b.ReportMetric(rate, "jobs/s")
	offers, dispatched := offerFigures(b, s)
	fmt.Printf("steady, 64 HTTP clients, single submits: %.0f jobs/s completed (%d no-op jobs in %s, submission alone %s; 4 workers × 64 slots; target ≥ 3,000)\n",
		rate, jobs, took.Round(time.Millisecond), submitted.Round(time.Millisecond))
	fmt.Printf("offers per dispatched job (steady): %.3f (%.0f offers for %.0f dispatches)\n", offers/dispatched, offers, dispatched)
	reportWrites(b, s, "steady", before, jobs)

	done := jobs
	for _, perSec := range []int{500, 2000} {
		n := perSec * 4 // four seconds of load
		paced(base, perSec, n)
		done += n
		waitSucceeded(b, base, done, time.Minute)
		lat := latencies(b, s.Store, n)
		p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
		b.ReportMetric(float64(p99.Microseconds())/1000, fmt.Sprintf("p99-ms@%d/s", perSec))
		fmt.Printf("submit → running at %d jobs/s: p50 %s, p99 %s, max %s (%d jobs; target p99 ≤ %s)\n", perSec,
			p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), lat[len(lat)-1].Round(10*time.Microsecond), len(lat),
			map[int]string{500: "10 ms", 2000: "25 ms"}[perSec])
	}
	rss := peakRSS()
	b.ReportMetric(float64(rss)/1024, "peak-rss-MiB")
	fmt.Printf("peak RSS of the whole stack and the load (one process): %.1f MiB\n", float64(rss)/1024)
}

// paced submits n no-op jobs at perSec jobs per second, each from its own
// goroutine at its tick.
func paced(base string, perSec, n int) {
	tick := time.NewTicker(time.Second / time.Duration(perSec))
	defer tick.Stop()
	var wg sync.WaitGroup
	for range n {
		<-tick.C
		wg.Go(func() { hammer(base, 1, time.Minute, 1, sleepBody(0)) })
	}
	wg.Wait()
}

// statsPoll is how often waitSucceeded reads /v1/stats.
const statsPoll = 20 * time.Millisecond

// waitSucceeded waits until n jobs succeeded, or fails b after within.
func waitSucceeded(b *testing.B, base string, n int, within time.Duration) {
	b.Helper()
	deadline := time.Now().Add(within)
	for {
		var st contracts.Stats
		httpJSON(base+"/v1/stats", &st)
		if st.Counts[contracts.StateSucceeded] >= n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d jobs succeeded: %+v", st.Counts[contracts.StateSucceeded], n, st.Counts)
		}
		// Stats reads the store's counts of jobs by state (O(1)): a fine
		// poll costs little and sees the end within statsPoll, as the
		// peers' harness sees its jobs end from their events.
		time.Sleep(statsPoll)
	}
}

// latencies reads the newest n jobs and returns their submit → running times, sorted.
func latencies(b *testing.B, st store.Store, n int) []time.Duration {
	b.Helper()
	var out []time.Duration
	cursor := ""
	for len(out) < n {
		page, next, err := st.List(context.Background(), store.Query{Limit: 500, Cursor: cursor})
		if err != nil {
			b.Fatal(err)
		}
		for _, j := range page {
			if j.StartedAt != nil && len(out) < n {
				out = append(out, j.StartedAt.Sub(j.CreatedAt))
			}
		}
		if next == "" {
			break
		}
		cursor = next
	}
	slices.Sort(out)
	return out
}

// peakRSS is VmHWM of this process in KiB.
func peakRSS() int64 { return procmem.PeakRSS(os.Getpid()) }

func jsonDecode(r io.Reader, v any) error { return json.NewDecoder(r).Decode(v) }

// offerFigures reads the first scheduler's offer counters from the stack's registry.
func offerFigures(b *testing.B, s *Stack) (offers, dispatched float64) {
	b.Helper()
	mfs, err := s.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "sluice_scheduler_offers_total":
			for _, m := range mf.GetMetric() {
				offers += m.GetCounter().GetValue()
			}
		case "sluice_scheduler_dispatches_total":
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" && l.GetValue() == "dispatched" {
						dispatched += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return offers, dispatched
}
