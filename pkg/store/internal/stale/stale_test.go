package stale

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// A job found by two queries is kept once, at the earlier time; the
// stalest come first, ties by id, at most limit of them.
func TestSet(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var s Set
	require.Empty(t, s.Jobs(10))
	s.Add(contracts.Job{ID: "c"}, base.Add(3*time.Second))
	s.Add(contracts.Job{ID: "b"}, base.Add(2*time.Second))
	s.Add(contracts.Job{ID: "a"}, base.Add(2*time.Second))
	s.Add(contracts.Job{ID: "c"}, base.Add(time.Second)) // found again, earlier
	s.Add(contracts.Job{ID: "b"}, base.Add(5*time.Second))
	ids := func(jobs []contracts.Job) []string {
		out := make([]string, len(jobs))
		for i, j := range jobs {
			out[i] = j.ID
		}
		return out
	}
	require.Equal(t, []string{"c", "a", "b"}, ids(s.Jobs(10)))
	require.Equal(t, []string{"c", "a"}, ids(s.Jobs(2)))
}
