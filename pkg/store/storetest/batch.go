package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

var batchTests = []test{
	{"AdmitBatchInOrderUnderTheCaps", testAdmitBatch},
}

func testAdmitBatch(t *testing.T, s store.Store) {
	caps := store.Caps{Global: 4, Tenant: 3}
	mk := func(tenant, key string) store.AdmitRequest {
		j := NewJob(tenant, at(0))
		j.Key = key
		return store.AdmitRequest{Job: j, Caps: caps}
	}
	reqs := []store.AdmitRequest{
		mk("acme", "k1"),
		mk("acme", "k1"), // joins the job before it in the batch
		mk("acme", ""),
		mk("acme", ""),
		mk("acme", ""), // the tenant cap of 3 is reached
		mk("globex", ""),
		mk("globex", ""), // the global cap of 4 is reached
	}
	got, err := s.AdmitBatch(t.Context(), reqs)
	require.NoError(t, err)
	require.Len(t, got, len(reqs))
	want := []store.Admission{store.Admitted, store.Joined, store.Admitted, store.Admitted,
		store.RejectedTenant, store.Admitted, store.RejectedGlobal}
	for i, r := range got {
		require.Equal(t, want[i], r.Admission, "job %d", i)
	}
	require.Equal(t, got[0].Job.ID, got[1].Job.ID, "joined the batch's own job")
	for _, i := range []int{0, 2, 3, 5} {
		requireJob(t, get(t, s, reqs[i].Job.ID), got[i].Job)
	}
	requireMissing(t, s, reqs[4].Job.ID)
	requireMissing(t, s, reqs[6].Job.ID)
	c := stats(t, s)
	require.Equal(t, 4, c.Active())
	require.Equal(t, map[string]int{"acme": 3, "globex": 1}, c.TenantActive)

	// The batch's jobs queue in order, fairly with others.
	claimed, err := s.Claim(t.Context(), store.ClaimRequest{Now: at(time.Second), Slots: map[string][]string{"test.kind": Slots("w1", 2)}})
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	require.ElementsMatch(t, []string{reqs[0].Job.ID, reqs[5].Job.ID}, ids(claimed), "each tenant's first job first")
	for _, j := range claimed {
		require.Equal(t, contracts.StateRunning, j.State)
	}
}
