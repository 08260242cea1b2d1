package contracts

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// What the compatibility of claim.go costs: a job's JSON with and without
// its "runs" alias (MarshalJSON), and a message of 1,000 results with and
// without reading the claim under either name (a second field folded
// after decoding), the same through DecodeResults, and one event. The
// "without" halves encode the same fields through a type without the
// methods. Figures only; nothing is asserted.
func BenchmarkClaimCompat(b *testing.B) {
	at := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	job := Job{ID: "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", Tenant: "acme", Kind: "sleep", State: StateRunning,
		Payload: json.RawMessage(`{"ms":2000}`), Attempt: 2, MaxAttempts: 3, Claim: 5, Worker: "worker-01",
		CreatedAt: at, UpdatedAt: at, StartedAt: &at, Errors: []RunError{{Attempt: 1, Claim: 3, Error: "handler: boom", At: at}}}
	type plainJob Job
	b.Run("job encode/compat", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(job); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("job encode/plain", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(plainJob(job)); err != nil {
				b.Fatal(err)
			}
		}
	})

	results := make([][]byte, 1000)
	for i := range results {
		results[i] = []byte(fmt.Sprintf(`{"job_id":"job-%d","attempt":%d,"worker_id":"worker-01","state":"succeeded","result":{"n":%d}}`, i, i+1, i))
	}
	msg := EncodeResultBatch(results)
	type plainResult Result
	b.Run("1000 results decode/compat", func(b *testing.B) {
		for b.Loop() {
			var m ResultBatch
			if err := decodeStrict(msg, &m); err != nil {
				b.Fatal(err)
			}
			if err := foldClaims("results", m.Results, foldResult); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("1000 results DecodeResults", func(b *testing.B) {
		for b.Loop() {
			if _, err := DecodeResults(msg); err != nil {
				b.Fatal(err)
			}
		}
	})
	ev, err := json.Marshal(StateEvent(job))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("event DecodeEvent", func(b *testing.B) {
		for b.Loop() {
			if _, err := DecodeEvent(ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("1000 results decode/plain", func(b *testing.B) {
		for b.Loop() {
			var m struct {
				Results []plainResult `json:"results"`
			}
			if err := decodeStrict(msg, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
