package ratelimit_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/observe/clocktest"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/services/gateway/internal/ratelimit"
)

// clock is a settable test clock.
func TestBurstThenDelay(t *testing.T) {
	t.Parallel()
	c := clocktest.New()
	l := ratelimit.New(2, 5, ratelimit.Options{Now: c.Now})
	for i := range 5 {
		ok, d := l.Allow("a")
		require.True(t, ok, i)
		require.Zero(t, d)
	}
	ok, d := l.Allow("a")
	require.False(t, ok)
	require.Equal(t, 500*time.Millisecond, d)
	// A refused request takes no token: the delay does not grow.
	ok, d = l.Allow("a")
	require.False(t, ok)
	require.Equal(t, 500*time.Millisecond, d)
	// Another key has its own bucket.
	ok, _ = l.Allow("b")
	require.True(t, ok)
	c.Advance(500 * time.Millisecond)
	ok, _ = l.Allow("a")
	require.True(t, ok)
	ok, _ = l.Allow("a")
	require.False(t, ok)
}

func TestDisabled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rate  float64
		burst int
	}{{0, 10}, {-1, 10}, {5, 0}} {
		l := ratelimit.New(tc.rate, tc.burst, ratelimit.Options{})
		require.Nil(t, l, "%v", tc)
		for range 1000 {
			ok, d := l.Allow("k")
			require.True(t, ok)
			require.Zero(t, d)
		}
		require.Zero(t, l.Len())
	}
}

func TestBoundedUnderManyKeys(t *testing.T) {
	t.Parallel()
	c := clocktest.New()
	const maxKeys = 64
	l := ratelimit.New(1, 1, ratelimit.Options{MaxKeys: maxKeys, Idle: time.Minute, Now: c.Now})
	for i := range 100_000 {
		ok, _ := l.Allow(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255))
		require.True(t, ok, "a new key starts with a full bucket")
		require.LessOrEqual(t, l.Len(), maxKeys)
	}
	require.Equal(t, maxKeys, l.Len())

	// A key in active use is kept while others churn through the map: it is
	// the most recently used, so it is never the one evicted.
	ok, _ := l.Allow("hot")
	require.True(t, ok)
	for i := range 10 * maxKeys {
		ok, _ = l.Allow("hot")
		require.False(t, ok, "hot must stay limited (its bucket survives)")
		l.Allow(fmt.Sprintf("churn-%d", i%(maxKeys/2)))
	}
	require.LessOrEqual(t, l.Len(), maxKeys)
}

func TestIdleKeysEvicted(t *testing.T) {
	t.Parallel()
	c := clocktest.New()
	l := ratelimit.New(1, 1, ratelimit.Options{MaxKeys: 1000, Idle: time.Minute, Now: c.Now})
	for i := range 500 {
		l.Allow(fmt.Sprint("old-", i))
	}
	require.Equal(t, 500, l.Len())
	c.Advance(30 * time.Second)
	l.Allow("recent")
	require.Equal(t, 501, l.Len(), "nothing idle for a minute yet")
	c.Advance(45 * time.Second)
	l.Allow("new")
	require.Equal(t, 2, l.Len(), "the old keys are gone, recent and new stay")
}

func TestConcurrent(t *testing.T) {
	t.Parallel()
	l := ratelimit.New(0.001, 50, ratelimit.Options{MaxKeys: 16})
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if ok, _ := l.Allow("shared"); ok {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
				l.Allow(fmt.Sprint(g, "-", i%4))
			}
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, l.Len(), 16)
	// "shared" may be evicted under churn and start again with a full
	// bucket, so only its first burst is certain.
	require.GreaterOrEqual(t, allowed, 50)
}

// TestAllowNTakesOneTokenPerItem: a request costing n takes n tokens at
// once, or none; one costing more than the burst is never allowed and
// says so with no wait; what is taken is shared as n.
func TestAllowNTakesOneTokenPerItem(t *testing.T) {
	t.Parallel()
	c := clocktest.New()
	l := ratelimit.New(10, 100, ratelimit.Options{Now: c.Now, Shared: true})
	require.Equal(t, 100, l.Burst())
	ok, _ := l.AllowN("a", 60)
	require.True(t, ok)
	ok, wait := l.AllowN("a", 60)
	require.False(t, ok, "40 left")
	require.Equal(t, 2*time.Second, wait, "20 more tokens at 10/s")
	ok, wait = l.AllowN("a", 101)
	require.False(t, ok)
	require.Zero(t, wait, "never: more than the burst")
	ok, _ = l.AllowN("a", 40)
	require.True(t, ok)
	require.Equal(t, map[string]int{"a": 100}, l.Drain())
	var none *ratelimit.Limiter
	ok, _ = none.AllowN("a", 1_000_000)
	require.True(t, ok, "a nil limiter allows everything")
}

// TestReservePaces: Reserve always takes what it is asked, however few
// tokens the bucket holds, and says how long the caller must wait before
// spending them; a request larger than the burst queues as several.
func TestReservePaces(t *testing.T) {
	t.Parallel()
	c := clocktest.New()
	l := ratelimit.New(10, 20, ratelimit.Options{Now: c.Now})
	require.Zero(t, l.Reserve("a", 15), "within the burst")
	require.Equal(t, time.Second, l.Reserve("a", 15), "10 missing at 10/s")
	require.Equal(t, 5*time.Second, l.Reserve("a", 40), "40 more: 50 owed in all")
	require.Zero(t, l.Reserve("b", 20), "another key has its own bucket")
	c.Advance(5 * time.Second)
	require.Equal(t, 100*time.Millisecond, l.Reserve("a", 1), "the debt was paid back at the rate")
	require.Zero(t, l.Reserve("a", 0))
	var none *ratelimit.Limiter
	require.Zero(t, none.Reserve("a", 1<<30), "a nil limiter never waits")
}
