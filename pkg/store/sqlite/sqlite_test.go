package sqlite

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/storetest"
)

// openTest opens a store on path and closes it when the test ends.
func openTest(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return skewable{openTest(t, filepath.Join(t.TempDir(), "sluice.db"))}
	})
}

func TestOpenCreatesDirAndSchema(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "a", "b c", "sluice.db")
	s, err := Open(ctx, path, WithBusyTimeout(time.Second), WithReadConns(2))
	require.NoError(t, err)
	require.Equal(t, path, s.Path())
	j, adm, err := s.Admit(ctx, storetest.NewJob("acme", time.Now()), store.Caps{})
	require.NoError(t, err)
	require.Equal(t, store.Admitted, adm)

	var version int
	require.NoError(t, s.r.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&version))
	require.Equal(t, SchemaVersion, version)
	var mode string
	require.NoError(t, s.r.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode))
	require.Equal(t, "wal", mode)
	require.NoError(t, s.Close())

	// Opening again keeps the data and the schema.
	s = openTest(t, path)
	got, err := s.Get(ctx, j.ID)
	require.NoError(t, err)
	require.Equal(t, j.ID, got.ID)
	_, err = s.w.ExecContext(ctx, `PRAGMA user_version = 99`)
	require.NoError(t, err)

	_, err = Open(ctx, path)
	require.ErrorContains(t, err, "newer than this driver")
}

func TestReadPoolIsReadOnly(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "sluice.db"))
	_, err := s.r.ExecContext(t.Context(), `DELETE FROM jobs`)
	require.Error(t, err)
}

func TestTimesKeepNanoseconds(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "sluice.db"))
	created := time.Date(2030, 1, 2, 3, 4, 5, 123456789, time.FixedZone("X", -7*3600))
	j := storetest.NewJob("acme", created)
	j.Payload = nil
	_, _, err := s.Admit(t.Context(), j, store.Caps{})
	require.NoError(t, err)
	got, err := s.Get(t.Context(), j.ID)
	require.NoError(t, err)
	require.True(t, created.Equal(got.CreatedAt), "%s != %s", created, got.CreatedAt)
	require.Equal(t, created.UnixNano(), got.CreatedAt.UnixNano())
	require.Equal(t, time.UTC, got.CreatedAt.Location())
	require.Nil(t, got.StartedAt)
	require.Nil(t, got.Payload)
}

func TestReconcileRepairsDrift(t *testing.T) {
	ctx := t.Context()
	s := openTest(t, filepath.Join(t.TempDir(), "sluice.db"))
	now := time.Now()
	for i, tenant := range []string{"a", "a", "a", "b", "b"} {
		_, adm, err := s.Admit(ctx, storetest.NewJob(tenant, now.Add(time.Duration(i))), store.Caps{})
		require.NoError(t, err)
		require.Equal(t, store.Admitted, adm)
	}
	drift, err := s.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, drift)

	// Corrupt the counters: global +5, a says 0 (3), b's row gone (2), a
	// ghost tenant with 4, a's items say 0 (3).
	for _, stmt := range []string{
		`UPDATE counters SET active = active + 5 WHERE scope = 'global'`,
		`UPDATE counters SET active = 0 WHERE scope = 'tenant:a'`,
		`DELETE FROM counters WHERE scope = 'tenant:b'`,
		`INSERT INTO counters (scope, active) VALUES ('tenant:ghost', 4)`,
		`UPDATE counters SET active = 0 WHERE scope = 'items:a'`,
	} {
		_, err := s.w.ExecContext(ctx, stmt)
		require.NoError(t, err)
	}
	// The drift shows: the inflated global count refuses a job that fits.
	_, adm, err := s.Admit(ctx, storetest.NewJob("c", now), store.Caps{Global: 6})
	require.NoError(t, err)
	require.Equal(t, store.RejectedGlobal, adm)

	drift, err = s.Reconcile(ctx)
	require.NoError(t, err)
	require.Equal(t, 5+3+2+4+3, drift)
	drift, err = s.Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, drift)

	counters := map[string]int{}
	rows, err := s.r.QueryContext(ctx, `SELECT scope, active FROM counters`)
	require.NoError(t, err)
	require.NoError(t, scanAll(rows, func(k string, n int) { counters[k] = n }))
	require.Equal(t, map[string]int{"global": 5, "tenant:a": 3, "tenant:b": 2, "items:a": 3, "items:b": 2}, counters)

	_, adm, err = s.Admit(ctx, storetest.NewJob("c", now), store.Caps{Global: 6})
	require.NoError(t, err)
	require.Equal(t, store.Admitted, adm)
	_, adm, err = s.Admit(ctx, storetest.NewJob("a", now), store.Caps{Tenant: 3})
	require.NoError(t, err)
	require.Equal(t, store.RejectedTenant, adm)
}

