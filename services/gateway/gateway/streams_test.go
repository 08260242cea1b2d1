package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// openStream GETs path with token and returns the status; an event
// stream answered 200 stays open until the test ends (or close is
// called), any other answer is read whole.
func (b *bundle) openStream(path, token string) (status int, body response, close func()) {
	b.tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, b.gws[0].srv.URL+path, nil)
	require.NoError(b.tb, err)
	hr.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(hr)
	require.NoError(b.tb, err)
	closeIt := func() {
		cancel()
		_ = res.Body.Close()
	}
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		defer closeIt()
		buf, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		require.NoError(b.tb, err)
		return res.StatusCode, response{status: res.StatusCode, header: res.Header, body: buf}, func() {}
	}
	b.tb.Cleanup(closeIt)
	return http.StatusOK, response{status: http.StatusOK, header: res.Header}, closeIt
}

// TestTenantStreamShare: with the default settings, tenant A opens event
// streams until it is refused. It is refused at its share with 429 naming
// the limit (not with the gateway's 503), and tenant B's /v1/events and
// B's job's events still answer 200. Once A closes a stream it may open
// one again.
func TestTenantStreamShare(t *testing.T) {
	t.Parallel()
	b := setup(t)
	job := b.submit(tokenB, `{"kind":"watched"}`).job(t)

	var (
		refused response
		opened  []func()
	)
	for range 1001 {
		status, r, closeIt := b.openStream("/v1/events", tokenA)
		if status != http.StatusOK {
			refused = r
			break
		}
		opened = append(opened, closeIt)
	}
	e := refused.requireError(t, http.StatusTooManyRequests, contracts.CodeTenantCap)
	require.Equal(t, contracts.LimitTenantStreams, e.Limit, string(refused.body))
	require.Contains(t, e.Message, "SLUICE_GATEWAY_TENANT_MAX_STREAMS")
	retry, err := strconv.Atoi(refused.header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After")
	require.Positive(t, retry)
	require.Len(t, opened, 100, "the default share")

	// A's job streams count in the same share.
	mine := b.submit(tokenA, `{"kind":"watched"}`).job(t)
	status, r, _ := b.openStream("/v1/jobs/"+mine.ID+"/events", tokenA)
	require.Equal(t, http.StatusTooManyRequests, status, string(r.body))

	// B is not affected.
	status, r, _ = b.openStream("/v1/events", tokenB)
	require.Equal(t, http.StatusOK, status, string(r.body))
	status, r, _ = b.openStream("/v1/jobs/"+job.ID+"/events", tokenB)
	require.Equal(t, http.StatusOK, status, string(r.body))

	// A closed stream gives its place back.
	opened[0]()
	waitUntil(t, func() bool {
		status, _, _ := b.openStream("/v1/events", tokenA)
		return status == http.StatusOK
	})

	text := b.metricsText()
	require.Contains(t, text, `sluice_gateway_rate_limited_total{limit="tenant_streams",transport="http"}`)
}

// TestStreamPoolIsConfigurable: past SLUICE_GATEWAY_MAX_STREAMS every tenant is
// refused with 503; within a share of SLUICE_GATEWAY_TENANT_MAX_STREAMS a tenant
// is refused with 429.
func TestStreamPoolIsConfigurable(t *testing.T) {
	t.Parallel()
	b := setup(t, streams(3, 2))
	for range 2 {
		status, r, _ := b.openStream("/v1/events", tokenA)
		require.Equal(t, http.StatusOK, status, string(r.body))
	}
	_, r, _ := b.openStream("/v1/events", tokenA)
	require.Equal(t, contracts.LimitTenantStreams, r.requireError(t, http.StatusTooManyRequests, contracts.CodeTenantCap).Limit)
	status, r, _ := b.openStream("/v1/events", tokenB)
	require.Equal(t, http.StatusOK, status, string(r.body))
	// The pool is full: B, within its share, gets the gateway's 503.
	_, r, _ = b.openStream("/v1/events", tokenB)
	r.requireError(t, http.StatusServiceUnavailable, contracts.CodeUnavailable)
	require.NotEmpty(t, r.header.Get("Retry-After"))
}

// TestReadRateLimit: a tenant's reads over SLUICE_GATEWAY_RATE_LIMIT_TENANT_READ
// get 429 naming the limit, from a bucket of their own (its submits and
// the other tenant's reads go on); health, readiness, metrics and the
// dashboard's page never answer 429.
func TestReadRateLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, readRateLimit(0.5, 3))
	id := b.submit(tokenA, `{"kind":"r"}`).job(t).ID
	reads := []string{"/v1/jobs/" + id, "/v1/jobs", "/v1/stats"}
	for _, p := range reads {
		require.Equal(t, http.StatusOK, b.do(req{method: http.MethodGet, path: p, token: tokenA}).status, p)
	}
	for _, p := range append(reads, "/v1/events", "/v1/jobs/"+id+"/events") {
		requireRateLimited(t, b.do(req{method: http.MethodGet, path: p, token: tokenA}), contracts.LimitTenantReadRate, 2)
	}
	r := b.do(req{method: http.MethodGet, path: "/v1/jobs/" + id, token: tokenA})
	require.Contains(t, r.errBody(t).Message, "SLUICE_GATEWAY_RATE_LIMIT_TENANT_READ")

	// Submits have their own bucket; the other tenant has its own reads.
	require.Equal(t, http.StatusAccepted, b.submit(tokenA, `{"kind":"r"}`).status)
	require.Equal(t, http.StatusOK, b.do(req{method: http.MethodGet, path: "/v1/stats", token: tokenB}).status)

	for range 20 {
		for _, p := range []string{"/healthz", "/readyz", "/metrics", "/", "/openapi.json"} {
			require.Equal(t, http.StatusOK, b.do(req{method: http.MethodGet, path: p, token: tokenFor(b, p)}).status, p)
		}
	}
	text := b.metricsText()
	require.Contains(t, text, `sluice_gateway_rate_limited_total{limit="tenant_read_rate",transport="http"} 6`)
}

