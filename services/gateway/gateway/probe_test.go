package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/gateway/gateway"
)

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	b := setup(t, caps(1, 0))
	// Health and readiness need no token and never answer 429, even at the cap.
	require.Equal(t, http.StatusAccepted, b.submit(tokenA, `{"kind":"x"}`).status)
	require.Equal(t, http.StatusTooManyRequests, b.submit(tokenA, `{"kind":"x"}`).status)

	for _, base := range []string{b.gws[0].srv.URL, b.gws[0].serveURL} {
		r := b.doOn(base, req{method: http.MethodGet, path: "/healthz"})
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		require.Equal(t, "application/json", r.header.Get("Content-Type"))
		require.Equal(t, "nosniff", r.header.Get("X-Content-Type-Options"))
		r = b.doOn(base, req{method: http.MethodGet, path: "/readyz"})
		require.Equal(t, http.StatusOK, r.status, string(r.body))
	}
}

func TestReadinessStoreClosed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	in := b.addGateway()
	require.NoError(t, in.st.Close())

	r := b.doOn(in.srv.URL, req{method: http.MethodGet, path: "/readyz"})
	require.Equal(t, http.StatusServiceUnavailable, r.status, string(r.body))
	var body struct {
		Status  string            `json:"status"`
		Failing map[string]string `json:"failing"`
	}
	require.NoError(t, json.Unmarshal(r.body, &body))
	require.Contains(t, body.Failing, "store")
	require.NotContains(t, body.Failing, "nats")

	// Still alive, and a submit is a 503, not a crash.
	require.Equal(t, http.StatusOK, b.doOn(in.srv.URL, req{method: http.MethodGet, path: "/healthz"}).status)
	b.doOn(in.srv.URL, req{method: http.MethodPost, path: "/v1/jobs", token: tokenA, body: `{"kind":"x"}`}).
		requireError(t, http.StatusServiceUnavailable, contracts.CodeUnavailable)
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t, caps(1, 0))
	require.Equal(t, http.StatusAccepted, b.submit(tokenA, `{"kind":"m"}`).status)
	require.Equal(t, http.StatusTooManyRequests, b.submit(tokenA, `{"kind":"m"}`).status)

	r := b.do(req{method: http.MethodGet, path: "/metrics", token: opsToken})
	require.Equal(t, http.StatusOK, r.status)
	require.True(t, strings.HasPrefix(r.header.Get("Content-Type"), "text/plain"), r.header.Get("Content-Type"))
	text := string(r.body)
	for _, want := range []string{
		`sluice_gateway_admissions_total{limit="none",outcome="admitted"} 1`,
		`sluice_gateway_admissions_total{limit="global",outcome="rejected"} 1`,
		`sluice_gateway_admissions_total{limit="tenant",outcome="rejected"} 0`,
		`sluice_gateway_admissions_total{limit="ip_rate",outcome="rejected"} 0`,
		`sluice_gateway_admissions_total{limit="tenant_rate",outcome="rejected"} 0`,
		`sluice_gateway_http_requests_total{code="202",method="POST",route="/v1/jobs"} 1`,
		`sluice_gateway_http_requests_total{code="429",method="POST",route="/v1/jobs"} 1`,
		`sluice_gateway_http_request_duration_seconds_bucket{method="POST",route="/v1/jobs"`,
		`sluice_gateway_active_jobs{state="pending"} 1`,
		`sluice_gateway_active_jobs{state="running"} 0`,
		`sluice_gateway_active_jobs_errors_total 0`,
		`sluice_gateway_due_publish_failures_total 0`,
	} {
		require.Contains(t, text, want)
	}
	require.NotContains(t, text, tokenA)
}

// TestMetricsNeedAnOperatorInTokenMode: in token mode /metrics (every
// tenant's activity) answers only an operator's token: 401 without a valid
// token, 403 with another tenant's, unless SLUICE_GATEWAY_METRICS_AUTH is
// false; open mode serves it to anyone. (Before, it answered anyone.)
func TestMetricsNeedAnOperatorInTokenMode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := b.do(req{method: http.MethodGet, path: "/metrics"}).requireError(t, http.StatusUnauthorized, contracts.CodeUnauthorized)
	require.NotContains(t, e.Message, "sluice_")
	b.do(req{method: http.MethodGet, path: "/metrics", token: "not-a-token"}).requireError(t, http.StatusUnauthorized, contracts.CodeUnauthorized)
	e = b.do(req{method: http.MethodGet, path: "/metrics", token: tokenA}).requireError(t, http.StatusForbidden, contracts.CodeForbidden)
	require.Contains(t, e.Message, "SLUICE_GATEWAY_OPERATOR_TENANTS")
	r := b.do(req{method: http.MethodGet, path: "/metrics", token: opsToken})
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, string(r.body), "sluice_gateway_http_requests_total")
	require.Contains(t, string(r.body), `sluice_gateway_http_requests_total{code="403",method="GET",route="/metrics"} 1`)

	off := setup(t, func(c *gateway.Config) { c.MetricsAuth = false })
	require.Equal(t, http.StatusOK, off.do(req{method: http.MethodGet, path: "/metrics"}).status)

	open := setup(t, openMode())
	require.Equal(t, http.StatusOK, open.do(req{method: http.MethodGet, path: "/metrics"}).status)
}
