package devstack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// fanoutBody is a sleep fan-out of n items of ms milliseconds, window w.
func fanoutBody(n, ms, w int) []byte {
	item := "null"
	if ms > 0 {
		item = fmt.Sprintf(`{"ms":%d}`, ms)
	}
	var sb strings.Builder
	sb.WriteString(`{"kind":"sleep","concurrency":`)
	fmt.Fprint(&sb, w)
	sb.WriteString(`,"items":[`)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(item)
	}
	sb.WriteString(`]}`)
	return []byte(sb.String())
}

// submitFanout posts a fan-out and returns the parent and how long the
// admission took.
func submitFanout(b *testing.B, base string, body []byte) (contracts.Job, time.Duration) {
	b.Helper()
	start := time.Now()
	resp, err := benchClient.Post(base+"/v1/jobs", "application/json", bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	took := time.Since(start)
	var p contracts.Job
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || resp.StatusCode != http.StatusAccepted {
		b.Fatalf("fan-out: status %d: %v", resp.StatusCode, err)
	}
	return p, took
}

// waitParent polls a parent until it ends and returns it.
func waitParent(b *testing.B, base, id string, within time.Duration) contracts.Job {
	b.Helper()
	deadline := time.Now().Add(within)
	for {
		var p contracts.Job
		if httpJSON(base+"/v1/jobs/"+id, &p) == http.StatusOK && p.State.Final() {
			return p
		}
		if time.Now().After(deadline) {
			b.Fatalf("parent %s not final after %s: %+v", id, within, p.Children)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// BenchmarkFanout admits one fan-out of 100,000 no-op items with a window
// of 1,000 before any worker exists, then starts 4 workers × 256 slots and
// reports how fast its children complete (to compare with the burn-down
// of as many plain jobs).
func BenchmarkFanout(b *testing.B) {
	s, base := benchStack(b, -1, map[string]string{"SLUICE_MAX_ACTIVE": "0", "SLUICE_SCHEDULER_NO_WORKER_GRACE": "0",
		"SLUICE_SCHEDULER_MAX_CONCURRENT": "256", "SLUICE_GATEWAY_MAX_BODY_BYTES": "4194304", "SLUICE_GATEWAY_MAX_ITEMS_PER_REQUEST": "100001"})
	const total = 100_000
	p, took := submitFanout(b, base, fanoutBody(total, 0, 1000))
	fmt.Printf("fan-out: a parent of %d items admitted in %s (target < 2s)\n", total, took.Round(time.Millisecond))
	start := time.Now()
	startWorkers(b, s, 4, 256)
	p = waitParent(b, base, p.ID, 10*time.Minute)
	burn := time.Since(start)
	if p.State != contracts.StateSucceeded || p.Children.Succeeded != total {
		b.Fatalf("fan-out ended %s: %+v", p.State, p.Children)
	}
	rate := float64(total) / burn.Seconds()
	b.ReportMetric(rate, "jobs/s")
	b.ReportMetric(took.Seconds(), "admit-s")
	fmt.Printf("fan-out: %d children completed in %s = %.0f jobs/s (window 1,000, 4 workers × 256 slots; target ≥ 50%% of the burn-down rate)\n",
		total, burn.Round(time.Millisecond), rate)
}

// BenchmarkFanoutWindow runs a fan-out of 20 ms items with a window of 8
// on one worker of 64 free slots and samples how many children run.
func BenchmarkFanoutWindow(b *testing.B) {
	_, base := benchStack(b, 1, map[string]string{"SLUICE_MAX_ACTIVE": "0", "SLUICE_WORKER_MAX_CONCURRENT_TASKS": "64"})
	p, _ := submitFanout(b, base, fanoutBody(1500, 20, 8))
	var (
		hist    = map[int]int{}
		samples int
	)
	for {
		var j contracts.Job
		if httpJSON(base+"/v1/jobs/"+p.ID, &j) != http.StatusOK {
			b.Fatal("parent not readable")
		}
		if j.State.Final() {
			break
		}
		if j.State == contracts.StateRunning && j.Children.Finished() > 8 && j.Children.Total-j.Children.Finished() > 8 {
			hist[j.Children.Running]++
			samples++
		}
		time.Sleep(5 * time.Millisecond)
	}
	most, at8 := 0, hist[8]
	for n := range hist {
		most = max(most, n)
	}
	b.ReportMetric(float64(most), "max-running")
	fmt.Printf("fan-out window 8 on 64 free slots: at most %d running over %d samples, exactly 8 in %.1f%% (running: %v; target: never 9)\n",
		most, samples, 100*float64(at8)/float64(max(samples, 1)), hist)
	if most > 8 {
		b.Fatalf("%d children ran at once, window 8", most)
	}
}
