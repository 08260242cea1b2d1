package sqlite

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// TestConformanceStaged runs the suite on a store that stages every
// fan-out of more than two items, two children per write transaction.
func TestConformanceStaged(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := Open(context.Background(), filepath.Join(t.TempDir(), "sluice.db"), WithFanoutChunk(2))
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		return skewable{s}
	})
}

// TestStagedFanoutNotAdmittedLeavesNothing: the staged children of a
// fan-out the caps reject, or that joins another by its key, are deleted
// again; an admitted one has all its children, the first window released.
func TestStagedFanoutNotAdmittedLeavesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "sluice.db"), WithFanoutChunk(3))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	items := make([]json.RawMessage, 10)
	for i := range items {
		items[i] = json.RawMessage(`{"i":1}`)
	}
	parent := func(key string) contracts.Job {
		p := storetest.NewJob("acme", time.Now())
		p.Payload, p.Concurrency, p.Key = nil, 2, key
		return p
	}
	rows := func() int {
		var n int
		require.NoError(t, s.r.QueryRowContext(ctx, `SELECT count(*) FROM jobs`).Scan(&n))
		return n
	}
	res, err := s.AdmitBatch(ctx, []store.AdmitRequest{{Job: parent(""), Caps: store.Caps{TenantItems: 10}, Items: items}})
	require.NoError(t, err)
	require.Equal(t, store.RejectedTenantItems, res[0].Admission)
	require.Zero(t, rows(), "the rejected fan-out's children are gone")

	first := parent("k")
	res, err = s.AdmitBatch(ctx, []store.AdmitRequest{{Job: first, Items: items}, {Job: parent("k"), Items: items}})
	require.NoError(t, err)
	require.Equal(t, []store.Admission{store.Admitted, store.Joined}, []store.Admission{res[0].Admission, res[1].Admission})
	require.Equal(t, 11, rows(), "one parent and its ten children; the joined one left nothing")
	got, err := s.Claim(ctx, store.ClaimRequest{Now: time.Now(), Slots: map[string][]string{"test.kind": storetest.Slots("w1", 10)}})
	require.NoError(t, err)
	require.Len(t, got, 2, "the window is released, the rest held")
}
