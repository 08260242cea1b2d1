package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe/clocktest"
	"github.com/sluicehq/sluice/services/gateway/gateway"
)

// list fetches one page of GET /v1/jobs with the given query.
func (b *bundle) list(token string, q url.Values) contracts.JobPage {
	b.tb.Helper()
	r := b.do(req{method: http.MethodGet, path: "/v1/jobs?" + q.Encode(), token: token})
	require.Equal(b.tb, http.StatusOK, r.status, string(r.body))
	var p contracts.JobPage
	require.NoError(b.tb, json.Unmarshal(r.body, &p))
	require.NotNil(b.tb, p.Jobs, "jobs is [] not null")
	return p
}

// listAll follows the cursor to the end and returns the ids in order and
// the number of pages.
func (b *bundle) listAll(token string, q url.Values) ([]string, int) {
	b.tb.Helper()
	var ids []string
	pages := 0
	for {
		p := b.list(token, q)
		pages++
		for _, j := range p.Jobs {
			ids = append(ids, j.ID)
		}
		if p.NextCursor == "" {
			return ids, pages
		}
		require.Less(b.tb, pages, 100, "the cursor never ends")
		q.Set("cursor", p.NextCursor)
	}
}

func TestGetJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(tokenA, `{"kind":"fetch","payload":[1,2]}`).job(t)
	r := b.do(req{method: http.MethodGet, path: "/v1/jobs/" + j.ID, token: tokenA})
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	got := r.job(t)
	require.Equal(t, j.ID, got.ID)
	require.Equal(t, contracts.StatePending, got.State)
	require.JSONEq(t, `[1,2]`, string(got.Payload))
}

func TestListPagination(t *testing.T) {
	t.Parallel()
	clock := clocktest.New()
	b := setupWith(t, hooks{deps: func(d *gateway.Deps) { d.Now = clock.Now }})
	var mine []string
	kinds := map[string][]string{}
	for i := range 7 {
		kind := "alpha"
		if i%2 == 1 {
			kind = "beta"
		}
		j := b.submit(tokenA, fmt.Sprintf(`{"kind":%q}`, kind)).job(t)
		mine = append(mine, j.ID)
		kinds[kind] = append(kinds[kind], j.ID)
		clock.Advance(time.Millisecond) // distinct creation times, newest last
	}
	for range 2 {
		require.Equal(t, http.StatusAccepted, b.submit(tokenB, `{"kind":"alpha"}`).status)
	}
	newestFirst := func(ids []string) []string {
		out := slices.Clone(ids)
		slices.Reverse(out)
		return out
	}

	// Pages of 3 across the cursor: 3 + 3 + 1, newest first, only acme's.
	ids, pages := b.listAll(tokenA, url.Values{"limit": {"3"}})
	require.Equal(t, 3, pages)
	require.Equal(t, newestFirst(mine), ids)
	first := b.list(tokenA, url.Values{"limit": {"3"}})
	require.Len(t, first.Jobs, 3)
	require.NotEmpty(t, first.NextCursor)

	// Default limit returns everything in one page here.
	all := b.list(tokenA, url.Values{})
	require.Len(t, all.Jobs, 7)
	require.Empty(t, all.NextCursor)

	// Filter by kind, paged.
	ids, _ = b.listAll(tokenA, url.Values{"kind": {"beta"}, "limit": {"2"}})
	require.Equal(t, newestFirst(kinds["beta"]), ids)

	// Filter by state.
	c := b.do(req{method: http.MethodPost, path: "/v1/jobs/" + mine[2] + "/cancel", token: tokenA})
	require.Equal(t, http.StatusAccepted, c.status, string(c.body))
	ids, _ = b.listAll(tokenA, url.Values{"state": {"cancelled"}})
	require.Equal(t, []string{mine[2]}, ids)
	ids, _ = b.listAll(tokenA, url.Values{"state": {"pending"}, "kind": {"alpha"}, "limit": {"1"}})
	want := slices.DeleteFunc(newestFirst(kinds["alpha"]), func(id string) bool { return id == mine[2] })
	require.Equal(t, want, ids)
	ids, _ = b.listAll(tokenA, url.Values{"state": {"succeeded"}})
	require.Empty(t, ids)

	// Tenant B sees its own two only.
	ids, _ = b.listAll(tokenB, url.Values{})
	require.Len(t, ids, 2)
	for _, id := range ids {
		require.NotContains(t, mine, id)
	}
}

