package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// natsBatch sends a batch submit over NATS as tenant acme and returns the
// raw reply.
func (b *bundle) natsBatch(body string) []byte {
	b.tb.Helper()
	return b.natsRequest(contracts.SubjectSubmitBatch, map[string]string{contracts.HeaderToken: tokenA}, body).Data
}

// natsRefusal decodes a NATS batch reply that refuses the whole batch.
func natsRefusal(tb testing.TB, data []byte) contracts.SubmitReply {
	tb.Helper()
	var r contracts.SubmitReply
	require.NoError(tb, json.Unmarshal(data, &r), string(data))
	require.NotZero(tb, r.Status, string(data))
	require.NotNil(tb, r.Error, string(data))
	return r
}

// fanoutJSON is a fan-out of n items (window 1) of a kind of the
// tenant's own, whose items the gateway does not check.
func fanoutJSON(n int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprint(i)
	}
	return `{"kind":"crawl","concurrency":1,"items":[` + strings.Join(items, ",") + `]}`
}

// batchJSON is a batch of the given submit bodies.
func batchJSON(jobs ...string) string { return `{"jobs":[` + strings.Join(jobs, ",") + `]}` }

// plainJobs is n plain sleep jobs.
func plainJobs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = `{"kind":"sleep"}`
	}
	return out
}

// TestItemsPerRequestBindBeforeAdmission: a request holding more items
// (its jobs plus every fan-out item) than SLUICE_GATEWAY_MAX_ITEMS_PER_REQUEST is
// refused whole with a 413 naming request_items, over HTTP and NATS
// alike, and nothing is admitted; at the bound it is admitted.
func TestItemsPerRequestBindBeforeAdmission(t *testing.T) {
	t.Parallel()
	b := setup(t, itemLimits(100, 0))
	over := batchJSON(fanoutJSON(50), fanoutJSON(49)) // 51 + 50 = 101 items
	before := b.snap()

	e := b.batch(tokenA, over).requireError(t, http.StatusRequestEntityTooLarge, contracts.CodeTooLarge)
	require.Equal(t, contracts.LimitRequestItems, e.Limit)
	require.Contains(t, e.Message, "SLUICE_GATEWAY_MAX_ITEMS_PER_REQUEST")
	e = b.submit(tokenA, fanoutJSON(100)).requireError(t, http.StatusRequestEntityTooLarge, contracts.CodeTooLarge)
	require.Equal(t, contracts.LimitRequestItems, e.Limit)
	r := natsRefusal(t, b.natsBatch(over))
	require.Equal(t, http.StatusRequestEntityTooLarge, r.Status)
	require.Equal(t, contracts.LimitRequestItems, r.Error.Limit)
	nr := b.natsSubmit(map[string]string{contracts.HeaderToken: tokenA}, fanoutJSON(100))
	require.Equal(t, http.StatusRequestEntityTooLarge, nr.Status)
	require.Equal(t, contracts.LimitRequestItems, nr.Error.Limit)
	require.Equal(t, before, b.snap(), "a refused request admits nothing")

	at := batchJSON(fanoutJSON(49), fanoutJSON(49)) // 100 items
	require.Equal(t, http.StatusOK, b.batch(tokenA, at).status)
	var br contracts.BatchReply
	require.NoError(t, json.Unmarshal(b.natsBatch(at), &br))
	require.Len(t, br.Results, 2)
	require.Equal(t, http.StatusAccepted, br.Results[1].Status)
}

// TestTenantItemsInFlight: a tenant whose items in flight would pass
// SLUICE_GATEWAY_TENANT_MAX_ITEMS gets a 429 naming tenant_items, over HTTP and
// NATS; another tenant is not affected.
func TestTenantItemsInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t, itemLimits(1000, 30))
	require.Equal(t, http.StatusAccepted, b.submit(tokenA, fanoutJSON(20)).status) // 21 of 30
	e := b.submit(tokenA, fanoutJSON(9)).requireError(t, http.StatusTooManyRequests, contracts.CodeTenantCap)
	require.Equal(t, contracts.LimitTenantItems, e.Limit)
	require.Contains(t, e.Message, "SLUICE_GATEWAY_TENANT_MAX_ITEMS")
	nr := b.natsSubmit(map[string]string{contracts.HeaderToken: tokenA}, fanoutJSON(9))
	require.Equal(t, http.StatusTooManyRequests, nr.Status)
	require.Equal(t, contracts.LimitTenantItems, nr.Error.Limit)
	require.Equal(t, http.StatusAccepted, b.submit(tokenA, fanoutJSON(8)).status, "30 of 30")
	require.Equal(t, http.StatusAccepted, b.submit(tokenB, fanoutJSON(20)).status, "each tenant has its own")
}

