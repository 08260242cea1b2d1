package ratelimit_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/pkg/bus/bustest"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe/clocktest"
	"github.com/sluicehq/sluice/services/gateway/internal/ratelimit"
)

func TestSharedCountsAndTakes(t *testing.T) {
	t.Parallel()
	c := clocktest.New()
	l := ratelimit.New(1, 10, ratelimit.Options{Now: c.Now, Shared: true})
	require.Nil(t, l.Drain())
	for range 3 {
		ok, _ := l.Allow("a")
		require.True(t, ok)
	}
	ok, _ := l.Allow("b")
	require.True(t, ok)
	require.Equal(t, map[string]int{"a": 3, "b": 1}, l.Drain())
	require.Nil(t, l.Drain(), "a drain starts counting again")

	// What another replica let through comes off the bucket, and is not
	// counted as this replica's.
	l.Take("a", 5)
	require.InDelta(t, 2, l.Tokens("a"), 0.001)
	l.Take("a", 4)
	require.InDelta(t, -2, l.Tokens("a"), 0.001, "a bucket may go below empty")
	ok, wait := l.Allow("a")
	require.False(t, ok)
	require.Equal(t, 3*time.Second, wait, "the debt is paid back at the rate")
	require.Nil(t, l.Drain())
	l.Take("c", 1000)
	require.InDelta(t, 0, l.Tokens("c"), 0.001, "a debt is at most one burst")

	// An unshared limiter counts nothing.
	u := ratelimit.New(1, 10, ratelimit.Options{Now: c.Now})
	u.Allow("a")
	require.Nil(t, u.Drain())
	var nilLimiter *ratelimit.Limiter
	nilLimiter.Take("a", 1)
	require.Nil(t, nilLimiter.Drain())
}

// TestSharerKeepsReplicasWithinOneBucket runs two replicas on one NATS
// server: what one lets through comes off the other's bucket.
func TestSharerKeepsReplicasWithinOneBucket(t *testing.T) {
	// Registered first, checked last: after the server and the
	// connections are closed.
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	srv := bustest.Start(t)
	c := clocktest.New() // frozen: no refill during the test
	replica := func(id string) (*ratelimit.Limiter, *nats.Conn) {
		nc, _ := srv.Connect(id)
		l := ratelimit.New(1, 10, ratelimit.Options{Now: c.Now, Shared: true})
		s := ratelimit.NewSharer(nc, id, 10*time.Millisecond,
			map[string]*ratelimit.Limiter{contracts.LimitTenantRate: l, contracts.LimitIPRate: nil}, zerolog.Nop())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			require.NoError(t, <-done)
		})
		return l, nc
	}
	a, nc := replica("gw-a")
	b, _ := replica("gw-b")
	// Wait until both replicas listen: a report of a key nobody uses
	// reaches b.
	for i := 0; b.Tokens("probe") > 9.5; i++ {
		require.Less(t, i, 500, "gw-b never heard gw-a")
		a.Allow("probe")
		time.Sleep(10 * time.Millisecond)
	}
	for range 7 {
		ok, _ := a.Allow("acme")
		require.True(t, ok)
	}
	require.Eventually(t, func() bool { return b.Tokens("acme") < 3.5 }, 5*time.Second, 5*time.Millisecond)
	require.InDelta(t, 3, b.Tokens("acme"), 0.001, "b takes exactly what a let through")
	for range 3 {
		ok, _ := b.Allow("acme")
		require.True(t, ok)
	}
	ok, _ := b.Allow("acme")
	require.False(t, ok, "the two replicas together let through one burst")
	require.Eventually(t, func() bool { return a.Tokens("acme") < 0.5 }, 5*time.Second, 5*time.Millisecond)
	ok, _ = a.Allow("acme")
	require.False(t, ok)

	// A replica ignores its own reports and bad ones.
	before := a.Tokens("acme")
	own, err := json.Marshal(contracts.RateUsage{Gateway: "gw-a", Used: map[string]map[string]int{contracts.LimitTenantRate: {"acme": 5}}})
	require.NoError(t, err)
	require.NoError(t, nc.Publish(contracts.SubjectRateUsage, own))
	require.NoError(t, nc.Publish(contracts.SubjectRateUsage, []byte(`{"gateway":"x","used":{"tenant_rate":{"acme":-50}}}`)))
	require.NoError(t, nc.Flush())
	// A good report from a third replica after them proves they were read.
	third, err := json.Marshal(contracts.RateUsage{Gateway: "gw-c", Used: map[string]map[string]int{contracts.LimitTenantRate: {"other": 1}}})
	require.NoError(t, err)
	require.NoError(t, nc.Publish(contracts.SubjectRateUsage, third))
	require.Eventually(t, func() bool { return a.Tokens("other") < 9.5 }, 5*time.Second, 5*time.Millisecond)
	require.InDelta(t, before, a.Tokens("acme"), 0.001)
}
