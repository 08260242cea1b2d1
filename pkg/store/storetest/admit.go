package storetest

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

var admitTests = []test{
	{"AdmitGetRoundTrip", testAdmitGetRoundTrip},
	{"AdmitRefusesNonPending", testAdmitRefusesNonPending},
	{"AdmitDuplicateID", testAdmitDuplicateID},
	{"AdmitGlobalCap", testAdmitGlobalCap},
	{"AdmitTenantCap", testAdmitTenantCap},
	{"AdmitZeroCapsMeanNone", testAdmitZeroCaps},
	{"DedupJoins", testDedupJoins},
	{"DedupKeyFreedByFinish", testDedupKeyFreedByFinish},
	{"DedupPerTenant", testDedupPerTenant},
	{"ConcurrentAdmitGlobalCap", testConcurrentAdmitGlobalCap},
	{"ConcurrentAdmitTenantCap", testConcurrentAdmitTenantCap},
	{"ConcurrentDedup", testConcurrentDedup},
}

func testAdmitGetRoundTrip(t *testing.T, s store.Store) {
	ctx := t.Context()
	created := base.In(time.FixedZone("UTC+5", 5*3600))
	job := contracts.Job{
		ID:               "job-round-trip",
		Tenant:           "acme",
		Kind:             "email.send",
		Payload:          json.RawMessage(`{"to":"a@example.com","n":[1,2,3],"nested":{"ok":true}}`),
		Key:              "order-42",
		Priority:         7,
		MaxAttempts:      4,
		State:            contracts.StatePending,
		CreatedAt:        created,
		UpdatedAt:        created.Add(time.Millisecond),
		DispatchDeadline: created.Add(90 * time.Second),
		NextDispatchAt:   ptr(created.Add(time.Second)),
		RunAt:            ptr(created.Add(time.Second)),
		ConcurrencyKey:   "customer-7",
		ConcurrencyLimit: 2,
	}
	got, adm, err := s.Admit(ctx, job, store.Caps{Global: 10, Tenant: 10})
	require.NoError(t, err)
	require.Equal(t, store.Admitted, adm)
	requireJob(t, job, got)
	for name, tm := range map[string]*time.Time{
		"created_at": &got.CreatedAt, "updated_at": &got.UpdatedAt,
		"dispatch_deadline": &got.DispatchDeadline, "next_dispatch_at": got.NextDispatchAt,
	} {
		requireUTC(t, name, tm)
	}

	fetched := get(t, s, job.ID)
	requireJob(t, got, fetched)
	requireUTC(t, "created_at", &fetched.CreatedAt)

	// A job without payload or key round-trips as empty.
	bare := NewJob("acme", at(time.Second))
	bare.Payload = nil
	got = admit(t, s, bare)
	requireJob(t, bare, got)
	requireJob(t, bare, get(t, s, bare.ID))

	_, err = s.Get(ctx, "no-such-job")
	require.ErrorIs(t, err, store.ErrNotFound)
}

func testAdmitRefusesNonPending(t *testing.T, s store.Store) {
	before := stats(t, s)
	running := NewJob("acme", base)
	running.State = contracts.StateRunning
	_, _, err := s.Admit(t.Context(), running, store.Caps{})
	require.Error(t, err)
	requireMissing(t, s, running.ID)

	attempted := NewJob("acme", base)
	attempted.Claim = 1
	_, _, err = s.Admit(t.Context(), attempted, store.Caps{})
	require.Error(t, err)
	requireMissing(t, s, attempted.ID)
	require.Equal(t, before, stats(t, s))
}

func testAdmitDuplicateID(t *testing.T, s store.Store) {
	first := admitNew(t, s, "acme", base)
	before := stats(t, s)
	dup := NewJob("other", at(time.Second))
	dup.ID = first.ID
	_, _, err := s.Admit(t.Context(), dup, store.Caps{})
	require.Error(t, err)
	requireJob(t, first, get(t, s, first.ID))
	require.Equal(t, before, stats(t, s))

	// The store is still fine afterwards.
	admitNew(t, s, "acme", at(time.Second))
	require.Equal(t, 2, stats(t, s).Active())
	drift, err := s.Reconcile(t.Context())
	require.NoError(t, err)
	require.Zero(t, drift)
}

