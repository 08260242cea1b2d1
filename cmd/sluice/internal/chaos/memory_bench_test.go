package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/procmem"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// memoryTarget and stackTarget are issue 25's memory targets in KiB: each
// service process at most 64 MiB, the whole stack at most 128 MiB.
const (
	memoryTarget = 64 << 10
	stackTarget  = 128 << 10
)

// BenchmarkMemory runs the real service binaries as separate processes on
// 127.0.0.1 (NATS with JetStream in natsd, one gateway, one scheduler, one
// reaper, each of the three opening the embedded SQLite store in its own
// process, and 4 worker processes × 256 slots), admits 100,000 no-op jobs
// through POST /v1/jobs/batch before any worker runs, starts the workers,
// waits until every job has succeeded and prints each process's peak
// (VmHWM) and final (VmRSS) resident memory against 64 MiB, and their sum
// against 128 MiB. `make bench-memory` runs it; GOMEMLIMIT set for it is
// passed on to every process (GOMEMLIMIT=off: no soft limit).
func BenchmarkMemory(b *testing.B) {
	ctx := context.Background()
	work := b.TempDir()
	bin := filepath.Join(work, "bin")
	start := time.Now()
	if err := BuildBinaries(ctx, bin, "natsd", "gateway", "scheduler", "reaper", "worker"); err != nil {
		b.Fatal(err)
	}
	fmt.Printf("memory: binaries built in %s\n", time.Since(start).Round(time.Second))
	env := []string{
		"SLUICE_MAX_ACTIVE=0", "SLUICE_TENANT_MAX_ACTIVE=0",
		"SLUICE_SCHEDULER_NO_WORKER_GRACE=0", "SLUICE_SCHEDULER_MAX_CONCURRENT=256",
	}
	// GOMEMLIMIT set for the benchmark is passed on to every process
	// (e.g. GOMEMLIMIT=off to measure without the services' default).
	limit := "the services' default"
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		env, limit = append(env, "GOMEMLIMIT="+v), "GOMEMLIMIT="+v
	}
	c, err := Start(Config{
		BinDir: bin, WorkDir: work, Store: StoreEmbedded,
		Gateways: 1, Schedulers: 1, Workers: 4, WorkerLimit: 256, Tenants: 1,
		RealWorkers: true, WorkersLater: true,
		// The services' own defaults, as users run them.
		HeartbeatInterval: 5 * time.Second, StaleThreshold: 30 * time.Second,
		RetryInterval: 2 * time.Second, DispatchDeadline: 10 * time.Minute, ReaperInterval: 10 * time.Second,
		Env: env,
	})
	b.Cleanup(c.Close) // every process, by pid
	if err != nil {
		b.Fatal(err)
	}
	gw, token := c.Gateways[0], c.Tenants[0].Token
	waitReady(b, gw, time.Minute)

	// Every process is read every 250 ms until the end: the final line
	// is each one's last reading, its peak the kernel's high-water mark.
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var sampleWG sync.WaitGroup
	var mu sync.Mutex
	last := map[*Proc]procmem.Figures{}
	sample := func() {
		for _, p := range c.all() {
			if f := p.memory(); f.Peak > 0 {
				mu.Lock()
				last[p] = f
				mu.Unlock()
			}
		}
	}
	sampleWG.Go(func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			sample()
			select {
			case <-sampleCtx.Done():
				return
			case <-t.C:
			}
		}
	})
	b.Cleanup(func() { stopSampling(); sampleWG.Wait() })

	const total = 100_000
	start = time.Now()
	admitted := admitBatches(b, gw, token, total, 1000, 8)
	if admitted != total {
		b.Fatalf("admitted %d of %d", admitted, total)
	}
	fmt.Printf("memory: %d jobs admitted through /v1/jobs/batch in %s\n", admitted, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	if err := c.StartWorkers(); err != nil {
		b.Fatal(err)
	}
	waitDone(b, gw, token, total, 10*time.Minute)
	burn := time.Since(start)
	fmt.Printf("memory: %d jobs completed in %s = %.0f jobs/s (4 worker processes × 256 slots)\n",
		total, burn.Round(time.Millisecond), float64(total)/burn.Seconds())
	stopSampling()
	sampleWG.Wait()
	sample()

	var sumPeak, sumNow int64
	for _, p := range c.all() {
		f := last[p]
		sumPeak += f.Peak
		sumNow += f.Now
		b.ReportMetric(mib(f.Peak), p.Name+"-peak-MiB")
		fmt.Printf("memory: %-11s peak %6.1f MiB, final %6.1f MiB (target ≤ 64: %s)%s\n",
			p.Name, mib(f.Peak), mib(f.Now), verdict(f.Peak, memoryTarget), holds(p.Service))
	}
	b.ReportMetric(mib(sumPeak), "stack-peak-MiB")
	fmt.Printf("memory: whole stack, %d processes: peaks summed %.1f MiB, final %.1f MiB (target ≤ 128: %s; soft memory limit: %s)\n",
		len(c.all()), mib(sumPeak), mib(sumNow), verdict(sumPeak, stackTarget), limit)
}

// holds says which process holds what besides its own service.
func holds(service string) string {
	switch service {
	case "natsd":
		return " [the NATS server with JetStream]"
	case "gateway", "scheduler", "reaper":
		return " [+ the embedded SQLite store]"
	}
	return ""
}

// mib converts KiB to MiB.
func mib(kib int64) float64 { return float64(kib) / 1024 }

// verdict is "met" when kib is within target KiB, else "NOT met".
func verdict(kib, target int64) string {
	if kib <= target {
		return "met"
	}
	return "NOT met"
}

// waitReady polls the gateway's /readyz until it answers 200.
func waitReady(b *testing.B, gw string, within time.Duration) {
	b.Helper()
	for deadline := time.Now().Add(within); ; {
		resp, err := http.Get(gw + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("gateway %s not ready after %s: %v", gw, within, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// admitBatches posts total no-op sleep jobs as token's tenant in batches
// of size from conc clients and returns how many were admitted.
func admitBatches(b *testing.B, gw, token string, total, size, conc int) int64 {
	b.Helper()
	var sb strings.Builder
	sb.WriteString(`{"jobs":[`)
	for i := range size {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"kind":"sleep"}`)
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	var (
		admitted, next atomic.Int64
		failed         atomic.Value
		wg             sync.WaitGroup
	)
	for range conc {
		wg.Go(func() {
			for next.Add(int64(size)) <= int64(total) {
				req, err := http.NewRequest(http.MethodPost, gw+"/v1/jobs/batch", bytes.NewReader(body))
				if err != nil {
					failed.Store(err.Error())
					return
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+token)
				resp, err := http.DefaultClient.Do(req)
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
	return admitted.Load()
}

// waitDone polls /v1/stats as token's tenant until n jobs have succeeded.
func waitDone(b *testing.B, gw, token string, n int, within time.Duration) {
	b.Helper()
	for deadline := time.Now().Add(within); ; {
		var st contracts.Stats
		req, err := http.NewRequest(http.MethodGet, gw+"/v1/stats", nil)
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&st)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		if st.Counts[contracts.StateSucceeded] >= n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d jobs succeeded: %+v", st.Counts[contracts.StateSucceeded], n, st.Counts)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
