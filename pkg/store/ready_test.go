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

func TestSlots(t *testing.T) {
	t.Parallel()
	type take struct {
		kind string
		want string // "" = none left
	}
	tests := []struct {
		name    string
		r       ClaimRequest
		running map[string]int
		takes   []take
	}{
		{"in order, each entry a slot", ClaimRequest{Slots: map[string][]string{"a": {"w1", "w1", "w2"}}}, nil,
			[]take{{"a", "w1"}, {"a", "w1"}, {"a", "w2"}, {"a", ""}}},
		{"a worker's room is shared by its kinds", ClaimRequest{Slots: map[string][]string{"a": {"w1", "w2"}, "b": {"w1"}}, Room: map[string]int{"w1": 1, "w2": 1}}, nil,
			[]take{{"b", "w1"}, {"a", "w2"}, {"a", ""}, {"b", ""}}},
		{"bounded by capacity less running", ClaimRequest{Slots: map[string][]string{"a": {"w1", "w1", "w1"}}, Capacity: map[string]int{"w1": 3}}, map[string]int{"w1": 2},
			[]take{{"a", "w1"}, {"a", ""}}},
		{"capacity 0 is no bound", ClaimRequest{Slots: map[string][]string{"a": {"w1", "w1"}}, Capacity: map[string]int{"w1": 0}}, map[string]int{"w1": 9},
			[]take{{"a", "w1"}, {"a", "w1"}, {"a", ""}}},
		{"more running than capacity: none", ClaimRequest{Slots: map[string][]string{"a": {"w1"}}, Capacity: map[string]int{"w1": 2}}, map[string]int{"w1": 3},
			[]take{{"a", ""}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			counted := map[string]int{}
			s, err := tc.r.NewSlots(func(w string) (int, error) { counted[w]++; return tc.running[w], nil })
			require.NoError(t, err)
			for i, tk := range tc.takes {
				w, ok := s.Peek(tk.kind)
				require.Equal(t, tk.want, w, "take %d", i)
				require.Equal(t, tk.want != "", ok)
				if ok {
					s.Take(tk.kind)
				}
			}
			for w, n := range counted {
				require.Equal(t, 1, n, "worker %s counted once", w)
			}
		})
	}
}
