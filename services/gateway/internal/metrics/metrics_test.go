package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func newTestMetrics(t *testing.T) *Metrics {
	t.Helper()
	m, err := New(prometheus.NewRegistry())
	require.NoError(t, err)
	return m
}

func TestRouteAndMethodLabelsAreBounded(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, method, route, wantMethod string
	}{
		{"POST /v1/jobs", "POST", "/v1/jobs", "POST"},
		{"GET /v1/jobs/{id}", "HEAD", "/v1/jobs/{id}", "HEAD"},
		{"GET /{$}", "GET", "/{$}", "GET"},
		{"/healthz", "GET", "/healthz", "GET"},
		{RouteUnmatched, "BREW", RouteUnmatched, "other"},
		{RouteUnmatched, "get", RouteUnmatched, "other"},
	}
	for _, tc := range tests {
		t.Run(tc.pattern+" "+tc.method, func(t *testing.T) {
			t.Parallel()
			m := newTestMetrics(t)
			m.HTTPRequest(tc.pattern, tc.method, 200, time.Millisecond)
			require.Equal(t, 1.0, testutil.ToFloat64(m.httpRequests.WithLabelValues(tc.route, tc.wantMethod, "200")))
			require.Equal(t, 1, testutil.CollectAndCount(m.httpRequests))
			require.Equal(t, 1, testutil.CollectAndCount(m.httpDuration))
		})
	}
}

func TestAdmissionsByOutcomeAndLimit(t *testing.T) {
	t.Parallel()
	m := newTestMetrics(t)
	// Every series exists at zero from the start.
	require.Equal(t, 8, testutil.CollectAndCount(m.admissions))
	m.Admission(OutcomeAdmitted, LimitNone)
	m.Admission(OutcomeRejected, LimitGlobal)
	m.AdmissionRateLimited(LimitIPRate)
	m.AdmissionRateLimited(LimitTenantRate)
	m.AdmissionRateLimited(LimitTenantRate)
	require.Equal(t, 1.0, testutil.ToFloat64(m.admissions.WithLabelValues(OutcomeAdmitted, LimitNone)))
	require.Equal(t, 1.0, testutil.ToFloat64(m.admissions.WithLabelValues(OutcomeRejected, LimitGlobal)))
	require.Equal(t, 1.0, testutil.ToFloat64(m.admissions.WithLabelValues(OutcomeRejected, LimitIPRate)))
	require.Equal(t, 2.0, testutil.ToFloat64(m.admissions.WithLabelValues(OutcomeRejected, LimitTenantRate)))
	require.Zero(t, testutil.ToFloat64(m.admissions.WithLabelValues(OutcomeRejected, LimitTenant)))
	require.Equal(t, 8, testutil.CollectAndCount(m.admissions), "no new series")
}

func TestNewNeedsARegisterer(t *testing.T) {
	t.Parallel()
	_, err := New(nil)
	require.Error(t, err)
	reg := prometheus.NewRegistry()
	_, err = New(reg)
	require.NoError(t, err)
	_, err = New(reg)
	require.ErrorContains(t, err, "metrics: register")
}
