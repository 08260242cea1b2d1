package httpapi

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/gateway/internal/metrics"
	"github.com/sluicehq/sluice/services/gateway/internal/ratelimit"
)

// Default bounds of the open event streams of one gateway.
const (
	// defaultMaxStreams bounds the open event streams of one gateway
	// (SLUICE_GATEWAY_MAX_STREAMS).
	defaultMaxStreams = 1000
	// defaultTenantMaxStreams bounds one tenant's share of them
	// (SLUICE_GATEWAY_TENANT_MAX_STREAMS).
	defaultTenantMaxStreams = 100
	// streamRetryAfter is the Retry-After of a refused stream, in seconds.
	streamRetryAfter = 5
)

// newStreamPool returns the pool of the gateway's open event streams:
// max in all, tenantMax per tenant (each 0 or less takes its default;
// tenantMax is cut to max). A tenant holds at most its share, so one
// tenant's streams never take every stream of the gateway: past its share
// it is refused (429), past the pool everyone is (503).
func newStreamPool(max, tenantMax int) *ratelimit.Pool {
	if max <= 0 {
		max = defaultMaxStreams
	}
	if tenantMax <= 0 {
		tenantMax = defaultTenantMaxStreams
	}
	return ratelimit.NewPool(max, tenantMax)
}

// takeStream reserves one of the gateway's event streams for tenant, or
// answers 429 tenant_cap_reached (the tenant holds its share, limit
// tenant_streams) or 503 (every stream of the gateway is open), both with
// Retry-After, and reports false.
func (a *api) takeStream(w http.ResponseWriter, tenant string) bool {
	switch a.streams.Take(tenant) {
	case ratelimit.PoolTaken:
		return true
	case ratelimit.PoolKeyFull:
		if a.Metrics != nil {
			a.Metrics.RateLimited(metrics.TransportHTTP, metrics.LimitTenantStreams)
		}
		a.Rejections.Record(contracts.Rejection{Tenant: tenant, Limit: contracts.LimitTenantStreams})
		w.Header().Set("Retry-After", strconv.Itoa(streamRetryAfter))
		writeJSON(w, http.StatusTooManyRequests, contracts.ErrorBody{Error: contracts.ErrorDetail{
			Code: contracts.CodeTenantCap,
			Message: fmt.Sprintf("this tenant already has %d open event streams, its share (SLUICE_GATEWAY_TENANT_MAX_STREAMS); close one or retry after %d s",
				a.streams.KeyMax(), streamRetryAfter),
			Limit: contracts.LimitTenantStreams,
		}})
	default:
		w.Header().Set("Retry-After", strconv.Itoa(streamRetryAfter))
		writeError(w, http.StatusServiceUnavailable, contracts.CodeUnavailable, "too many open event streams on this gateway, try again later")
	}
	return false
}

// releaseStream gives back a stream takeStream reserved for tenant.
func (a *api) releaseStream(tenant string) { a.streams.Release(tenant) }
