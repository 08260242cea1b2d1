package picker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/bus/roster"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// TestMinVersionSkipsOlderWorkers: with a minimum version, an older worker
// (or one announcing none) gets no offer and counts for no room.
func TestMinVersionSkipsOlderWorkers(t *testing.T) {
	t.Parallel()
	r := roster.New(time.Now)
	for id, v := range map[string]string{"w-old": "0.11.9", "w-new": "0.12.0", "w-none": ""} {
		r.Observe(contracts.Announce{WorkerID: id, Kinds: []string{"k"}, Capacity: 2, Version: v, IntervalMS: 1000})
	}
	p := New(MinVersion(r, "0.12"), 0)
	require.Equal(t, []string{"w-new"}, p.Candidates("k", 10))
	require.Equal(t, map[string]int{"k": 2}, p.Room())
	require.Equal(t, []string{"w-new", "w-new"}, p.Slots("k", 10), "only the new worker's slots")
}
