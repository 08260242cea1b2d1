package gateway_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// stats reads GET /v1/stats as token's tenant ("" in open mode).
func (b *bundle) stats(token string) contracts.Stats {
	b.tb.Helper()
	r := b.do(req{method: http.MethodGet, path: "/v1/stats", token: token})
	require.Equal(b.tb, http.StatusOK, r.status, string(r.body))
	var s contracts.Stats
	require.NoError(b.tb, json.Unmarshal(r.body, &s), string(r.body))
	return s
}

// limits lists the limit of each rejection, newest first.
func limits(rs []contracts.Rejection) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Limit
	}
	return out
}

// TestRecentRejectionsTokenMode: every 429 (global cap, tenant cap, tenant
// rate limit over HTTP and NATS) shows in /v1/stats, newest first, each
// tenant seeing only its own.
func TestRecentRejectionsTokenMode(t *testing.T) {
	t.Parallel()
	b := setup(t, caps(3, 2), rateLimits(0.001, 4, 0, 0))
	require.NotNil(t, b.stats(tokenA).RecentRejections, "always a list")
	require.Empty(t, b.stats(tokenA).RecentRejections)

	before := time.Now().UTC()
	for range 2 {
		require.Equal(t, http.StatusAccepted, b.submit(tokenA, `{"kind":"x"}`).status)
	}
	b.submit(tokenA, `{"kind":"x"}`).requireError(t, http.StatusTooManyRequests, contracts.CodeTenantCap)
	require.Equal(t, http.StatusAccepted, b.submit(tokenB, `{"kind":"x"}`).status)
	b.submit(tokenB, `{"kind":"x"}`).requireError(t, http.StatusTooManyRequests, contracts.CodeGlobalCap)
	// Tenant A has used its burst of 4 (three submits, now a fourth).
	b.submit(tokenA, `{"kind":"x"}`).requireError(t, http.StatusTooManyRequests, contracts.CodeGlobalCap)
	b.submit(tokenA, `{"kind":"x"}`).requireError(t, http.StatusTooManyRequests, contracts.CodeRateLimited)
	require.Equal(t, http.StatusTooManyRequests, b.natsSubmit(map[string]string{contracts.HeaderToken: tokenA}, `{"kind":"x"}`).Status)

	a := b.stats(tokenA).RecentRejections
	require.Equal(t, []string{"tenant_rate", "tenant_rate", "global", "tenant"}, limits(a))
	for _, r := range a {
		require.Equal(t, tenantA, r.Tenant)
		require.False(t, r.At.Before(before.Add(-time.Second)), "at %s", r.At)
		require.False(t, r.At.After(time.Now().Add(time.Second)), "at %s", r.At)
	}
	g := b.stats(tokenB).RecentRejections
	require.Equal(t, []string{"global"}, limits(g))
	require.Equal(t, tenantB, g[0].Tenant)

	// The JSON names the fields as documented.
	r := b.do(req{method: http.MethodGet, path: "/v1/stats", token: tokenB})
	var raw struct {
		Recent []map[string]any `json:"recent_rejections"`
	}
	require.NoError(t, json.Unmarshal(r.body, &raw))
	require.Len(t, raw.Recent, 1)
	require.Equal(t, "global", raw.Recent[0]["limit"])
	require.Equal(t, tenantB, raw.Recent[0]["tenant"])
	require.NotEmpty(t, raw.Recent[0]["at"])
	require.NotContains(t, raw.Recent[0], "rate_limit")
}

// TestRecentRejectionsOpenMode: in open mode every rejection is shown,
// the per-IP rate limit's included.
func TestRecentRejectionsOpenMode(t *testing.T) {
	t.Parallel()
	b := setup(t, openMode(), caps(1, 0), rateLimits(0, 0, 0.001, 3))
	require.Equal(t, http.StatusAccepted, b.submit("", `{"kind":"x"}`).status)
	b.submit("", `{"kind":"x"}`).requireError(t, http.StatusTooManyRequests, contracts.CodeGlobalCap)
	b.submit("", `{"kind":"x"}`).requireError(t, http.StatusTooManyRequests, contracts.CodeGlobalCap)
	b.submit("", `{"kind":"x"}`).requireError(t, http.StatusTooManyRequests, contracts.CodeRateLimited)
	got := b.stats("").RecentRejections
	require.Equal(t, []string{"ip_rate", "global", "global"}, limits(got))
	for _, r := range got {
		require.Equal(t, "default", r.Tenant)
	}
}

