package roster

import (
	"testing"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// BenchmarkDecodedNumbered: a worker's numbered announcement found in the
// decode cache (its key split off its seq). Figures only.
func BenchmarkDecodedNumbered(b *testing.B) {
	var d decoded
	a := contracts.Announce{WorkerID: "worker-01", Kinds: []string{"noop", "sleep"}, Capacity: 256, InFlight: 17,
		IntervalMS: 1000, Version: "0.13.0", Seq: 1_800_000_000_000_000_000}
	msg := marshal(b, a)
	if _, err := d.decode(msg); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := d.decode(msg); err != nil {
			b.Fatal(err)
		}
	}
}
