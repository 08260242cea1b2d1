package httpapi

import (
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/gateway/internal/admission"
	"github.com/sluicehq/sluice/services/gateway/internal/auth"
	"github.com/sluicehq/sluice/services/gateway/internal/metrics"
)

// ipLimited applies the per-client-IP rate limit before anything else
// (authentication included, so token guessing is limited too).
func (a *api) ipLimited(next http.Handler) http.Handler {
	if a.IPLimit == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ok, wait := a.IPLimit.Allow(a.clientKey(r)); !ok {
			// The token is not read yet: the tenant is known in open mode only.
			var tenant string
			if a.Auth.Open() {
				tenant = auth.DefaultTenant
			}
			a.countRateLimitedSubmit(r, metrics.LimitIPRate)
			a.rateLimited(w, tenant, metrics.LimitIPRate, wait)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// tenantLimited applies the per-tenant rate limit to an authenticated
// request.
func (a *api) tenantLimited(next tenantHandler) tenantHandler {
	if a.TenantLimit == nil {
		return next
	}
	return func(w http.ResponseWriter, r *http.Request, tenant string) {
		if ok, wait := a.TenantLimit.Allow(tenant); !ok {
			a.countRateLimitedSubmit(r, metrics.LimitTenantRate)
			a.rateLimited(w, tenant, metrics.LimitTenantRate, wait)
			return
		}
		next(w, r, tenant)
	}
}

// tenantReadLimited applies the per-tenant read rate limit to an
// authenticated read request.
func (a *api) tenantReadLimited(next tenantHandler) tenantHandler {
	if a.TenantReadLimit == nil {
		return next
	}
	return func(w http.ResponseWriter, r *http.Request, tenant string) {
		if ok, wait := a.TenantReadLimit.Allow(tenant); !ok {
			a.rateLimited(w, tenant, metrics.LimitTenantReadRate, wait)
			return
		}
		next(w, r, tenant)
	}
}

// rateLimited answers 429 rate_limited naming the limit, with Retry-After
// in whole seconds (at least 1), and remembers the rejection of tenant's
// request (empty when unknown).
func (a *api) rateLimited(w http.ResponseWriter, tenant, limit string, wait time.Duration) {
	if a.Metrics != nil {
		a.Metrics.RateLimited(metrics.TransportHTTP, limit)
	}
	a.Rejections.Record(contracts.Rejection{Tenant: tenant, Limit: limit})
	secs := admission.RetryAfterSeconds(wait)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	writeJSON(w, http.StatusTooManyRequests, contracts.ErrorBody{Error: contracts.ErrorDetail{
		Code:    contracts.CodeRateLimited,
		Message: fmt.Sprintf("too many requests (%s), retry after %d s", rateName(limit), secs),
		Limit:   limit,
	}})
}

// The submit routes' patterns.
const (
	patternSubmit      = "POST /v1/jobs"
	patternSubmitBatch = "POST /v1/jobs/batch"
)

// countRateLimitedSubmit counts a rate-limited submit (not a cancel) as a
// rejected admission too.
func (a *api) countRateLimitedSubmit(r *http.Request, limit string) {
	if a.Metrics != nil && (r.Pattern == patternSubmit || r.Pattern == patternSubmitBatch) {
		a.Metrics.AdmissionRateLimited(limit)
	}
}

// clientKey is the rate-limit key of r's client (see Proxies.ClientIP):
// the IP address, or its /64 prefix for IPv6, since one IPv6 client
// usually holds a whole /64.
func (a *api) clientKey(r *http.Request) string {
	ip := a.TrustedProxies.ClientIP(r)
	switch {
	case !ip.IsValid():
		return r.RemoteAddr
	case ip.Is6():
		return netip.PrefixFrom(ip, 64).Masked().String()
	}
	return ip.String()
}

// rateName says which rate limit a limit word names, for messages.
func rateName(limit string) string {
	switch limit {
	case contracts.LimitIPRate:
		return "per-client-IP rate limit, SLUICE_GATEWAY_RATE_LIMIT_IP"
	case contracts.LimitTenantReadRate:
		return "per-tenant read rate limit, SLUICE_GATEWAY_RATE_LIMIT_TENANT_READ"
	}
	return "per-tenant rate limit, SLUICE_GATEWAY_RATE_LIMIT_TENANT"
}
