package sqlite

import (
	"testing"

	"github.com/stretchr/testify/require"
	sqlite3 "modernc.org/sqlite/lib"
)

// TestReserveKeepsFreeSlots: after arm, an object of each reserved class
// that the engine allocates and frees again lands on a mapping the reserve
// holds, so freeing it unmaps nothing; release frees what it holds once,
// and arm after it does nothing. Not parallel: the engine's allocator is
// the process's, and another test's allocations between arm and the
// check could take the slots it looks at.
func TestReserveKeepsFreeSlots(t *testing.T) {
	r := newReserve()
	for range 3 {
		r.arm()
		for i, c := range reserveClasses {
			require.NotEmpty(t, r.held[i], "class of %d bytes", c.size)
			// What a B-tree balance asks for: a page buffer, a scratch area.
			p := sqlite3.Xsqlite3_malloc(r.tls, int32(c.size-512+8))
			require.NotZero(t, p)
			require.True(t, r.holds(i, p), "an object of %d bytes on a mapping the reserve holds", c.size)
			sqlite3.Xsqlite3_free(r.tls, p)
		}
	}
	r.release()
	r.release()
	r.arm()
	for i := range reserveClasses {
		require.Empty(t, r.held[i])
	}
}