// TestRecentRejectionsBounded: the list keeps only the latest
// contracts.MaxRecentRejections.
func TestRecentRejectionsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, caps(1, 0))
	require.Equal(t, http.StatusAccepted, b.submit(tokenA, `{"kind":"x"}`).status)
	for range contracts.MaxRecentRejections + 5 {
		b.submit(tokenA, `{"kind":"x"}`).requireError(t, http.StatusTooManyRequests, contracts.CodeGlobalCap)
	}
	require.Len(t, b.stats(tokenA).RecentRejections, contracts.MaxRecentRejections)
}

// TestLimitNamesAgree: each limit has one name on every surface: the 429
// body (HTTP) or submit reply (NATS), the recent rejections of GET
// /v1/stats, the limit label of the metrics and the OpenAPI document's
// enums, all of them contracts.Limits429.
func TestLimitNamesAgree(t *testing.T) {
	t.Parallel()
	tests := []struct {
		limit string
		opt   option
		nats  bool
	}{
		{contracts.LimitGlobal, caps(1, 0), false},
		{contracts.LimitTenant, caps(10, 1), false},
		{contracts.LimitTenantRate, rateLimits(0.001, 1, 0, 0), false},
		{contracts.LimitIPRate, rateLimits(0, 0, 0.001, 1), false},
		{contracts.LimitGlobal, caps(1, 0), true},
		{contracts.LimitTenant, caps(10, 1), true},
		{contracts.LimitTenantRate, rateLimits(0.001, 1, 0, 0), true},
		{contracts.LimitTenantItems, itemLimits(10, 1), false},
		{contracts.LimitTenantItems, itemLimits(10, 1), true},
	}
	for _, tc := range tests {
		transport := "http"
		if tc.nats {
			transport = "nats"
		}
		t.Run(transport+"/"+tc.limit, func(t *testing.T) {
			t.Parallel()
			require.Contains(t, contracts.Limits429, tc.limit)
			b := setup(t, openMode(), tc.opt)
			var got string
			if tc.nats {
				require.Equal(t, http.StatusAccepted, b.natsSubmit(nil, `{"kind":"x"}`).Status)
				reply := b.natsSubmit(nil, `{"kind":"x"}`)
				require.Equal(t, http.StatusTooManyRequests, reply.Status)
				require.NotNil(t, reply.Error)
				got = reply.Error.Limit
			} else {
				require.Equal(t, http.StatusAccepted, b.submit("", `{"kind":"x"}`).status)
				r := b.submit("", `{"kind":"x"}`)
				require.Equal(t, http.StatusTooManyRequests, r.status, string(r.body))
				got = r.errBody(t).Limit
			}
			require.Equal(t, tc.limit, got, "the 429's limit")

			recent := b.stats("").RecentRejections
			require.Len(t, recent, 1)
			require.Equal(t, tc.limit, recent[0].Limit, "/v1/stats")

			text := b.metricsText()
			require.Contains(t, text, `sluice_gateway_admissions_total{limit="`+tc.limit+`",outcome="rejected"} 1`)
			if tc.limit == contracts.LimitTenantRate || tc.limit == contracts.LimitIPRate {
				require.Contains(t, text, `sluice_gateway_rate_limited_total{limit="`+tc.limit+`",transport="`+transport+`"} 1`)
			}
		})
	}

	t.Run("openapi", func(t *testing.T) {
		t.Parallel()
		b := setup(t, openMode())
		var doc struct {
			Components struct {
				Schemas struct {
					Rejection struct {
						Properties struct {
							Limit struct {
								Enum []string `json:"enum"`
							} `json:"limit"`
						} `json:"properties"`
					} `json:"Rejection"`
					ErrorDetail struct {
						Properties struct {
							Limit struct {
								Enum []string `json:"enum"`
							} `json:"limit"`
						} `json:"properties"`
					} `json:"ErrorDetail"`
				} `json:"schemas"`
			} `json:"components"`
		}
		require.NoError(t, json.Unmarshal(b.do(req{method: http.MethodGet, path: "/openapi.json"}).body, &doc))
		s := doc.Components.Schemas
		require.Equal(t, contracts.Limits429, s.Rejection.Properties.Limit.Enum, "Rejection.limit")
		require.Equal(t, contracts.ErrorLimits, s.ErrorDetail.Properties.Limit.Enum, "ErrorDetail.limit (the error of every error body)")
	})
}
