package devstack

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// BenchmarkSwarm is `make swarm`: SLUICE_SWARM_WORKERS (10,000) simulated
// single-slot workers on 8 shared NATS connections join within one second
// a whole stack in this process (gateway, scheduler, reaper, embedded
// store; 1 s heartbeats, 6 s stale threshold), while single submits
// measure admission latency against its idle value; then
// SLUICE_SWARM_JOBS (100,000) jobs of SLUICE_SWARM_JOB_MS (1,000) each go
// in through the batch endpoint and must all succeed. It prints one line:
// join time, admission p99 idle and during the burst, heartbeat round
// trips, fenced leases, leases answered lost, stale requeues, dropped
// heartbeats, offers per dispatched job and jobs per second.
func BenchmarkSwarm(b *testing.B) {
	workers := envInt("SLUICE_SWARM_WORKERS", 10000)
	jobs := envInt("SLUICE_SWARM_JOBS", 100000)
	jobMS := envInt("SLUICE_SWARM_JOB_MS", 1000)
	const (
		heartbeat = time.Second
		stale     = 6 * time.Second
	)
	s, base := benchStack(b, -1, map[string]string{
		"SLUICE_MAX_ACTIVE": "0", "SLUICE_HEARTBEAT_INTERVAL": heartbeat.String(), "SLUICE_STALE_THRESHOLD": stale.String(),
		"SLUICE_SCHEDULER_MAX_CONCURRENT": "256", "SLUICE_GATEWAY_RATE_LIMIT_TENANT": "0", "SLUICE_GATEWAY_RATE_LIMIT_TENANT_READ": "0", "SLUICE_GATEWAY_RATE_LIMIT_IP": "0",
	})
	sw, err := newSwarm(s.NATSURL, 8, heartbeat, stale*2/3)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(sw.close)

	// Admission latency with no worker, then while the fleet joins. The
	// probes are of a kind no worker runs: they measure admission alone,
	// not the dispatch of a backlog they would build up.
	probeBody := []byte(`{"kind":"probe"}`)
	idle := probeAdmission(base, probeBody, 3*time.Second, 100)
	// Joining is two steps, measured apart: the workers' subscriptions
	// (the NATS server's work, and this process's: the simulated workers
	// run here), then every worker's announcement within one second (the
	// stack's work: every scheduler and gateway learns of each worker).
	var subscribing, burst []time.Duration
	var wg sync.WaitGroup
	subStart := time.Now()
	subDone := make(chan struct{})
	wg.Go(func() { subscribing = probeAdmissionUntil(base, probeBody, subDone, 100) })
	added, err := sw.subscribe(workers, 1)
	if err != nil {
		b.Fatal(err)
	}
	close(subDone)
	wg.Wait()
	subTook := time.Since(subStart)
	joinStart := time.Now()
	wg.Go(func() { burst = probeAdmission(base, probeBody, 5*time.Second, 100) })
	sw.announceAll(added, time.Second)
	joined := waitWorkers(b, base, workers, 2*time.Minute)
	joinTook := time.Since(joinStart)
	wg.Wait()

	// The run.
	offers0, dispatched0 := offerFigures(b, s)
	cpu0 := processCPU()
	runStart := time.Now()
	body := []byte(strings.Replace(string(batchBody(1000)), `{"kind":"sleep"}`, `{"kind":"sleep","payload":{"ms":`+strconv.Itoa(jobMS)+`}}`, -1))
	admitted := submitBodies(b, base, body, jobs/1000, 4)
	// The fleet's own count says when the runs are over (polling
	// /v1/stats counts every job and lists every worker: not free); the
	// store then has the last word.
	for deadline := time.Now().Add(30 * time.Minute); sw.completed.Load() < admitted && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(runStart)
	cpuPerJob := (processCPU() - cpu0) / time.Duration(max(admitted, 1))
	waitSucceeded(b, base, int(admitted), 5*time.Minute)
	offers, dispatched := offerFigures(b, s)
	offers, dispatched = offers-offers0, dispatched-dispatched0
	stale0, dropped := swarmCounters(b, s)

	line := fmt.Sprintf("swarm: %d workers subscribed in %s (admission p99 meanwhile %s), announced within 1s, all known in %s (%d) | admission p99 idle %s, during the announcements %s (%.1f×; target ≤ 2×) | "+
		"%d jobs of %d ms in %s: %.0f jobs/s | heartbeat round trip p50 %s p99 %s (target ≤ 500ms), %d failed | "+
		"fenced leases %d, answered lost %d, stale requeues %.0f, dropped heartbeats %.0f (target 0 each) | offers per dispatched job %.3f | "+
		"CPU per job %s (the whole process: stack and simulated workers)",
		workers, subTook.Round(10*time.Millisecond), quantile(subscribing, 0.99).Round(100*time.Microsecond),
		joinTook.Round(10*time.Millisecond), joined,
		quantile(idle, 0.99).Round(100*time.Microsecond), quantile(burst, 0.99).Round(100*time.Microsecond),
		float64(quantile(burst, 0.99))/float64(max(quantile(idle, 0.99), 1)),
		admitted, jobMS, took.Round(100*time.Millisecond), float64(admitted)/took.Seconds(),
		sw.rttQuantile(0.5).Round(100*time.Microsecond), sw.rttQuantile(0.99).Round(100*time.Microsecond), sw.hbErrors.Load(),
		sw.fenced.Load(), sw.lost.Load(), stale0, dropped, offers/max(dispatched, 1), cpuPerJob.Round(time.Microsecond))
	fmt.Println(line)
	b.ReportMetric(float64(sw.rttQuantile(0.99).Milliseconds()), "hb-p99-ms")
	b.ReportMetric(float64(sw.fenced.Load()), "fenced")
	b.ReportMetric(float64(admitted)/took.Seconds(), "jobs/s")
}