func testAdmitGlobalCap(t *testing.T, s store.Store) {
	ctx := t.Context()
	caps := store.Caps{Global: 3, Tenant: 2}
	for i, tenant := range []string{"a", "a", "b"} {
		_, adm, err := s.Admit(ctx, NewJob(tenant, at(time.Duration(i)*time.Second)), caps)
		require.NoError(t, err)
		require.Equal(t, store.Admitted, adm)
	}
	before := stats(t, s)
	require.Equal(t, 3, before.Active())

	// Tenant c is under its own cap but the store is full.
	job := NewJob("c", at(time.Minute))
	got, adm, err := s.Admit(ctx, job, caps)
	require.NoError(t, err)
	require.Equal(t, store.RejectedGlobal, adm)
	require.Empty(t, got.ID)
	requireMissing(t, s, job.ID)

	// Tenant a is at its cap too: the global cap is checked first.
	job = NewJob("a", at(time.Minute))
	_, adm, err = s.Admit(ctx, job, caps)
	require.NoError(t, err)
	require.Equal(t, store.RejectedGlobal, adm)
	requireMissing(t, s, job.ID)

	require.Equal(t, before, stats(t, s))
	drift, err := s.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, drift)
}

func testAdmitTenantCap(t *testing.T, s store.Store) {
	ctx := t.Context()
	caps := store.Caps{Tenant: 2}
	admitted := 0
	for i := range 5 {
		_, adm, err := s.Admit(ctx, NewJob("a", at(time.Duration(i)*time.Second)), caps)
		require.NoError(t, err)
		if adm == store.Admitted {
			admitted++
		} else {
			require.Equal(t, store.RejectedTenant, adm)
		}
	}
	require.Equal(t, 2, admitted)
	before := stats(t, s)
	require.Equal(t, map[string]int{"a": 2}, before.TenantActive)

	job := NewJob("a", at(time.Minute))
	_, adm, err := s.Admit(ctx, job, caps)
	require.NoError(t, err)
	require.Equal(t, store.RejectedTenant, adm)
	requireMissing(t, s, job.ID)
	require.Equal(t, before, stats(t, s))

	// Another tenant has its own cap.
	_, adm, err = s.Admit(ctx, NewJob("b", at(time.Minute)), caps)
	require.NoError(t, err)
	require.Equal(t, store.Admitted, adm)
	require.Equal(t, map[string]int{"a": 2, "b": 1}, stats(t, s).TenantActive)
}

func testAdmitZeroCaps(t *testing.T, s store.Store) {
	for i := range 30 {
		_, adm, err := s.Admit(t.Context(), NewJob("a", at(time.Duration(i)*time.Millisecond)), store.Caps{})
		require.NoError(t, err)
		require.Equal(t, store.Admitted, adm)
	}
	require.Equal(t, 30, stats(t, s).Active())
}

func testDedupJoins(t *testing.T, s store.Store) {
	ctx := t.Context()
	first := NewJob("acme", base)
	first.Key = "k"
	first = admit(t, s, first)
	before := stats(t, s)

	// Same tenant and key: the first job comes back and nothing is written,
	// even with the caps full.
	second := NewJob("acme", at(time.Second))
	second.Key = "k"
	second.Payload = json.RawMessage(`{"other":true}`)
	got, adm, err := s.Admit(ctx, second, store.Caps{Global: 1, Tenant: 1})
	require.NoError(t, err)
	require.Equal(t, store.Joined, adm)
	requireJob(t, first, got)
	requireMissing(t, s, second.ID)
	require.Equal(t, before, stats(t, s))

	// It still joins once the job is running.
	running := start(t, s, first, "w1", at(2*time.Second))
	third := NewJob("acme", at(3*time.Second))
	third.Key = "k"
	got, adm, err = s.Admit(ctx, third, store.Caps{})
	require.NoError(t, err)
	require.Equal(t, store.Joined, adm)
	requireJob(t, running, got)
	requireMissing(t, s, third.ID)

	// Jobs without a key never join.
	admitNew(t, s, "acme", at(4*time.Second))
	admitNew(t, s, "acme", at(4*time.Second))
	require.Equal(t, 3, stats(t, s).Active())
}

