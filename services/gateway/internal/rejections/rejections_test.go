package rejections

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestRecentIsNewestFirstAndBounded(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	l := New(3, nil)
	require.Empty(t, l.Recent("a", true))
	require.NotNil(t, l.Recent("a", true))
	for i := range 5 {
		l.Record(contracts.Rejection{At: base.Add(time.Duration(i) * time.Second), Tenant: fmt.Sprint("t", i), Limit: contracts.LimitGlobal})
	}
	got := l.Recent("", true)
	require.Len(t, got, 3)
	require.Equal(t, []string{"t4", "t3", "t2"}, []string{got[0].Tenant, got[1].Tenant, got[2].Tenant})
	require.Equal(t, base.Add(4*time.Second), got[0].At)
}

func TestRecentFiltersByTenant(t *testing.T) {
	t.Parallel()
	l := New(10, nil)
	l.Record(contracts.Rejection{Tenant: "a", Limit: contracts.LimitTenant})
	l.Record(contracts.Rejection{Tenant: "b", Limit: contracts.LimitTenantRate})
	l.Record(contracts.Rejection{Limit: contracts.LimitIPRate}) // before authentication
	l.Record(contracts.Rejection{Tenant: "a", Limit: contracts.LimitGlobal})

	a := l.Recent("a", false)
	require.Len(t, a, 2)
	require.Equal(t, contracts.LimitGlobal, a[0].Limit)
	require.Equal(t, contracts.LimitTenant, a[1].Limit)
	require.Len(t, l.Recent("b", false), 1)
	require.Empty(t, l.Recent("c", false))
	require.Len(t, l.Recent("", true), 4)
}

func TestRecordStampsTheTime(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	l := New(0, func() time.Time { return at })
	l.Record(contracts.Rejection{Tenant: "a", Limit: contracts.LimitGlobal})
	l.Record(contracts.Rejection{Tenant: "b", Limit: contracts.LimitGlobal})
	got := l.Recent("", true)
	require.Len(t, got, 1, "a size below one keeps one")
	require.Equal(t, "b", got[0].Tenant)
	require.Equal(t, at, got[0].At)
}

func TestNilLogIsANoOp(t *testing.T) {
	t.Parallel()
	var l *Log
	l.Record(contracts.Rejection{Tenant: "a"})
	require.NotNil(t, l.Recent("a", true))
	require.Empty(t, l.Recent("a", true))
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	l := New(contracts.MaxRecentRejections, nil)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				l.Record(contracts.Rejection{Tenant: fmt.Sprint("t", g), Limit: contracts.LimitGlobal})
				_ = l.Recent("t0", false)
			}
		}()
	}
	wg.Wait()
	require.Len(t, l.Recent("", true), contracts.MaxRecentRejections)
}
