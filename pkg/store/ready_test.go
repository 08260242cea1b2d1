package store

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKeySlots(t *testing.T) {
	t.Parallel()
	counted := map[string]int{}
	slots := NewKeySlots(func(tenant, key string) (int, error) {
		counted[tenant+"/"+key]++
		if key == "broken" {
			return 0, errors.New("store down")
		}
		return map[string]int{"acme/db": 1}[tenant+"/"+key], nil
	})
	take := func(tenant, key string, limit int) bool {
		ok, err := slots.Take(tenant, key, limit)
		require.NoError(t, err)
		return ok
	}
	require.True(t, take("acme", "", 1), "no key, no limit")
	require.True(t, take("acme", "db", 2), "one holder, limit 2")
	require.False(t, take("acme", "db", 2), "now two")
	require.True(t, take("globex", "db", 2), "keys are per tenant")
	slots.Give("acme", "db")
	require.True(t, take("acme", "db", 2), "a slot given back is free again")
	require.Equal(t, map[string]int{"acme/db": 1, "globex/db": 1}, counted, "each key counted once")
	_, err := slots.Take("acme", "broken", 1)
	require.Error(t, err)
}

func TestFitSlots(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		slots    map[string][]string
		capacity map[string]int
		running  map[string]int
		want     map[string][]string
	}{
		{"no capacities: as asked", map[string][]string{"a": {"w1", "w1"}}, nil, map[string]int{"w1": 9},
			map[string][]string{"a": {"w1", "w1"}}},
		{"bounded by capacity less running", map[string][]string{"a": {"w1", "w1", "w1", "w2"}}, map[string]int{"w1": 3, "w2": 1},
			map[string]int{"w1": 1}, map[string][]string{"a": {"w1", "w1", "w2"}}},
		{"room shared by kinds, first kind first", map[string][]string{"a": {"w1", "w1"}, "b": {"w1", "w2"}},
			map[string]int{"w1": 2, "w2": 1}, nil, map[string][]string{"a": {"w1", "w1"}, "b": {"w2"}}},
		{"0 is no bound", map[string][]string{"a": {"w1", "w1", "w1"}}, map[string]int{"w1": 0}, map[string]int{"w1": 5},
			map[string][]string{"a": {"w1", "w1", "w1"}}},
		{"more running than capacity: none", map[string][]string{"a": {"w1"}}, map[string]int{"w1": 2}, map[string]int{"w1": 3},
			map[string][]string{"a": nil}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := ClaimRequest{Slots: tc.slots, Capacity: tc.capacity}
			_, kinds, _ := r.Plan()
			asked := map[string]int{}
			got, err := r.FitSlots(kinds, func(w string) (int, error) { asked[w]++; return tc.running[w], nil })
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			for w, n := range asked {
				require.Equal(t, 1, n, "worker %s counted once", w)
			}
		})
	}
}
