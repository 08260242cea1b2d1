package slots_test

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/services/worker/internal/slots"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestAdmit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		inFlight int
		limit    int
		want     bool
	}{
		{"below the limit", 0, 1, true},
		{"one below the limit", 2, 3, true},
		{"at the limit", 3, 3, false},
		{"above the limit", 4, 3, false},
		{"disabled when idle", 0, 0, true},
		{"disabled when loaded", 1000, 0, true},
		{"negative limit is disabled", 5, -1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, slots.Admit(tc.inFlight, tc.limit))
		})
	}
}

func TestTryAcquire(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		limit    int
		acquire  int // attempts in a row
		wantTook int
	}{
		{"below the limit", 3, 2, 2},
		{"exactly the limit", 3, 3, 3},
		{"above the limit", 3, 5, 3},
		{"limit one", 1, 4, 1},
		{"zero disables the limit", 0, 50, 50},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := slots.New(tc.limit)
			took := 0
			for range tc.acquire {
				if s.TryAcquire() {
					took++
				}
			}
			require.Equal(t, tc.wantTook, took)
			require.Equal(t, tc.wantTook, s.InFlight())
			require.Equal(t, max(tc.limit, 0), s.Capacity())
			if took > 0 {
				s.Release()
				require.Equal(t, tc.wantTook-1, s.InFlight())
				require.True(t, s.TryAcquire(), "a released slot is free again")
			}
		})
	}
}

func TestReleaseWithoutAcquirePanics(t *testing.T) {
	t.Parallel()
	s := slots.New(2)
	require.Panics(t, s.Release)
}

func TestConcurrentTryAcquireNeverExceedsLimit(t *testing.T) {
	t.Parallel()
	const limit, goroutines, rounds = 4, 16, 500
	s := slots.New(limit)
	var (
		wg      sync.WaitGroup
		current atomic.Int64
		peak    atomic.Int64
		taken   atomic.Int64
	)
	for range goroutines {
		wg.Go(func() {
			for range rounds {
				if !s.TryAcquire() {
					continue
				}
				taken.Add(1)
				n := current.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				assert.LessOrEqual(t, s.InFlight(), limit)
				current.Add(-1)
				s.Release()
			}
		})
	}
	wg.Wait()
	require.LessOrEqual(t, peak.Load(), int64(limit))
	require.Positive(t, taken.Load())
	require.Zero(t, s.InFlight())
}

// TestLoadCountsEveryChange: Load's change count grows with every acquire
// and release (and only then), so a reading with more changes is newer even
// when the slots in use are the same.
func TestLoadCountsEveryChange(t *testing.T) {
	t.Parallel()
	s := slots.New(1)
	n, c0 := s.Load()
	require.Equal(t, 0, n)
	require.True(t, s.TryAcquire())
	require.False(t, s.TryAcquire(), "a refused acquire changes nothing")
	n, c1 := s.Load()
	require.Equal(t, 1, n)
	require.Equal(t, c0+1, c1)
	s.Release()
	n, c2 := s.Load()
	require.Equal(t, 0, n)
	require.Equal(t, c1+1, c2, "back to the same load, but later")
}
