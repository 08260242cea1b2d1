package tally

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/store"
)

func TestJobTable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		jobs bool
	}{
		{"jobs", true},
		{"counters", false},
		{"job_counts", false},
		{"locks", false},
		{"", false},
	} {
		require.Equal(t, tc.jobs, JobTable(tc.name), tc.name)
	}
}

// A transaction's counts added to a tally read back as they were added,
// and Sub gives what was written between two readings.
func TestWriteTallyAddAndSub(t *testing.T) {
	t.Parallel()
	var tally Tally
	tally.Wrote(store.WriteAdmit)
	tally.WroteRows(store.WriteAdmit, 1)
	tally.WroteSide(2)
	tally.Committed()
	before := tally.WriteCounts()

	var tx store.WriteCounts
	tx.Writes[store.WriteClaim] = 1
	tx.Rows[store.WriteClaim] = 256
	tx.Writes[store.WriteHeartbeat] = 1
	tx.Rows[store.WriteHeartbeat] = 100
	tx.SideRows = 3
	tx.Commits = 1
	tally.Add(tx)
	tally.WroteRows(store.WriteOp(-1), 5) // names no operation: counts as other

	d := tally.WriteCounts().Sub(before)
	tx.Rows[store.WriteOther] = 5
	require.Equal(t, tx, d)
	require.Equal(t, uint64(2), d.Total())
	require.Equal(t, uint64(361), d.RowsTotal())
	require.Equal(t, uint64(1), before.RowsTotal())
}