// TestRateTokensPerItem: the per-tenant rate limit charges a batch one
// token per job and a fan-out one per item, over HTTP and NATS; a request
// costing more than the burst is refused for good (413 naming
// tenant_rate), not left waiting.
func TestRateTokensPerItem(t *testing.T) {
	t.Parallel()
	t.Run("http", func(t *testing.T) {
		t.Parallel()
		b := setup(t, rateLimits(0.001, 1000, 0, 0), caps(0, 0))
		res := b.batch(tokenA, batchJSON(plainJobs(1000)...))
		require.Equal(t, http.StatusOK, res.status)
		for _, r := range res.results(t) {
			require.Equal(t, http.StatusAccepted, r.Status, "%+v", r.Error)
		}
		e := b.submit(tokenA, `{"kind":"sleep"}`).requireError(t, http.StatusTooManyRequests, contracts.CodeRateLimited)
		require.Equal(t, contracts.LimitTenantRate, e.Limit, "the batch took 1,000 tokens")
		require.Equal(t, http.StatusAccepted, b.submit(tokenB, `{"kind":"sleep"}`).status)
		e = b.submit(tokenB, fanoutJSON(1000)).requireError(t, http.StatusRequestEntityTooLarge, contracts.CodeTooLarge)
		require.Equal(t, contracts.LimitTenantRate, e.Limit, "1,001 tokens can never be there")
		require.Contains(t, e.Message, "SLUICE_GATEWAY_RATE_LIMIT_TENANT_BURST")
	})
	t.Run("nats", func(t *testing.T) {
		t.Parallel()
		b := setup(t, rateLimits(0.001, 1000, 0, 0), caps(0, 0))
		var br contracts.BatchReply
		require.NoError(t, json.Unmarshal(b.natsBatch(batchJSON(plainJobs(1000)...)), &br))
		require.Len(t, br.Results, 1000)
		nr := b.natsSubmit(map[string]string{contracts.HeaderToken: tokenA}, fanoutJSON(1))
		require.Equal(t, http.StatusTooManyRequests, nr.Status)
		require.Equal(t, contracts.LimitTenantRate, nr.Error.Limit)
	})
}

// TestBatchBytesAgreeAcrossTransports: a batch over SLUICE_GATEWAY_MAX_BODY_BYTES
// but within SLUICE_GATEWAY_MAX_BATCH_BYTES is admitted over NATS as over HTTP;
// one over the batch bound is a 413 on both.
func TestBatchBytesAgreeAcrossTransports(t *testing.T) {
	t.Parallel()
	b := setup(t, maxBody(4096))
	jobs := make([]string, 40)
	for i := range jobs {
		jobs[i] = `{"kind":"crawl","payload":"` + strings.Repeat("x", 200) + `"}`
	}
	body := batchJSON(jobs...) // about 9 KB
	require.Greater(t, len(body), 4096)
	require.Equal(t, http.StatusOK, b.batch(tokenA, body).status)
	var br contracts.BatchReply
	require.NoError(t, json.Unmarshal(b.natsBatch(body), &br))
	require.Len(t, br.Results, 40)
	require.Equal(t, http.StatusAccepted, br.Results[39].Status)

	limit := b.cfg.BatchBytes(b.nc.MaxPayload())
	huge := batchJSON(`{"kind":"crawl","payload":"` + strings.Repeat("x", int(limit)) + `"}`)
	b.batch(tokenA, huge).requireError(t, http.StatusRequestEntityTooLarge, contracts.CodeTooLarge)
	if int64(len(huge)) < b.nc.MaxPayload() {
		r := natsRefusal(t, b.natsBatch(huge))
		require.Equal(t, http.StatusRequestEntityTooLarge, r.Status)
	}
}
