package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/gateway/gateway"
	"github.com/sluicehq/sluice/services/gateway/internal/ratelimit"
)

// serveFrom sends one request straight to a gateway's handler as if it
// came from remoteAddr.
func serveFrom(h http.Handler, remoteAddr, method, path, token, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	r.RemoteAddr = remoteAddr
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec
}

// tokenFor is the token a request to path needs to be answered 200 by
// no one in particular: the operator's for /metrics in token mode, none
// for the other unauthenticated routes.
func tokenFor(b *bundle, path string) string {
	if path == "/metrics" {
		return b.metricsToken()
	}
	return ""
}

// recResponse turns a recorder into a response for the shared checks.
func recResponse(rec *httptest.ResponseRecorder) response {
	return response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

// requireRateLimited checks a 429 rate_limited answer naming limit with a
// Retry-After of want seconds (within 2% for long waits).
func requireRateLimited(tb testing.TB, r response, limit string, want int64) {
	tb.Helper()
	e := r.requireError(tb, http.StatusTooManyRequests, contracts.CodeRateLimited)
	require.Equal(tb, limit, e.Limit, string(r.body))
	got, err := strconv.ParseInt(r.header.Get("Retry-After"), 10, 64)
	require.NoError(tb, err, "Retry-After %q", r.header.Get("Retry-After"))
	if want < 100 {
		require.Equal(tb, want, got, "Retry-After")
		return
	}
	// A slow bucket refills a little while the test runs.
	require.LessOrEqual(tb, got, want, "Retry-After")
	require.GreaterOrEqual(tb, got, want-want/50, "Retry-After")
}

func TestRateLimitTenantBurst(t *testing.T) {
	t.Parallel()
	// 0.5/s: an empty bucket refills one token in 2s.
	b := setup(t, rateLimits(0.5, 3, 0, 0))
	var id string
	for i := range 3 {
		r := b.submit(tokenA, `{"kind":"x"}`)
		require.Equal(t, http.StatusAccepted, r.status, "request %d is within the burst", i+1)
		id = r.job(t).ID
	}
	before := b.snap()
	requireRateLimited(t, b.submit(tokenA, `{"kind":"x"}`), "tenant_rate", 2)
	// Cancel shares the tenant's bucket; a refused request takes no token
	// and writes nothing.
	requireRateLimited(t, b.do(req{method: http.MethodPost, path: "/v1/jobs/" + id + "/cancel", token: tokenA}), "tenant_rate", 2)
	require.Equal(t, before, b.snap())

	// Reads take from a bucket of their own: a tenant out of submits
	// still reads.
	for range 10 {
		require.Equal(t, http.StatusOK, b.do(req{method: http.MethodGet, path: "/v1/jobs/" + id, token: tokenA}).status)
		require.Equal(t, http.StatusOK, b.do(req{method: http.MethodGet, path: "/v1/stats", token: tokenA}).status)
	}
	// Authentication comes first: a bad token is 401, not 429.
	b.submit("wrong", `{"kind":"x"}`).requireError(t, http.StatusUnauthorized, contracts.CodeUnauthorized)

	// The refused submit is a rejected admission; the refused cancel is not.
	text := b.metricsText()
	require.Contains(t, text, `sluice_gateway_rate_limited_total{limit="tenant_rate",transport="http"} 2`)
	require.Contains(t, text, `sluice_gateway_admissions_total{limit="tenant_rate",outcome="rejected"} 1`)
	require.Contains(t, text, `sluice_gateway_admissions_total{limit="none",outcome="admitted"} 3`)
}

func TestRateLimitTenantsIndependent(t *testing.T) {
	t.Parallel()
	b := setup(t, rateLimits(0.001, 2, 0, 0))
	for range 2 {
		require.Equal(t, http.StatusAccepted, b.submit(tokenA, `{"kind":"a"}`).status)
	}
	requireRateLimited(t, b.submit(tokenA, `{"kind":"a"}`), "tenant_rate", 1000)

	// Tenant B still has its whole burst.
	for range 2 {
		require.Equal(t, http.StatusAccepted, b.submit(tokenB, `{"kind":"b"}`).status)
	}
	requireRateLimited(t, b.submit(tokenB, `{"kind":"b"}`), "tenant_rate", 1000)
	requireRateLimited(t, b.submit(tokenA, `{"kind":"a"}`), "tenant_rate", 1000)
}

func TestRateLimitPerIP(t *testing.T) {
	t.Parallel()
	b := setup(t, rateLimits(0, 0, 0.25, 4))
	h := b.gws[0].gw.Handler()
	const ip1, ip2 = "192.0.2.10:40000", "192.0.2.11:40000"
	submitFrom := func(addr, token string) *httptest.ResponseRecorder {
		return serveFrom(h, addr, http.MethodPost, "/v1/jobs", token, `{"kind":"ip"}`)
	}

	// One address, any tenant (or none: 401s count too), shares one bucket.
	require.Equal(t, http.StatusAccepted, submitFrom(ip1, tokenA).Code)
	require.Equal(t, http.StatusAccepted, submitFrom(ip1, tokenB).Code)
	require.Equal(t, http.StatusUnauthorized, submitFrom(ip1, "").Code)
	require.Equal(t, http.StatusAccepted, submitFrom("192.0.2.10:50000", tokenB).Code, "the port is not part of the key")
	for _, tok := range []string{tokenA, tokenB, "", "wrong"} {
		requireRateLimited(t, recResponse(submitFrom(ip1, tok)), "ip_rate", 4)
	}
	requireRateLimited(t, recResponse(serveFrom(h, ip1, http.MethodPost, "/v1/jobs/x/cancel", tokenA, "")), "ip_rate", 4)
	// Reads from that address still work.
	require.Equal(t, http.StatusOK, serveFrom(h, ip1, http.MethodGet, "/v1/stats", tokenA, "").Code)
	// Another address is not limited, for the same tenants.
	require.Equal(t, http.StatusAccepted, submitFrom(ip2, tokenA).Code)
	require.Equal(t, http.StatusAccepted, submitFrom(ip2, tokenB).Code)

	// X-Forwarded-For is not trusted.
	r := httptest.NewRequest(http.MethodPost, "/v1/jobs", strings.NewReader(`{"kind":"ip"}`))
	r.RemoteAddr = ip1
	r.Header.Set("X-Forwarded-For", "203.0.113.7")
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+tokenA)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	require.Equal(t, http.StatusTooManyRequests, rec.Code)

	// An IPv6 client counts by its /64.
	for i := range 4 {
		require.Equal(t, http.StatusAccepted, submitFrom(fmt.Sprintf("[2001:db8:1:2::%x]:443", i+1), tokenA).Code)
	}
	requireRateLimited(t, recResponse(submitFrom("[2001:db8:1:2:ffff::1]:1", tokenA)), "ip_rate", 4)
	require.Equal(t, http.StatusAccepted, submitFrom("[2001:db8:1:3::1]:1", tokenA).Code)

	// Over a real connection the address is the socket's.
	for range 4 {
		require.Equal(t, http.StatusAccepted, b.submit(tokenA, `{"kind":"ip"}`).status)
	}
	requireRateLimited(t, b.submit(tokenB, `{"kind":"ip"}`), "ip_rate", 4)
}

