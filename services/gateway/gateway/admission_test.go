package gateway_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestAdmissionGlobalCap(t *testing.T) {
	t.Parallel()
	const limit = 5
	b := setup(t, caps(limit, 0))
	var ids []string
	for i := range limit {
		tok := tokenA
		if i%2 == 1 {
			tok = tokenB
		}
		r := b.submit(tok, `{"kind":"resize"}`)
		require.Equal(t, http.StatusAccepted, r.status, string(r.body))
		ids = append(ids, r.job(t).ID)
	}

	before := b.snap()
	for _, tok := range []string{tokenA, tokenB} {
		r := b.submit(tok, `{"kind":"resize"}`)
		e := r.requireError(t, http.StatusTooManyRequests, contracts.CodeGlobalCap)
		require.Equal(t, "global", e.Limit)
		require.Contains(t, e.Message, fmt.Sprint(limit))
		require.Equal(t, "2", r.header.Get("Retry-After"), "ceil(1.5s) in seconds")
	}
	require.Equal(t, before, b.snap(), "a rejected submit writes nothing")

	// A finished job frees its slot.
	b.finish(ids[0])
	r := b.submit(tokenA, `{"kind":"resize"}`)
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	r = b.submit(tokenA, `{"kind":"resize"}`)
	r.requireError(t, http.StatusTooManyRequests, contracts.CodeGlobalCap)
}

func TestAdmissionTenantCap(t *testing.T) {
	t.Parallel()
	const limit = 3
	b := setup(t, caps(0, limit))
	for range limit {
		r := b.submit(tokenA, `{"kind":"resize"}`)
		require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	}
	before := b.snap()
	r := b.submit(tokenA, `{"kind":"resize"}`)
	e := r.requireError(t, http.StatusTooManyRequests, contracts.CodeTenantCap)
	require.Equal(t, "tenant", e.Limit)
	require.Contains(t, e.Message, fmt.Sprint(limit))
	require.Equal(t, "2", r.header.Get("Retry-After"))
	require.Equal(t, before, b.snap())

	// Tenant A being full does not block tenant B.
	for range limit {
		r := b.submit(tokenB, `{"kind":"resize"}`)
		require.Equal(t, http.StatusAccepted, r.status, string(r.body))
		require.Equal(t, tenantB, r.job(t).Tenant)
	}
	b.submit(tokenB, `{"kind":"resize"}`).requireError(t, http.StatusTooManyRequests, contracts.CodeTenantCap)

	c := b.snap().counts
	require.Equal(t, map[string]int{tenantA: limit, tenantB: limit}, c.TenantActive)
}

func TestAdmittedJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.submit(tokenA, `{"kind":"thumbnail.v2","payload":{"src":"s3://x/y.png","sizes":[64,128]},"key":"img-42","priority":7,"max_attempts":5,"deadline":"90s"}`)
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	require.Equal(t, "nosniff", r.header.Get("X-Content-Type-Options"))
	j := r.job(t)
	require.True(t, contracts.ValidJobID(j.ID))
	require.Equal(t, "/v1/jobs/"+j.ID, r.header.Get("Location"))
	require.Equal(t, tenantA, j.Tenant)
	require.Equal(t, "thumbnail.v2", j.Kind)
	require.JSONEq(t, `{"src":"s3://x/y.png","sizes":[64,128]}`, string(j.Payload))
	require.Equal(t, "img-42", j.Key)
	require.Equal(t, 7, j.Priority)
	require.Equal(t, 5, j.MaxAttempts)
	require.Equal(t, contracts.StatePending, j.State)
	require.Zero(t, j.Claim)
	require.NotNil(t, j.NextDispatchAt)
	require.WithinDuration(t, j.CreatedAt.Add(90e9), j.DispatchDeadline, 1e9)

	stored, err := b.st.Get(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, j.ID, stored.ID)

	// Defaults: max_attempts from SLUICE_GATEWAY_DEFAULT_MAX_ATTEMPTS, deadline from SLUICE_DISPATCH_DEADLINE.
	r = b.submit(tokenA, `{"kind":"plain"}`)
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	j = r.job(t)
	require.Equal(t, b.cfg.DefaultMaxAttempts, j.MaxAttempts)
	require.WithinDuration(t, j.CreatedAt.Add(b.cfg.DispatchDeadline), j.DispatchDeadline, 1e9)

	// A charset parameter on the content type is fine.
	r = b.do(req{method: http.MethodPost, path: "/v1/jobs", token: tokenA, body: `{"kind":"plain"}`,
		contentType: "application/json; charset=UTF-8"})
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
}

