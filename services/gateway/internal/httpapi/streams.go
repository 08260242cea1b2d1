package httpapi

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/gateway/internal/metrics"
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

// streamPool counts the open event streams of the gateway and of each
// tenant. A tenant holds at most its share, so one tenant's streams never
// take every stream of the gateway: past its share it is refused (429),
// past the pool everyone is (503).
type streamPool struct {
	max, tenantMax int

	mu       sync.Mutex
	open     int
	byTenant map[string]int
}

// newStreamPool returns a pool of max streams, tenantMax per tenant (each
// 0 or less takes its default; tenantMax is cut to max).
func newStreamPool(max, tenantMax int) *streamPool {
	if max <= 0 {
		max = defaultMaxStreams
	}
	if tenantMax <= 0 {
		tenantMax = defaultTenantMaxStreams
	}
	return &streamPool{max: max, tenantMax: min(tenantMax, max), byTenant: map[string]int{}}
}

// streamRefusal says why a stream was refused.
type streamRefusal int

const (
	streamTaken streamRefusal = iota
	// streamTenantFull: the tenant holds its whole share.
	streamTenantFull
	// streamPoolFull: the gateway holds every stream.
	streamPoolFull
)

// take reserves one stream for tenant.
func (p *streamPool) take(tenant string) streamRefusal {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.byTenant[tenant] >= p.tenantMax:
		return streamTenantFull
	case p.open >= p.max:
		return streamPoolFull
	}
	p.open++
	p.byTenant[tenant]++
	return streamTaken
}

// release gives back one stream of tenant.
func (p *streamPool) release(tenant string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.open--
	if n := p.byTenant[tenant] - 1; n > 0 {
		p.byTenant[tenant] = n
	} else {
		delete(p.byTenant, tenant)
	}
}

// takeStream reserves one of the gateway's event streams for tenant, or
// answers 429 tenant_cap_reached (the tenant holds its share, limit
// tenant_streams) or 503 (every stream of the gateway is open), both with
// Retry-After, and reports false.
func (a *api) takeStream(w http.ResponseWriter, tenant string) bool {
	switch a.streams.take(tenant) {
	case streamTaken:
		return true
	case streamTenantFull:
		if a.Metrics != nil {
			a.Metrics.RateLimited(metrics.TransportHTTP, metrics.LimitTenantStreams)
		}
		a.Rejections.Record(contracts.Rejection{Tenant: tenant, Limit: contracts.LimitTenantStreams})
		w.Header().Set("Retry-After", strconv.Itoa(streamRetryAfter))
		writeJSON(w, http.StatusTooManyRequests, contracts.ErrorBody{Error: contracts.ErrorDetail{
			Code: contracts.CodeTenantCap,
			Message: fmt.Sprintf("this tenant already has %d open event streams, its share (SLUICE_GATEWAY_TENANT_MAX_STREAMS); close one or retry after %d s",
				a.streams.tenantMax, streamRetryAfter),
			Limit: contracts.LimitTenantStreams,
		}})
	default:
		w.Header().Set("Retry-After", strconv.Itoa(streamRetryAfter))
		writeError(w, http.StatusServiceUnavailable, contracts.CodeUnavailable, "too many open event streams on this gateway, try again later")
	}
	return false
}

// releaseStream gives back a stream takeStream reserved for tenant.
func (a *api) releaseStream(tenant string) { a.streams.release(tenant) }