func testDedupKeyFreedByFinish(t *testing.T, s store.Store) {
	for i, final := range []contracts.JobState{contracts.StateSucceeded, contracts.StateFailed, contracts.StateCancelled} {
		key := fmt.Sprintf("key-%d", i)
		first := NewJob("acme", base)
		first.Key = key
		first = admit(t, s, first)
		if final == contracts.StateSucceeded {
			first = start(t, s, first, "w1", at(time.Second))
		}
		finish(t, s, first, final, at(2*time.Second))

		again := NewJob("acme", at(3*time.Second))
		again.Key = key
		got, adm, err := s.Admit(t.Context(), again, store.Caps{})
		require.NoError(t, err, final)
		require.Equal(t, store.Admitted, adm, "key after %s", final)
		require.Equal(t, again.ID, got.ID)

		// And the new job is the one that joins now.
		third := NewJob("acme", at(4*time.Second))
		third.Key = key
		got, adm, err = s.Admit(t.Context(), third, store.Caps{})
		require.NoError(t, err)
		require.Equal(t, store.Joined, adm)
		require.Equal(t, again.ID, got.ID)
	}
}

func testDedupPerTenant(t *testing.T, s store.Store) {
	a := NewJob("a", base)
	a.Key = "shared"
	b := NewJob("b", base)
	b.Key = "shared"
	admit(t, s, a)
	got := admit(t, s, b)
	require.Equal(t, b.ID, got.ID)
	require.Equal(t, map[string]int{"a": 1, "b": 1}, stats(t, s).TenantActive)
}

// admitConcurrently admits workers×each jobs from workers goroutines and
// counts the outcomes.
func admitConcurrently(t *testing.T, s store.Store, workers, each int, job func(w, i int) contracts.Job, caps store.Caps) map[store.Admission]int {
	t.Helper()
	var (
		mu     sync.Mutex
		counts = map[store.Admission]int{}
		wg     sync.WaitGroup
		errs   = make(chan error, workers*each)
	)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				_, adm, err := s.Admit(t.Context(), job(w, i), caps)
				if err != nil {
					errs <- err
					continue
				}
				mu.Lock()
				counts[adm]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return counts
}

func testConcurrentAdmitGlobalCap(t *testing.T, s store.Store) {
	counts := admitConcurrently(t, s, 8, 50, func(w, i int) contracts.Job {
		return NewJob(fmt.Sprintf("t%d", w%3), at(time.Duration(w*50+i)*time.Millisecond))
	}, store.Caps{Global: 20})
	require.Equal(t, 20, counts[store.Admitted])
	require.Equal(t, 8*50-20, counts[store.RejectedGlobal])
	c := stats(t, s)
	require.Equal(t, 20, c.Active())
	require.Equal(t, 20, c.ByState[contracts.StatePending])
	drift, err := s.Reconcile(t.Context())
	require.NoError(t, err)
	require.Zero(t, drift)
}

func testConcurrentAdmitTenantCap(t *testing.T, s store.Store) {
	counts := admitConcurrently(t, s, 8, 40, func(w, i int) contracts.Job {
		return NewJob(fmt.Sprintf("t%d", (w+i)%4), at(time.Duration(w*40+i)*time.Millisecond))
	}, store.Caps{Global: 100, Tenant: 5})
	require.Equal(t, 4*5, counts[store.Admitted])
	require.Equal(t, 8*40-20, counts[store.RejectedTenant])
	require.Equal(t, map[string]int{"t0": 5, "t1": 5, "t2": 5, "t3": 5}, stats(t, s).TenantActive)
	drift, err := s.Reconcile(t.Context())
	require.NoError(t, err)
	require.Zero(t, drift)
}

func testConcurrentDedup(t *testing.T, s store.Store) {
	var (
		mu     sync.Mutex
		counts = map[store.Admission]int{}
		seen   = map[string]int{}
		wg     sync.WaitGroup
		errs   = make(chan error, 40)
	)
	for w := range 8 {
		wg.Go(func() {
			for i := range 5 {
				j := NewJob("acme", at(time.Duration(w*5+i)*time.Millisecond))
				j.Key = "same"
				got, adm, err := s.Admit(t.Context(), j, store.Caps{Global: 10})
				if err != nil {
					errs <- err
					continue
				}
				mu.Lock()
				counts[adm]++
				seen[got.ID]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, 1, counts[store.Admitted])
	require.Equal(t, 8*5-1, counts[store.Joined])
	require.Len(t, seen, 1, "every admission returns the one job")
	require.Equal(t, 1, stats(t, s).Active())
}