func TestRateLimitNeverOnHealthReadyMetricsOrReads(t *testing.T) {
	t.Parallel()
	b := setup(t, rateLimits(0.001, 1, 0.001, 1))
	// Both servers run the same handler, so 127.0.0.1 has one bucket.
	id := b.submit(tokenA, `{"kind":"x"}`).job(t).ID
	for _, base := range []string{b.gws[0].srv.URL, b.gws[0].serveURL} {
		requireRateLimited(t, b.doOn(base, req{method: http.MethodPost, path: "/v1/jobs", token: tokenB, body: `{"kind":"x"}`}), "ip_rate", 1000)
		for range 20 {
			for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
				r := b.doOn(base, req{method: http.MethodGet, path: p, token: tokenFor(b, p)})
				require.Equal(t, http.StatusOK, r.status, "%s: %s", p, r.body)
			}
			for _, p := range []string{"/v1/stats", "/v1/jobs", "/v1/jobs/" + id} {
				r := b.doOn(base, req{method: http.MethodGet, path: p, token: tokenA})
				require.Equal(t, http.StatusOK, r.status, "%s: %s", p, r.body)
			}
		}
	}
	// Nor does the tenant limiter.
	h := b.gws[0].gw.Handler()
	requireRateLimited(t, recResponse(serveFrom(h, "192.0.2.99:1", http.MethodPost, "/v1/jobs", tokenA, `{"kind":"x"}`)), "tenant_rate", 1000)
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		require.Equal(t, http.StatusOK, serveFrom(h, "192.0.2.99:1", http.MethodGet, p, tokenFor(b, p), "").Code, p)
	}
	require.Equal(t, http.StatusOK, serveFrom(h, "192.0.2.99:1", http.MethodGet, "/v1/jobs/"+id, tokenA, "").Code)

	text := b.metricsText()
	require.Contains(t, text, `sluice_gateway_rate_limited_total{limit="ip_rate",transport="http"} 2`)
	require.Contains(t, text, `sluice_gateway_rate_limited_total{limit="tenant_rate",transport="http"} 1`)
	require.Contains(t, text, `sluice_gateway_rate_limited_total{limit="tenant_rate",transport="nats"} 0`)
	require.Contains(t, text, `sluice_gateway_admissions_total{limit="ip_rate",outcome="rejected"} 2`)
	require.Contains(t, text, `sluice_gateway_admissions_total{limit="tenant_rate",outcome="rejected"} 1`)
}

