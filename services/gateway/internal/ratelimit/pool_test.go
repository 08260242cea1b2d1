package ratelimit_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/services/gateway/internal/ratelimit"
)

// TestPoolShares: a key holds at most its share, the pool at most its
// size, and what is released can be taken again.
func TestPoolShares(t *testing.T) {
	t.Parallel()
	p := ratelimit.NewPool(3, 2)
	require.Equal(t, 3, p.Max())
	require.Equal(t, 2, p.KeyMax())
	require.Equal(t, ratelimit.PoolTaken, p.Take("a"))
	require.Equal(t, ratelimit.PoolTaken, p.Take("a"))
	require.Equal(t, ratelimit.PoolKeyFull, p.Take("a"), "a holds its share")
	require.Equal(t, ratelimit.PoolTaken, p.Take("b"))
	require.Equal(t, ratelimit.PoolFull, p.Take("c"), "every place is held")
	require.Equal(t, ratelimit.PoolKeyFull, p.Take("a"), "a share is checked first")
	p.Release("a")
	require.Equal(t, ratelimit.PoolTaken, p.Take("c"))
	p.Release("b")
	require.Equal(t, ratelimit.PoolTaken, p.Take("a"))

	// A share is cut to the pool; both are at least 1.
	small := ratelimit.NewPool(0, 5)
	require.Equal(t, 1, small.Max())
	require.Equal(t, 1, small.KeyMax())
}
