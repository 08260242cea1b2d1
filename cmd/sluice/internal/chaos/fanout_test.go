package chaos

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/sqlite"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// TestCheckFanoutsFindsAWindowPassedAndAMiscount: the checker measures a
// parent's children's live runs against its window, and its counts
// against its children.
func TestCheckFanoutsFindsAWindowPassedAndAMiscount(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "s.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	base := time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)
	p := storetest.NewJob("acme", base)
	p.Payload, p.Concurrency = nil, 2
	items := []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`2`), json.RawMessage(`3`)}
	res, err := st.AdmitBatch(t.Context(), []store.AdmitRequest{{Job: p, Items: items}})
	require.NoError(t, err)
	parent := res[0].Job

	run := func(i int, from, to time.Duration) attemptRun {
		return attemptRun{JobID: contracts.ChildID(parent.ID, i), Start: base.Add(from), LiveEnd: base.Add(to)}
	}
	// Two at a time: within the window. The parent is still running: miscounted.
	rep, err := checkFanouts(t.Context(), st, []contracts.Job{parent}, []attemptRun{run(0, 0, 10), run(1, 5, 20), run(2, 10, 30)})
	require.NoError(t, err)
	require.Equal(t, 2, rep.MaxLive)
	require.Empty(t, rep.OverWindow)
	require.Len(t, rep.Miscounted, 1)
	require.Equal(t, 3, rep.Children)

	// Three at once: over the window.
	rep, err = checkFanouts(t.Context(), st, []contracts.Job{parent}, []attemptRun{run(0, 0, 10), run(1, 5, 20), run(2, 6, 30)})
	require.NoError(t, err)
	require.Equal(t, 3, rep.MaxLive)
	require.Len(t, rep.OverWindow, 1)
	_, ok := parentOf(parent.ID+"x", []contracts.Job{parent})
	require.False(t, ok)
}