// probeAdmission submits body perSecond times a second for d, one at a
// time, and returns each accepted submit's round trip.
func probeAdmission(base string, body []byte, d time.Duration, perSecond int) []time.Duration {
	stop := make(chan struct{})
	t := time.AfterFunc(d, func() { close(stop) })
	defer t.Stop()
	return probeAdmissionUntil(base, body, stop, perSecond)
}

// probeAdmissionUntil is probeAdmission until stop is closed.
func probeAdmissionUntil(base string, body []byte, stop <-chan struct{}, perSecond int) []time.Duration {
	var out []time.Duration
	t := time.NewTicker(time.Second / time.Duration(perSecond))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return out
		case <-t.C:
		}
		start := time.Now()
		resp, err := benchClient.Post(base+"/v1/jobs", "application/json", bytes.NewReader(body))
		if err != nil {
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusAccepted {
			out = append(out, time.Since(start))
		}
	}
}

// waitWorkers waits until the gateway's roster lists n workers and
// returns how many it lists.
func waitWorkers(b *testing.B, base string, n int, within time.Duration) int {
	b.Helper()
	deadline := time.Now().Add(within)
	for {
		var st contracts.Stats
		httpJSON(base+"/v1/stats", &st)
		if len(st.Workers) >= n || time.Now().After(deadline) {
			return len(st.Workers)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// submitBodies posts batches batch bodies from conc clients and returns the
// jobs admitted.
func submitBodies(b *testing.B, base string, body []byte, batches, conc int) int64 {
	b.Helper()
	var (
		mu       sync.Mutex
		admitted int64
		next     = make(chan struct{}, batches)
		wg       sync.WaitGroup
	)
	for range batches {
		next <- struct{}{}
	}
	close(next)
	for range conc {
		wg.Go(func() {
			for range next {
				resp, err := benchClient.Post(base+"/v1/jobs/batch", "application/json", bytes.NewReader(body))
				if err != nil {
					b.Error(err)
					return
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				n := int64(strings.Count(string(raw), `"status":202`))
				mu.Lock()
				admitted += n
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return admitted
}

// swarmCounters reads the stale requeues and dropped heartbeats from the
// stack's metrics.
func swarmCounters(b *testing.B, s *Stack) (staleRequeues, dropped float64) {
	b.Helper()
	mfs, err := s.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch mf.GetName() {
			case "sluice_scheduler_requeues_total":
				if labels["reason"] == string(contracts.ReasonStale) {
					staleRequeues += m.GetCounter().GetValue()
				}
			case "sluice_scheduler_dropped_messages_total":
				if labels["subject"] == contracts.HeartbeatSubjects {
					dropped += m.GetCounter().GetValue()
				}
			}
		}
	}
	return staleRequeues, dropped
}

// processCPU is the CPU time this process used so far, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// envInt is an integer setting from the environment, or def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