// TestTwoStoresOneFile is two processes (say two gateways and a scheduler)
// on one database file: admission stays exact and a claim has one winner.
func TestTwoStoresOneFile(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "sluice.db")
	stores := []*Store{openTest(t, path), openTest(t, path)}
	const (
		perStore = 4
		each     = 30
	)
	var (
		mu     sync.Mutex
		counts = map[store.Admission]int{}
		errs   []error
		wg     sync.WaitGroup
	)
	for si, s := range stores {
		for g := range perStore {
			wg.Go(func() {
				for i := range each {
					tenant := fmt.Sprintf("t%d", (si+g+i)%3)
					_, adm, err := s.Admit(ctx, storetest.NewJob(tenant, time.Now()), store.Caps{Global: 25, Tenant: 10})
					mu.Lock()
					if err != nil {
						errs = append(errs, err)
					}
					counts[adm]++
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	require.Empty(t, errs)
	require.Equal(t, 25, counts[store.Admitted])
	require.Equal(t, len(stores)*perStore*each-25, counts[store.RejectedGlobal]+counts[store.RejectedTenant])
	for _, s := range stores {
		c, err := s.Stats(ctx)
		require.NoError(t, err)
		require.Equal(t, 25, c.Active())
		for tenant, n := range c.TenantActive {
			require.LessOrEqual(t, n, 10, tenant)
		}
	}
	drift, err := stores[1].Reconcile(ctx)
	require.NoError(t, err)
	require.Zero(t, drift)

	// Both stores race to claim every pending job: each is claimed once.
	jobs, _, err := stores[0].List(ctx, store.Query{Limit: 100})
	require.NoError(t, err)
	require.Len(t, jobs, 25)
	wins := make([]int, len(jobs))
	for si, s := range stores {
		for g := range 2 {
			worker := fmt.Sprintf("s%dg%d", si, g)
			wg.Go(func() {
				for k, j := range jobs {
					_, err := s.Transition(ctx, store.Expect{ID: j.ID, State: contracts.StatePending},
						store.Change{State: contracts.StatePending, Claim: 1, Worker: &worker})
					mu.Lock()
					switch {
					case err == nil:
						wins[k]++
					case !errors.Is(err, store.ErrConflict):
						errs = append(errs, err)
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	require.Empty(t, errs)
	for k, n := range wins {
		require.Equal(t, 1, n, "job %d", k)
	}
}

// TestQueriesUseIndexes checks that the reaper's, the stats' and the list's
// queries are index range scans in index order: no table scan, no sort.
func TestQueriesUseIndexes(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "sluice.db"))
	cursor := store.EncodeCursor(time.Unix(0, 1), "x")
	list := func(q store.Query) string {
		query, _, err := listQuery(q, 10)
		require.NoError(t, err)
		return query
	}
	for query, index := range map[string]string{
		leaseStatesQuery:                  "INDEX sqlite_autoindex_jobs_1 (id=?)",
		leaseViewsQuery:                   "INDEX sqlite_autoindex_jobs_1 (id=?)",
		staleKindQuery:                    "INDEX jobs_ready_queue (kind=?)",
		pendingKindsQuery:                 "INDEX jobs_ready_queue (kind>?)",
		purgeQuery:                        "INDEX jobs_finished_top",
		activeByTenantQuery:               "COVERING INDEX jobs_unfinished_slots",
		tenantCountsQuery:                 "PRIMARY KEY (tenant=?)",
		tenantActiveQuery:                 "INDEX sqlite_autoindex_counters_1 (scope>? AND scope<?)",
		activeByKeyQuery:                  "INDEX jobs_active_key",
		countRunningQuery:                 "COVERING INDEX jobs_children (parent=? AND state=?)",
		list(store.Query{}):               "INDEX jobs_top_created",
		list(store.Query{Cursor: cursor}): "INDEX jobs_top_created ((created_at,id)<(?,?))",
		list(store.Query{Kind: "k", Cursor: cursor}):                "INDEX jobs_top_created ((created_at,id)<(?,?))",
		list(store.Query{Tenant: "a", Cursor: cursor}):              "INDEX jobs_top_tenant_created (tenant=? AND (created_at,id)<(?,?))",
		list(store.Query{State: "pending", Cursor: cursor}):         "INDEX jobs_top_listed_by_state (state=? AND (created_at,id)<(?,?))",
		list(store.Query{Tenant: "a", State: "pending", Kind: "k"}): "INDEX jobs_top_tenant_listed_by_state (tenant=? AND state=?)",
		list(store.Query{State: "failed", Cursor: cursor}):          "INDEX jobs_top_listed_by_state (state=? AND (created_at,id)<(?,?))",
		list(store.Query{State: "succeeded", Cursor: cursor}):       "INDEX jobs_top_created ((created_at,id)<(?,?))",
		list(store.Query{Tenant: "a", State: "succeeded"}):          "INDEX jobs_top_tenant_created (tenant=?)",
		list(store.Query{Parent: "p", Cursor: cursor}):              "INDEX sqlite_autoindex_jobs_1 (id>? AND id<?)",
		purgeChildrenQuery: "INDEX sqlite_autoindex_jobs_1 (id>? AND id<?)",
		list(store.Query{Parent: "p", State: "failed"}): "INDEX jobs_children (parent=? AND state=?)",
	} {
		text := queryPlan(t, s, query)
		require.Contains(t, text, "USING "+index, query)
		require.NotContains(t, text, "TEMP B-TREE", query)
	}
	// The running jobs, top-level or a tenant's, come from the index of
	// running jobs and are sorted: they are never more than the slots.
	for _, q := range []store.Query{{State: "running", Cursor: cursor}, {Tenant: "a", State: "running", Kind: "k"}} {
		text := queryPlan(t, s, list(q))
		require.Contains(t, text, "SCAN jobs USING INDEX jobs_running_worker\n", q)
	}
	// Every read of jobs by a list of ids (idQueries: a heartbeat's
	// leases, the rows UpdateEach changes) looks them up one by one on the
	// id index as their JSON array lists them, with no list of the ids
	// built first; one id is one lookup.
	for _, query := range []string{getRowsQuery, leaseStatesQuery, leaseViewsQuery} {
		text := queryPlan(t, s, query)
		require.Contains(t, text, "SCAN json_each VIRTUAL TABLE", query)
		require.Contains(t, text, "SEARCH jobs USING INDEX sqlite_autoindex_jobs_1 (id=?)", query)
		require.NotContains(t, text, "LIST SUBQUERY", query)
		require.NotContains(t, text, "TEMP B-TREE", query)
	}
	for _, query := range []string{getRowQuery, leaseStateQuery, leaseViewQuery} {
		require.Equal(t, "SEARCH jobs USING INDEX sqlite_autoindex_jobs_1 (id=?)", queryPlan(t, s, query), query)
	}
	// Nor does any other read the writer prepares: only the UPDATEs of
	// rows by their rowids keep rowid IN (SELECT … json_each).
	s.wc.mu.Lock()
	prepared := slices.Collect(maps.Keys(s.wc.m))
	s.wc.mu.Unlock()
	for _, query := range prepared {
		if strings.HasPrefix(strings.TrimSpace(query), "UPDATE") {
			continue
		}
		require.NotContains(t, queryPlan(t, s, query), "LIST SUBQUERY", query)
	}
	// The stale and max-runtime scans read the running jobs (as many as
	// the workers' slots) through the index of running jobs and sort them.
	for _, query := range []string{staleBeatQuery, staleStartedQuery} {
		require.Contains(t, queryPlan(t, s, query), "SCAN jobs USING INDEX jobs_running_worker\n", query)
	}

	// Indexes no query needs any more are dropped from older databases.
	var n int
	require.NoError(t, s.w.QueryRowContext(t.Context(), `SELECT count(*) FROM sqlite_master
		WHERE type = 'index' AND name IN ('jobs_pending_dispatch', 'jobs_running_started', 'jobs_unclaimed', 'jobs_running_beat', 'jobs_created',
			'jobs_top_state_created', 'jobs_top_tenant_state_created', 'jobs_active_slots', 'jobs_running_work',
			'jobs_top_state_listed', 'jobs_top_tenant_state_listed')`).Scan(&n))
	require.Zero(t, n)
}

// queryPlan is what EXPLAIN QUERY PLAN says of query, a line a step.
func queryPlan(t *testing.T, s *Store, query string) string {
	t.Helper()
	rows, err := s.w.QueryContext(t.Context(), `EXPLAIN QUERY PLAN `+query, make([]any, strings.Count(query, "?"))...)
	require.NoError(t, err)
	var plan []string
	for rows.Next() {
		var (
			id, parent, notused int
			detail              string
		)
		require.NoError(t, rows.Scan(&id, &parent, &notused, &detail))
		plan = append(plan, detail)
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())
	return strings.Join(plan, "\n")
}

func BenchmarkAdmit(b *testing.B) {
	s := openTest(b, filepath.Join(b.TempDir(), "sluice.db"))
	ctx := context.Background()
	now := time.Now()
	caps := store.Caps{Global: 1 << 30, Tenant: 1 << 30}
	b.ResetTimer()
	for i := range b.N {
		_, adm, err := s.Admit(ctx, storetest.NewJob(fmt.Sprintf("t%d", i%10), now), caps)
		if err != nil || adm != store.Admitted {
			b.Fatal(adm, err)
		}
	}
}

func BenchmarkTransition(b *testing.B) {
	s := openTest(b, filepath.Join(b.TempDir(), "sluice.db"))
	ctx := context.Background()
	now := time.Now()
	j, _, err := s.Admit(ctx, storetest.NewJob("acme", now), store.Caps{})
	require.NoError(b, err)
	worker := "w1"
	b.ResetTimer()
	for i := range b.N {
		until := now.Add(time.Duration(i) * time.Second)
		_, err := s.Transition(ctx,
			store.Expect{ID: j.ID, State: contracts.StatePending, Claim: int64(i)},
			store.Change{Now: now, State: contracts.StatePending, Claim: int64(i + 1), Worker: &worker, ClaimUntil: &until})
		if err != nil {
			b.Fatal(err)
		}
	}
}
