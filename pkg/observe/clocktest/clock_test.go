package clocktest_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/observe/clocktest"
)

func TestClockMovesOnlyWhenTold(t *testing.T) {
	t.Parallel()
	c := clocktest.New()
	require.Equal(t, clocktest.Epoch, c.Now())
	require.Equal(t, clocktest.Epoch.Add(time.Minute), c.Advance(time.Minute))
	require.Equal(t, clocktest.Epoch.Add(time.Minute), c.Now())
	at := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	c.Set(at)
	require.Equal(t, at, c.Now())
	require.Equal(t, at, clocktest.At(at).Now())
}

func TestClockIsSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	c := clocktest.New()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				c.Advance(time.Millisecond)
				_ = c.Now()
			}
		})
	}
	wg.Wait()
	require.Equal(t, clocktest.Epoch.Add(800*time.Millisecond), c.Now())
}