func TestRateLimitZeroDisables(t *testing.T) {
	t.Parallel()
	// A burst of 1 would refuse the second request if the limits were on.
	b := setup(t, rateLimits(0, 1, 0, 1))
	h := b.gws[0].gw.Handler()
	for i := range 60 {
		rec := serveFrom(h, "192.0.2.1:1", http.MethodPost, "/v1/jobs/missing/cancel", tokenA, "")
		require.Equal(t, http.StatusNotFound, rec.Code, "request %d: %s", i, rec.Body.Bytes())
	}
	for range 20 {
		require.Equal(t, http.StatusAccepted, b.submit(tokenB, `{"kind":"x"}`).status)
		got := b.natsSubmit(map[string]string{contracts.HeaderToken: tokenB}, `{"kind":"x"}`)
		require.Equal(t, http.StatusAccepted, got.Status)
	}
	tenants, ips := gateway.RateLimitKeys(b.gws[0].gw)
	require.Zero(t, tenants)
	require.Zero(t, ips)
}

func TestRateLimitMapBounded(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := b.gws[0].gw.Handler()
	const clients = ratelimit.DefaultMaxKeys + 2000
	for i := range clients {
		addr := fmt.Sprintf("10.%d.%d.%d:1234", i>>16&255, i>>8&255, i&255)
		// No token: a cheap 401 after the IP check.
		rec := serveFrom(h, addr, http.MethodPost, "/v1/jobs", "", `{"kind":"x"}`)
		require.Equal(t, http.StatusUnauthorized, rec.Code)
	}
	_, ips := gateway.RateLimitKeys(b.gws[0].gw)
	require.Equal(t, ratelimit.DefaultMaxKeys, ips, "the per-IP map is capped")
	// The tenant map is bounded the same way (open mode lets NATS clients
	// name any tenant); internal/ratelimit checks eviction with a small cap.
}

func TestRateLimitNATSSubmit(t *testing.T) {
	t.Parallel()
	b := setup(t, rateLimits(0.001, 2, 0, 0))
	tokA := map[string]string{contracts.HeaderToken: tokenA}
	for range 2 {
		require.Equal(t, http.StatusAccepted, b.natsSubmit(tokA, `{"kind":"n"}`).Status)
	}
	before := b.snap()
	got := b.natsSubmit(tokA, `{"kind":"n"}`)
	require.Equal(t, http.StatusTooManyRequests, got.Status)
	require.NotNil(t, got.Error)
	require.Equal(t, contracts.CodeRateLimited, got.Error.Code)
	require.Equal(t, "tenant_rate", got.Error.Limit)
	require.NotEmpty(t, got.Error.Message)
	require.Nil(t, got.Job)
	require.InDelta(t, 1_000_000, got.RetryAfterMS, 10_000, "one token at 0.001/s")
	require.Equal(t, before, b.snap(), "a rate-limited submit writes nothing")

	// HTTP shares the tenant's bucket; the other tenant is untouched.
	requireRateLimited(t, b.submit(tokenA, `{"kind":"n"}`), "tenant_rate", 1000)
	require.Equal(t, http.StatusAccepted, b.natsSubmit(map[string]string{contracts.HeaderToken: tokenB}, `{"kind":"n"}`).Status)

	// Authentication still comes first.
	require.Equal(t, http.StatusUnauthorized, b.natsSubmit(map[string]string{contracts.HeaderToken: "nope"}, `{"kind":"n"}`).Status)

	text := b.metricsText()
	require.Contains(t, text, `sluice_gateway_rate_limited_total{limit="tenant_rate",transport="nats"} 1`)
	require.Contains(t, text, `sluice_gateway_rate_limited_total{limit="tenant_rate",transport="http"} 1`)
	require.Contains(t, text, `sluice_gateway_admissions_total{limit="tenant_rate",outcome="rejected"} 2`)
}

