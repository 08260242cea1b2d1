package scheduler

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLaneOf: every report of one job goes to one lane, whatever else its
// body holds; reports of many jobs spread over the lanes; a body without a
// job id goes to lane 0.
func TestLaneOf(t *testing.T) {
	t.Parallel()
	const n = 4
	report := func(job string, pct int) []byte {
		return fmt.Appendf(nil, `{"job_id":%q,"attempt":1,"worker_id":"w1","progress":{"percent":%d}}`, job, pct)
	}
	first := laneOf(report("job-a", 10), n)
	for pct := range 100 {
		require.Equal(t, first, laneOf(report("job-a", pct), n), "one job, one lane")
	}
	used := map[int]bool{}
	for i := range 64 {
		l := laneOf(report(fmt.Sprintf("job-%d", i), 1), n)
		require.True(t, l >= 0 && l < n)
		used[l] = true
	}
	require.Len(t, used, n, "jobs spread over every lane")
	for _, bad := range []string{``, `{`, `[]`, `{"job_id":""}`, `{"job_id":7}`} {
		require.Equal(t, 0, laneOf([]byte(bad), n), bad)
	}
	require.Equal(t, 0, laneOf(report("job-a", 1), 1))
}
