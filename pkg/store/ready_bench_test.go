package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// BenchmarkSlotsPacking measures store.Slots alone, the CPU a claim spends
// placing jobs (no store): 256 jobs, half of them declaring resources,
// placed into 8 workers × 32 slots that run 16 jobs each, once counting
// slots only and once packing by resources, alternately. It prints both
// times per job and their ratio.
func BenchmarkSlotsPacking(b *testing.B) {
	const workers, slots, busy, jobs = 8, 32, 16, 256
	r := ClaimRequest{Slots: map[string][]string{"k": nil}, Capacity: map[string]int{}, Resources: map[string]WorkerResources{}}
	running := make([]RunningJob, busy)
	for i := range running {
		running[i] = RunningJob{Kind: "k", Resources: &contracts.Resources{CPU: 0.5}}
	}
	for w := range workers {
		id := fmt.Sprintf("w%02d", w)
		for range slots {
			r.Slots["k"] = append(r.Slots["k"], id)
		}
		r.Capacity[id] = slots + busy
		r.Resources[id] = WorkerResources{Capacity: contracts.Resources{CPU: 1024, Memory: 1 << 40},
			Defaults: contracts.ResourceDefaults{Share: contracts.Resources{CPU: 0.25}}}
	}
	counted := r
	counted.Resources = nil
	on := RunningOn{
		Count: func(string) (int, error) { return busy, nil },
		Jobs:  func(string) ([]RunningJob, error) { return running, nil },
	}
	declared := &contracts.Resources{CPU: 0.5, Memory: 256 << 20}
	place := func(r ClaimRequest) {
		s, err := r.NewSlots(on)
		if err != nil {
			b.Fatal(err)
		}
		for i := range jobs {
			var d *contracts.Resources
			if i%2 == 0 {
				d = declared
			}
			w, ok, _ := s.Fit("k", d)
			if !ok {
				b.Fatal("no fit")
			}
			s.Take("k", w, d)
		}
	}
	var took [2]time.Duration
	n := [2]int{}
	for i := 0; b.Loop(); i++ {
		mode := i % 2
		start := time.Now()
		if mode == 0 {
			place(counted)
		} else {
			place(r)
		}
		took[mode] += time.Since(start)
		n[mode] += jobs
	}
	if n[0] == 0 || n[1] == 0 {
		return
	}
	count := float64(took[0].Nanoseconds()) / float64(n[0])
	packed := float64(took[1].Nanoseconds()) / float64(n[1])
	b.ReportMetric(count, "count-ns/job")
	b.ReportMetric(packed, "packed-ns/job")
	b.ReportMetric(packed/count, "packed/count")
}