// TestRateLimitSharedAcrossGateways: two gateways behind one load
// balancer let a tenant through at its rate, not at twice its rate.
func TestRateLimitSharedAcrossGateways(t *testing.T) {
	t.Parallel()
	const perSecond, burst = 5, 5
	b := setup(t, rateLimits(perSecond, burst, 0, 0), func(c *gateway.Config) {
		c.RateLimitShare = 20 * time.Millisecond
	})
	b.addGateway()
	var allowed [2]int
	start := time.Now()
	for i := 0; time.Since(start) < 2*time.Second; i++ {
		r := b.doOn(b.gws[i%2].srv.URL, req{method: http.MethodPost, path: "/v1/jobs", token: tokenA, body: `{"kind":"lb"}`})
		switch r.status {
		case http.StatusAccepted:
			allowed[i%2]++
		case http.StatusTooManyRequests:
			requireRateLimited(t, r, "tenant_rate", 1)
		default:
			t.Fatalf("unexpected answer %d: %s", r.status, r.body)
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start).Seconds()
	// One gateway alone lets through burst + rate × elapsed; two that do
	// not share, twice that.
	one := burst + perSecond*elapsed
	total := float64(allowed[0] + allowed[1])
	require.LessOrEqual(t, total, 1.25*one+2, "allowed %v in %.1fs", allowed, elapsed)
	require.GreaterOrEqual(t, total, 0.6*one, "allowed %v in %.1fs", allowed, elapsed)
	t.Logf("allowed %v in %.1fs", allowed, elapsed)
	require.Positive(t, allowed[0])
	require.Positive(t, allowed[1])
}

// TestRateLimitTrustedProxies: behind a trusted load balancer each
// client has its own bucket, named by X-Forwarded-For; from any other
// peer the header is ignored.
func TestRateLimitTrustedProxies(t *testing.T) {
	t.Parallel()
	b := setup(t, rateLimits(0, 0, 0.001, 2), func(c *gateway.Config) {
		c.TrustedProxies = []string{"10.0.0.0/8"}
	})
	h := b.gws[0].gw.Handler()
	via := func(peer, forwarded string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/v1/jobs", strings.NewReader(`{"kind":"lb"}`))
		r.RemoteAddr = peer
		r.Header.Set("X-Forwarded-For", forwarded)
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+tokenA)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec
	}
	const lb1, lb2 = "10.0.0.5:40000", "10.0.0.6:40000"
	// Client 203.0.113.1 through either balancer: one bucket.
	require.Equal(t, http.StatusAccepted, via(lb1, "203.0.113.1").Code)
	require.Equal(t, http.StatusAccepted, via(lb2, "203.0.113.1").Code)
	requireRateLimited(t, recResponse(via(lb1, "203.0.113.1")), "ip_rate", 1000)
	// A forged hop to the left changes nothing: the balancer appended the
	// real address.
	requireRateLimited(t, recResponse(via(lb2, "198.51.100.1, 203.0.113.1")), "ip_rate", 1000)
	// Another client behind the same balancer has its own bucket.
	require.Equal(t, http.StatusAccepted, via(lb1, "203.0.113.2").Code)
	// An untrusted peer is the client, whatever it forwards.
	require.Equal(t, http.StatusAccepted, via("192.0.2.50:1", "203.0.113.3").Code)
	require.Equal(t, http.StatusAccepted, via("192.0.2.50:1", "203.0.113.4").Code)
	requireRateLimited(t, recResponse(via("192.0.2.50:1", "203.0.113.5")), "ip_rate", 1000)

	_, err := gateway.LoadConfig(map[string]string{"SLUICE_GATEWAY_TRUSTED_PROXIES": "10.0.0.0/8,lb.internal"})
	require.ErrorContains(t, err, "SLUICE_GATEWAY_TRUSTED_PROXIES")
	cfg, err := gateway.LoadConfig(map[string]string{"SLUICE_GATEWAY_TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.1"})
	require.NoError(t, err)
	require.Len(t, cfg.TrustedProxies, 2)
}

