package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// itemsTests check the per-tenant bound on items in flight
// (store.Caps.TenantItems): a plain job holds one item, a fan-out parent
// one plus one per child until it ends.
var itemsTests = []test{
	{"TenantItemsBoundFanoutsAndJobs", testTenantItems},
	{"TenantItemsExactUnderRaces", testTenantItemsRace},
}

// admitCaps admits job under caps and returns the outcome.
func admitCaps(t *testing.T, s store.Store, job contracts.Job, caps store.Caps) store.Admission {
	t.Helper()
	_, adm, err := s.Admit(t.Context(), job, caps)
	require.NoError(t, err)
	return adm
}

func testTenantItems(t *testing.T, s store.Store) {
	ctx := t.Context()
	caps := store.Caps{TenantItems: 10}
	p, adm := admitFanout(t, s, "acme", 5, 1, caps, nil)
	require.Equal(t, store.Admitted, adm, "1 parent + 5 items = 6 of 10")
	_, adm = admitFanout(t, s, "acme", 4, 1, caps, nil)
	require.Equal(t, store.RejectedTenantItems, adm, "6 + 1 + 4 = 11 > 10")
	all, _ := listAll(t, s, store.Query{Tenant: "acme", Limit: 100})
	require.Len(t, all, 1, "a rejected fan-out writes nothing")

	var plain []contracts.Job
	for range 4 {
		j := NewJob("acme", base)
		require.Equal(t, store.Admitted, admitCaps(t, s, j, caps))
		plain = append(plain, get(t, s, j.ID))
	}
	require.Equal(t, store.RejectedTenantItems, admitCaps(t, s, NewJob("acme", base), caps), "10 of 10")
	require.Equal(t, store.Admitted, admitCaps(t, s, NewJob("acme", base), store.Caps{}), "no bound: the count goes on")
	_, adm = admitFanout(t, s, "globex", 9, 1, caps, nil)
	require.Equal(t, store.Admitted, adm, "another tenant has its own count")

	// A batch sees the items admitted before it in the batch.
	res, err := s.AdmitBatch(ctx, []store.AdmitRequest{{Job: NewJob("initech", base), Caps: caps},
		{Job: fanoutJob("initech", 8), Caps: caps, Items: items(8)}, {Job: NewJob("initech", base), Caps: caps}})
	require.NoError(t, err)
	require.Equal(t, []store.Admission{store.Admitted, store.Admitted, store.RejectedTenantItems},
		[]store.Admission{res[0].Admission, res[1].Admission, res[2].Admission})

	// A finished job gives its item back.
	finish(t, s, plain[0], contracts.StateCancelled, at(time.Second))
	require.Equal(t, store.RejectedTenantItems, admitCaps(t, s, NewJob("acme", base), caps), "the uncapped job holds it")
	finish(t, s, plain[1], contracts.StateCancelled, at(time.Second))
	require.Equal(t, store.Admitted, admitCaps(t, s, NewJob("acme", base), caps))

	// A fan-out holds its items until it ends.
	got := claimN(t, s, 10, at(2*time.Second))
	for _, c := range got {
		if c.Parent == p.ID {
			finishChild(t, s, c, contracts.StateSucceeded, at(2*time.Second))
		}
	}
	require.Equal(t, store.RejectedTenantItems, admitCaps(t, s, NewJob("acme", base), caps), "the parent still runs")
	_, _, err = s.CancelParent(ctx, p.ID, at(3*time.Second), "cancelled: by request")
	require.NoError(t, err)
	require.Equal(t, contracts.StateCancelled, get(t, s, p.ID).State)
	_, adm = admitFanout(t, s, "acme", 5, 1, caps, nil)
	require.Equal(t, store.Admitted, adm, "the ended fan-out gave its 6 items back")
	require.Equal(t, store.RejectedTenantItems, admitCaps(t, s, NewJob("acme", base), caps))

	drift, err := s.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, drift, "the items counters match the jobs")
}

// fanoutJob is a parent of tenant over n items with window 1.
func fanoutJob(tenant string, n int) contracts.Job {
	j := NewJob(tenant, base)
	j.Payload, j.Concurrency = nil, 1
	return j
}

// testTenantItemsRace: concurrent admissions never pass the bound.
func testTenantItemsRace(t *testing.T, s store.Store) {
	caps := store.Caps{TenantItems: 7}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		admitted int
	)
	for range 20 {
		wg.Go(func() {
			_, adm, err := s.Admit(t.Context(), NewJob("acme", base), caps)
			if err != nil {
				t.Error(err)
				return
			}
			if adm == store.Admitted {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Equal(t, 7, admitted)
}