// TestStatsTenantSeesOnlyItself: in token mode a tenant's /v1/stats holds
// its own counts, slots and rejections, and nothing of another tenant: no
// other tenant's jobs in the counts, no workers, no scale requests.
func TestStatsTenantSeesOnlyItself(t *testing.T) {
	t.Parallel()
	b := setup(t, caps(100, 10))
	require.Equal(t, http.StatusAccepted, b.submit(tokenA, `{"kind":"s"}`).status)
	for range 3 {
		require.Equal(t, http.StatusAccepted, b.submit(tokenB, `{"kind":"s"}`).status)
	}
	b.finish(b.submit(tokenB, `{"kind":"s"}`).job(t).ID)
	b.finish(b.submit(tokenB, `{"kind":"s"}`).job(t).ID)

	st := b.stats(tokenA)
	require.Equal(t, 100, st.MaxActive)
	require.Equal(t, 10, st.TenantMaxActive)
	require.Equal(t, 1, st.Active, "A's own slots")
	require.Equal(t, map[string]int{tenantA: 1}, st.TenantActive)
	require.Equal(t, 1, st.Counts[contracts.StatePending], "A's own pending job, not B's")
	require.Zero(t, st.Counts[contracts.StateSucceeded], "B's finished jobs are not A's")
	require.Len(t, st.Counts, len(contracts.AllStates))

	stB := b.stats(tokenB)
	require.Equal(t, 3, stB.Counts[contracts.StatePending])
	require.Equal(t, 2, stB.Counts[contracts.StateSucceeded])
	require.Equal(t, 3, stB.Active)
}

// TestStatsOperatorSeesAll: a tenant of SLUICE_GATEWAY_OPERATOR_TENANTS sees the
// whole system, workers and scale requests included; the other tenant
// sees neither.
func TestStatsOperatorSeesAll(t *testing.T) {
	t.Parallel()
	b := setup(t, caps(100, 10), operatorTenants(tenantB))
	require.Equal(t, http.StatusAccepted, b.submit(tokenA, `{"kind":"s"}`).status)
	require.Equal(t, http.StatusAccepted, b.submit(tokenB, `{"kind":"s"}`).status)
	b.finish(b.submit(tokenA, `{"kind":"s"}`).job(t).ID)
	ann, err := json.Marshal(contracts.Announce{WorkerID: "w-1", Kinds: []string{"s"}, Capacity: 4, InFlight: 1, IntervalMS: 60000})
	require.NoError(t, err)
	scale, err := json.Marshal(contracts.ScaleRequest{Kind: "s", Ready: 3, Live: 1, At: time.Now()})
	require.NoError(t, err)
	var st contracts.Stats
	waitUntil(t, func() bool {
		require.NoError(t, b.nc.Publish(contracts.AnnounceSubject("w-1"), ann))
		require.NoError(t, b.nc.Publish(contracts.SubjectScaleRequest, scale))
		st = b.stats(tokenB)
		return len(st.Workers) == 1 && len(st.RecentScaleRequests) > 0
	})
	require.Equal(t, 2, st.Active)
	require.Equal(t, 2, st.Counts[contracts.StatePending])
	require.Equal(t, 1, st.Counts[contracts.StateSucceeded])
	require.Equal(t, map[string]int{tenantA: 1, tenantB: 1}, st.TenantActive)

	// The other tenant still sees only itself.
	stA := b.stats(tokenA)
	require.Empty(t, stA.Workers, "the roster is the operator's")
	require.Empty(t, stA.RecentScaleRequests, "scale requests are the operator's")
	require.Equal(t, map[string]int{tenantA: 1}, stA.TenantActive)
	require.Equal(t, 1, stA.Active)
	require.Equal(t, 1, stA.Counts[contracts.StateSucceeded])
	require.Equal(t, 1, stA.Counts[contracts.StatePending])
}
