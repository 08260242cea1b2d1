package devstack

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// BenchmarkLeaseWrites runs jobs of 1 s (heartbeat interval 1 s, stale
// threshold 10 s) with every heartbeat written (renew point 1 ns: the
// former behaviour) and with leases renewed lazily (the default renew
// point), and prints the store writes per job as the store counts them
// (reportWrites) and the heartbeat leases written and kept.
func BenchmarkLeaseWrites(b *testing.B) {
	for _, mode := range []struct{ name, renewAfter string }{{"every-heartbeat", "1ns"}, {"lazy", "0s"}} {
		b.Run(mode.name, func(b *testing.B) {
			s, base := benchStack(b, 4, map[string]string{"SLUICE_WORKER_MAX_CONCURRENT_TASKS": "256", "SLUICE_MAX_ACTIVE": "0",
				"SLUICE_SCHEDULER_LEASE_RENEW_AFTER": mode.renewAfter})
			const jobs = 512
			before := writeCounts(b, s)
			counts, _ := hammer(base, 64, 5*time.Minute, jobs, sleepBody(1000))
			if counts[http.StatusAccepted] != jobs {
				b.Fatalf("submitted %v", counts)
			}
			waitSucceeded(b, base, jobs, 5*time.Minute)
			reportWrites(b, s, "jobs of 1 s, leases renewed "+mode.name, before, jobs)
			hb := heartbeatFigures(b, s)
			written := hb["promoted"] + hb["renewed"]
			b.ReportMetric(written/jobs, "heartbeat-writes/job")
			fmt.Printf("jobs of 1 s, leases renewed %s: %.0f heartbeat leases written (%.0f promoted + %.0f renewed), %.0f kept without a write\n",
				mode.name, written, hb["promoted"], hb["renewed"], hb["kept"])
		})
	}
}

// heartbeatFigures reads the first scheduler's heartbeat leases by outcome.
func heartbeatFigures(b *testing.B, s *Stack) map[string]float64 {
	b.Helper()
	mfs, err := s.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "sluice_scheduler_heartbeat_leases_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "outcome" {
					out[lp.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}