func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(tokenA, `{"kind":"private"}`).job(t)
	before := b.snap()

	b.do(req{method: http.MethodGet, path: "/v1/jobs/" + j.ID, token: tokenB}).
		requireError(t, http.StatusNotFound, contracts.CodeNotFound)
	b.do(req{method: http.MethodPost, path: "/v1/jobs/" + j.ID + "/cancel", token: tokenB}).
		requireError(t, http.StatusNotFound, contracts.CodeNotFound)
	ids, _ := b.listAll(tokenB, url.Values{})
	require.Empty(t, ids)
	ids, _ = b.listAll(tokenB, url.Values{"kind": {"private"}})
	require.Empty(t, ids)
	require.Equal(t, before, b.snap(), "another tenant's cancel changed nothing")

	// Missing and foreign jobs answer the same body.
	foreign := b.do(req{method: http.MethodGet, path: "/v1/jobs/" + j.ID, token: tokenB})
	missing := b.do(req{method: http.MethodGet, path: "/v1/jobs/0190a5d2-0000-7000-8000-000000000000", token: tokenB})
	require.Equal(t, missing.body, foreign.body)

	r := b.do(req{method: http.MethodGet, path: "/v1/jobs/" + j.ID, token: tokenA})
	require.Equal(t, http.StatusOK, r.status)
}

// TestStats reads the operator's view (SLUICE_GATEWAY_OPERATOR_TENANTS); what
// another tenant sees is TestStatsTenantSeesOnlyItself's.
func TestStats(t *testing.T) {
	t.Parallel()
	b := setup(t, caps(100, 10), operatorTenants(tenantA))
	require.Equal(t, http.StatusAccepted, b.submit(tokenA, `{"kind":"s"}`).status)
	require.Equal(t, http.StatusAccepted, b.submit(tokenB, `{"kind":"s"}`).status)
	done := b.submit(tokenB, `{"kind":"s"}`).job(t)
	b.finish(done.ID)

	// A worker announces itself; the gateway's roster picks it up.
	ann, err := json.Marshal(contracts.Announce{WorkerID: "w-1", Kinds: []string{"s"}, Capacity: 4, InFlight: 1, IntervalMS: 60000})
	require.NoError(t, err)
	var st contracts.Stats
	waitUntil(t, func() bool {
		require.NoError(t, b.nc.Publish(contracts.AnnounceSubject("w-1"), ann))
		r := b.do(req{method: http.MethodGet, path: "/v1/stats", token: tokenA})
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		st = contracts.Stats{}
		require.NoError(t, json.Unmarshal(r.body, &st))
		return len(st.Workers) == 1
	})

	require.Equal(t, 100, st.MaxActive)
	require.Equal(t, 10, st.TenantMaxActive)
	require.Equal(t, 2, st.Active)
	for _, s := range contracts.AllStates {
		require.Contains(t, st.Counts, s)
	}
	require.Equal(t, 1, st.Counts[contracts.StateSucceeded])
	require.Equal(t, map[string]int{tenantA: 1, tenantB: 1}, st.TenantActive, "the operator sees every tenant")
	require.Equal(t, "w-1", st.Workers[0].ID)
	require.Equal(t, 4, st.Workers[0].Capacity)
	require.Equal(t, 1, st.Workers[0].InFlight)
}

func TestStatsOpenMode(t *testing.T) {
	t.Parallel()
	b := setup(t, openMode())
	r := b.do(req{method: http.MethodGet, path: "/v1/stats"})
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var st contracts.Stats
	require.NoError(t, json.Unmarshal(r.body, &st))
	require.Len(t, st.Counts, len(contracts.AllStates))
	require.NotNil(t, st.Workers)

	j := b.submit("", `{"kind":"open"}`).job(t)
	require.Equal(t, "default", j.Tenant)
	// An Authorization header changes nothing in open mode.
	j = b.submit("whatever", `{"kind":"open"}`).job(t)
	require.Equal(t, "default", j.Tenant)
	r = b.do(req{method: http.MethodGet, path: "/v1/stats"})
	require.NoError(t, json.Unmarshal(r.body, &st))
	require.Equal(t, map[string]int{"default": 2}, st.TenantActive)
}
