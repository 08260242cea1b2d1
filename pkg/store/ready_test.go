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
