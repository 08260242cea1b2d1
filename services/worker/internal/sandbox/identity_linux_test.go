package sandbox

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAUIDIsTakenOncePerHost: two pools on one lock directory (two
// workers of a host) never hand out the same uid while it is held, and a
// freed uid is taken again.
func TestAUIDIsTakenOncePerHost(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := Range{First: 5000, Last: 5002}
	a, err := openPool(r, dir)
	require.NoError(t, err)
	b, err := openPool(r, dir)
	require.NoError(t, err)
	held := map[uint32]*os.File{}
	for i, p := range []*pool{a, b, a} {
		uid, lock, err := p.acquire()
		require.NoError(t, err, "acquire %d", i)
		require.NotContains(t, held, uid, "uid %d handed out twice", uid)
		held[uid] = lock
	}
	_, _, err = b.acquire()
	require.ErrorContains(t, err, "every uid of SLUICE_WORKER_RUN_UIDS (5000-5002) is taken")
	require.NoError(t, held[5001].Close())
	// A process another test forks holds a copy of the lock until it
	// execs (its descriptors close then): the uid comes free a moment
	// later.
	require.Eventually(t, func() bool {
		uid, lock, err := b.acquire()
		if err != nil {
			return false
		}
		require.Equal(t, uint32(5001), uid)
		require.NoError(t, lock.Close())
		return true
	}, 10*time.Second, time.Millisecond)
	for _, l := range held {
		_ = l.Close()
	}
}
