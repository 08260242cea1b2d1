package admission

import (
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/gateway/internal/metrics"
)

// bound applies the limits that bind before a request is decoded: its
// size in bytes, its items (the jobs of a batch plus the items of every
// fan-out in it, counted by one pass over the body that keeps nothing,
// see contracts.CountItems) and the per-tenant rate limit, which charges
// one token per item. It returns the refusal, or nil. A refused request
// has allocated no job and changed nothing.
func (a *Admitter) bound(tenant string, body []byte, batch bool) *Outcome {
	refuse := func(o Outcome) *Outcome { return &o }
	maxBytes := a.set.MaxBodyBytes
	if batch {
		maxBytes = a.set.MaxBatchBytes
	}
	if maxBytes > 0 && int64(len(body)) > maxBytes {
		return refuse(TooLarge(maxBytes))
	}
	limit := a.set.MaxItemsPerRequest
	burst := a.set.TenantLimit.Burst()
	// Counting stops past the larger bound: nothing above it is needed.
	n := contracts.CountItems(body, batch, max(limit, burst))
	if limit > 0 && n > limit {
		o := Fail(http.StatusRequestEntityTooLarge, contracts.CodeTooLarge, fmt.Sprintf(
			"the request holds more than %d items, the most one request may hold (SLUICE_GATEWAY_MAX_ITEMS_PER_REQUEST: each job, and each item of a fan-out, is one); split it",
			limit))
		o.Error.Limit = contracts.LimitRequestItems
		return &o
	}
	if a.set.TenantLimit == nil || n <= 1 {
		return nil // the transport took the one token
	}
	if n > burst {
		o := Fail(http.StatusRequestEntityTooLarge, contracts.CodeTooLarge, fmt.Sprintf(
			"the request costs more than %d rate-limit tokens, the per-tenant burst (SLUICE_GATEWAY_RATE_LIMIT_TENANT_BURST: each job, and each item of a fan-out, costs one); split it",
			burst))
		o.Error.Limit = contracts.LimitTenantRate
		return &o
	}
	ok, wait := a.set.TenantLimit.AllowN(tenant, n-1)
	if ok {
		return nil
	}
	a.metrics.AdmissionRateLimited(metrics.LimitTenantRate)
	a.set.Rejections.Record(contracts.Rejection{Tenant: tenant, Limit: contracts.LimitTenantRate})
	o := TenantRateLimited(fmt.Sprintf("per-tenant rate limit: this request costs %d tokens, one per job and per fan-out item", n), wait)
	return &o
}
