package store

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestStateDeltas(t *testing.T) {
	t.Parallel()
	const (
		pending   = contracts.StatePending
		running   = contracts.StateRunning
		succeeded = contracts.StateSucceeded
		cancelled = contracts.StateCancelled
	)
	for _, tc := range []struct {
		name     string
		from, to contracts.JobState
		n        int
		want     []StateDelta
	}{
		{"admission", "", pending, 1, []StateDelta{{"acme", pending, 1}}},
		{"fan-out children", "", pending, 40, []StateDelta{{"acme", pending, 40}}},
		{"promote", pending, running, 1, []StateDelta{{"acme", pending, -1}, {"acme", running, 1}}},
		{"cancel cascade", pending, cancelled, 7, []StateDelta{{"acme", pending, -7}, {"acme", cancelled, 7}}},
		{"stale requeue", running, pending, 1, []StateDelta{{"acme", running, -1}, {"acme", pending, 1}}},
		{"purge", succeeded, "", 3, []StateDelta{{"acme", succeeded, -3}}},
		{"same state", running, running, 1, nil},
		{"no jobs", pending, running, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, StateDeltas("acme", tc.from, tc.to, tc.n))
		})
	}
}

func TestStateCounts(t *testing.T) {
	t.Parallel()
	c := StateCounts{}
	c.Apply(StateDeltas("acme", "", contracts.StatePending, 3)...)
	c.Apply(StateDeltas("beta", "", contracts.StatePending, 1)...)
	c.Apply(StateDeltas("acme", contracts.StatePending, contracts.StateRunning, 1)...)
	c.Apply(StateDeltas("beta", contracts.StatePending, "", 1)...)
	require.Equal(t, StateCounts{"acme": {contracts.StatePending: 2, contracts.StateRunning: 1}}, c)
	want := ZeroStates()
	want[contracts.StatePending], want[contracts.StateRunning] = 2, 1
	require.Equal(t, want, c.ByState())
	require.Equal(t, want, c.Tenant("acme"))
	require.Equal(t, ZeroStates(), c.Tenant("beta"))
}

func TestStateCountDrift(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		stored, actual StateCounts
		want           int
	}{
		{"exact", StateCounts{"a": {contracts.StatePending: 2}}, StateCounts{"a": {contracts.StatePending: 2}}, 0},
		{"empty", StateCounts{}, StateCounts{}, 0},
		{"too many", StateCounts{"a": {contracts.StatePending: 5}}, StateCounts{"a": {contracts.StatePending: 2}}, 3},
		{"too few", StateCounts{"a": {contracts.StatePending: 1}}, StateCounts{"a": {contracts.StatePending: 2}}, 1},
		{"missing counter", StateCounts{}, StateCounts{"a": {contracts.StateFailed: 4}}, 4},
		{"stale tenant", StateCounts{"gone": {contracts.StateSucceeded: 6}}, StateCounts{}, 6},
		{"negative", StateCounts{"a": {contracts.StateRunning: -2}}, StateCounts{}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, StateCountDrift(tc.stored, tc.actual))
		})
	}
}