func TestDedup(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := `{"kind":"report","key":"daily-2024-05-01"}`

	first := b.submit(tokenA, body)
	require.Equal(t, http.StatusAccepted, first.status, string(first.body))
	j1 := first.job(t)

	// Same key and tenant while active: the same job, 200, nothing new.
	before := b.snap()
	again := b.submit(tokenA, `{"kind":"report","key":"daily-2024-05-01","priority":3}`)
	require.Equal(t, http.StatusOK, again.status, string(again.body))
	require.Equal(t, j1.ID, again.job(t).ID)
	require.Equal(t, before, b.snap())

	// Another tenant with the same key: a new job.
	other := b.submit(tokenB, body)
	require.Equal(t, http.StatusAccepted, other.status, string(other.body))
	require.NotEqual(t, j1.ID, other.job(t).ID)

	// Once the job finished, the key makes a new job.
	b.finish(j1.ID)
	fresh := b.submit(tokenA, body)
	require.Equal(t, http.StatusAccepted, fresh.status, string(fresh.body))
	j3 := fresh.job(t)
	require.NotEqual(t, j1.ID, j3.ID)
	joined := b.submit(tokenA, body)
	require.Equal(t, http.StatusOK, joined.status)
	require.Equal(t, j3.ID, joined.job(t).ID)
}

// TestRejectedWritesNothing sends one request of every rejected kind and
// checks that the store is exactly as before each.
func TestRejectedWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, caps(0, 1), maxBody(256))
	r := b.submit(tokenA, `{"kind":"fill"}`)
	require.Equal(t, http.StatusAccepted, r.status)

	cases := []struct {
		name   string
		r      req
		status int
		code   string
	}{
		{"429 tenant cap", req{token: tokenA, body: `{"kind":"x"}`}, http.StatusTooManyRequests, contracts.CodeTenantCap},
		{"400 bad json", req{token: tokenB, body: `{"kind":`}, http.StatusBadRequest, contracts.CodeInvalidJSON},
		{"413 too large", req{token: tokenB, body: `{"kind":"x","payload":"` + strings.Repeat("a", 300) + `"}`}, http.StatusRequestEntityTooLarge, contracts.CodeTooLarge},
		{"415 wrong type", req{token: tokenB, body: `{"kind":"x"}`, contentType: "text/plain"}, http.StatusUnsupportedMediaType, contracts.CodeUnsupportedMedia},
		{"422 invalid", req{token: tokenB, body: `{"kind":"x","priority":99}`}, http.StatusUnprocessableEntity, contracts.CodeValidation},
		{"401 no token", req{body: `{"kind":"x"}`}, http.StatusUnauthorized, contracts.CodeUnauthorized},
		{"401 bad token", req{token: "nope", body: `{"kind":"x"}`}, http.StatusUnauthorized, contracts.CodeUnauthorized},
	}
	for _, tc := range cases {
		before := b.snap()
		tc.r.method, tc.r.path = http.MethodPost, "/v1/jobs"
		got := b.do(tc.r)
		got.requireError(t, tc.status, tc.code)
		if tc.status == http.StatusUnauthorized {
			require.Equal(t, `Bearer realm="sluice"`, got.header.Get("WWW-Authenticate"))
			require.Contains(t, string(got.body), "Bearer <token>", "API JSON is not HTML-escaped")
		}
		require.Equal(t, before, b.snap(), tc.name)
	}
}
