package cli

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// TestBatchChunks: a batch file goes in requests of at most
// contracts.MaxBatchJobs jobs and maxBytes bytes of body, in order.
func TestBatchChunks(t *testing.T) {
	t.Parallel()
	lines := func(sizes ...int) []batchLine {
		out := make([]batchLine, len(sizes))
		for i, s := range sizes {
			out[i] = batchLine{n: i + 1, size: s}
		}
		return out
	}
	many := make([]int, 2*contracts.MaxBatchJobs+1)
	for i := range many {
		many[i] = 10
	}
	for _, tc := range []struct {
		name     string
		sizes    []int
		maxBytes int
		want     []int // jobs per request
	}{
		{"one", []int{10}, 100, []int{1}},
		{"all fit", []int{10, 10, 10}, batchEnvelope + 32, []int{3}},
		{"one byte over", []int{10, 10, 10}, batchEnvelope + 31, []int{2, 1}},
		{"a line over the limit goes alone", []int{10, 200, 10}, 100, []int{1, 1, 1}},
		{"by count", many, 1 << 20, []int{contracts.MaxBatchJobs, contracts.MaxBatchJobs, 1}},
		{"by bytes", []int{400_000, 400_000, 400_000}, maxBatchBytes, []int{2, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := lines(tc.sizes...)
			var got []int
			next := 1
			for _, chunk := range batchChunks(in, tc.maxBytes) {
				got = append(got, len(chunk))
				body := batchEnvelope + len(chunk) - 1
				for _, l := range chunk {
					require.Equal(t, next, l.n, "in order")
					next++
					body += l.size
				}
				require.True(t, body <= tc.maxBytes || len(chunk) == 1, "a body of %d bytes", body)
			}
			require.Equal(t, tc.want, got)
		})
	}
}
