package sqlite

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadyQueryWalksTheIndex: the claim's read of the ready queue has no
// LIMIT (readyIn stops after its page), so it must find rows in ready
// order on the index alone: a sort would read every ready job of the
// kind before the first row.
func TestReadyQueryWalksTheIndex(t *testing.T) {
	t.Parallel()
	s := openTest(t, filepath.Join(t.TempDir(), "sluice.db"))
	text := queryPlan(t, s, readyQuery)
	require.Contains(t, text, "USING INDEX jobs_ready_queue (kind=?)")
	require.NotContains(t, text, "TEMP B-TREE")
	require.NotContains(t, readyQuery, "LIMIT", "a bound LIMIT makes the statement prepare itself again when its value changes")
}
