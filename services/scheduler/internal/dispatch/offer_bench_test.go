package dispatch

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// BenchmarkOfferBody: the request of one offer and of a batch of 256 jobs,
// their specs encoded already. Figures only.
func BenchmarkOfferBody(b *testing.B) {
	jobs := make([]*offerJob, 256)
	for i := range jobs {
		spec, err := contracts.EncodeJSON(contracts.JobSpec{ID: fmt.Sprintf("0193a1b2-c3d4-7e5f-8a9b-%012d", i), Tenant: "acme",
			Kind: "noop", Claim: int64(i + 1), Payload: json.RawMessage(`{"n":1}`)})
		if err != nil {
			b.Fatal(err)
		}
		jobs[i] = &offerJob{spec: spec}
	}
	for _, n := range []int{1, 256} {
		b.Run(fmt.Sprintf("%d jobs", n), func(b *testing.B) {
			for b.Loop() {
				_ = offerBody(jobs[:n])
			}
		})
	}
}
