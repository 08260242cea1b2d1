package store

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestDecideAdmission(t *testing.T) {
	t.Parallel()
	plain := contracts.Job{ID: "j", Tenant: "a"}
	parent := contracts.Job{ID: "p", Tenant: "a", Concurrency: 3, Children: &contracts.ChildCounts{Total: 10}}
	counters := func(global, tenant, items int) func(string) int {
		return func(scope string) int {
			return map[string]int{GlobalScope: global, TenantScope("a"): tenant, ItemsScope("a"): items}[scope]
		}
	}
	tests := []struct {
		name   string
		job    contracts.Job
		caps   Caps
		active func(string) int
		want   Admission
	}{
		{"no caps", plain, Caps{}, counters(1e6, 1e6, 1e6), Admitted},
		{"room everywhere", plain, Caps{Global: 10, Tenant: 5, TenantItems: 5}, counters(9, 4, 4), Admitted},
		{"the global cap is full", plain, Caps{Global: 10, Tenant: 5}, counters(10, 0, 0), RejectedGlobal},
		{"the tenant's cap is full", plain, Caps{Global: 10, Tenant: 5}, counters(3, 5, 0), RejectedTenant},
		{"the tenant's items are full", plain, Caps{TenantItems: 5}, counters(0, 0, 5), RejectedTenantItems},
		{"global is checked first", plain, Caps{Global: 1, Tenant: 1, TenantItems: 1}, counters(1, 1, 1), RejectedGlobal},
		{"a parent takes its window's slots", parent, Caps{Global: 10}, counters(7, 0, 0), Admitted},
		{"a parent's window does not fit", parent, Caps{Global: 10}, counters(8, 0, 0), RejectedGlobal},
		{"a parent's items do not fit", parent, Caps{TenantItems: 20}, counters(0, 0, 10), RejectedTenantItems},
		{"a job larger than the cap never fits", parent, Caps{Tenant: 2}, counters(0, 0, 0), RejectedTenant},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, DecideAdmission(tt.job, tt.caps, tt.active))
		})
	}
}

func TestCapChecks(t *testing.T) {
	t.Parallel()
	parent := contracts.Job{ID: "p", Tenant: "a", Concurrency: 3, Children: &contracts.ChildCounts{Total: 10}}
	got := Caps{Global: 100, Tenant: 10, TenantItems: 50}.CapChecks(parent)
	require.Equal(t, []CapCheck{
		{Scope: GlobalScope, Limit: 100, N: 3, Rejection: RejectedGlobal},
		{Scope: TenantScope("a"), Limit: 10, N: 3, Rejection: RejectedTenant},
		{Scope: ItemsScope("a"), Limit: 50, N: contracts.JobItems(10), Rejection: RejectedTenantItems},
	}, got)
	require.True(t, CapCheck{Limit: 0, N: 5}.Fits(1e9))
	require.True(t, CapCheck{Limit: 5, N: 2}.Fits(3))
	require.False(t, CapCheck{Limit: 5, N: 2}.Fits(4))
}