func TestRateLimitConfig(t *testing.T) {
	t.Parallel()
	cfg := gateway.DefaultConfig()
	require.InDelta(t, 2000, cfg.RateLimitTenant, 0)
	require.Equal(t, 20000, cfg.RateLimitTenantBurst)
	require.InDelta(t, 100, cfg.RateLimitIP, 0)
	require.Equal(t, 200, cfg.RateLimitIPBurst)

	cfg, err := gateway.LoadConfig(map[string]string{
		"SLUICE_GATEWAY_RATE_LIMIT_TENANT": "0.5", "SLUICE_GATEWAY_RATE_LIMIT_TENANT_BURST": "3",
		"SLUICE_GATEWAY_RATE_LIMIT_IP": "0", "SLUICE_GATEWAY_RATE_LIMIT_IP_BURST": "0",
	})
	require.NoError(t, err)
	require.InDelta(t, 0.5, cfg.RateLimitTenant, 0)
	require.Equal(t, 3, cfg.RateLimitTenantBurst)
	require.Zero(t, cfg.RateLimitIP)

	for _, tc := range []struct{ variable, value string }{
		{"SLUICE_GATEWAY_RATE_LIMIT_TENANT", "-1"},
		{"SLUICE_GATEWAY_RATE_LIMIT_TENANT", "fast"},
		{"SLUICE_GATEWAY_RATE_LIMIT_TENANT", "NaN"},
		{"SLUICE_GATEWAY_RATE_LIMIT_TENANT", "+Inf"},
		{"SLUICE_GATEWAY_RATE_LIMIT_TENANT_BURST", "0"},
		{"SLUICE_GATEWAY_RATE_LIMIT_TENANT_BURST", "-5"},
		{"SLUICE_GATEWAY_RATE_LIMIT_IP", "-0.1"},
		{"SLUICE_GATEWAY_RATE_LIMIT_IP_BURST", "0"},
		{"SLUICE_GATEWAY_RATE_LIMIT_IP_BURST", "many"},
		{"SLUICE_GATEWAY_RATE_LIMIT_IP_BURST", "99999999999"},
	} {
		_, err := gateway.LoadConfig(map[string]string{tc.variable: tc.value})
		require.Error(t, err, "%s=%s", tc.variable, tc.value)
		require.Contains(t, err.Error(), tc.variable, "%s=%s", tc.variable, tc.value)
	}
}

// TestUnauthenticatedReadsCountPerIP: a GET that fails authentication (no
// token, an unknown one), on the read routes and /metrics, counts against
// the client's per-IP limit (429 ip_rate past it), while authenticated
// reads do not. (Before, reads with bad tokens were never limited per IP:
// token guessing went unbounded through them.)
func TestUnauthenticatedReadsCountPerIP(t *testing.T) {
	t.Parallel()
	b := setup(t, rateLimits(0, 0, 0.001, 3))
	h := b.gws[0].gw.Handler()
	const guesser = "198.51.100.7:1"
	guesses := []struct{ path, token string }{
		{"/v1/jobs", ""}, {"/v1/stats", "guess-1"}, {"/metrics", "guess-2"},
	}
	for _, g := range guesses {
		r := recResponse(serveFrom(h, guesser, http.MethodGet, g.path, g.token, ""))
		r.requireError(t, http.StatusUnauthorized, contracts.CodeUnauthorized)
	}
	for _, g := range append(guesses, struct{ path, token string }{"/v1/jobs/x1", "guess-3"}) {
		requireRateLimited(t, recResponse(serveFrom(h, guesser, http.MethodGet, g.path, g.token, "")), "ip_rate", 1000)
	}
	// A guess that happens to be right still goes through: the bucket
	// counts failures, not the tenants' reads.
	for range 5 {
		require.Equal(t, http.StatusOK, serveFrom(h, guesser, http.MethodGet, "/v1/jobs", tokenA, "").Code)
	}
	// Another client has its own bucket.
	require.Equal(t, http.StatusUnauthorized, serveFrom(h, "198.51.100.8:1", http.MethodGet, "/v1/jobs", "guess-4", "").Code)
}
