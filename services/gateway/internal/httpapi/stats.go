package httpapi

import (
	"maps"
	"net/http"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// stats is GET /v1/stats. An operator (open mode, or a tenant of
// SLUICE_GATEWAY_OPERATOR_TENANTS) sees the whole system: the caps, the slots
// every active job holds, the counts by state, active jobs by tenant,
// this gateway's recent 429s, the schedulers' scale requests and the live
// workers. Any other tenant sees only itself: the caps, the slots its own
// jobs hold (active), its own jobs by state, its own entry in
// tenant_active and its own 429s; no worker, no scale request, nothing of
// another tenant.
func (a *api) stats(w http.ResponseWriter, r *http.Request, tenant string) {
	operator := a.Auth.Open() || a.Operators[tenant]
	c, err := a.Store.Stats(r.Context())
	if err != nil {
		noteCause(r, err)
		writeError(w, http.StatusServiceUnavailable, contracts.CodeUnavailable, msgUnavailable)
		return
	}
	out := contracts.Stats{
		MaxActive:       a.Caps.Global,
		TenantMaxActive: a.Caps.Tenant,
		Counts:          make(map[contracts.JobState]int, len(contracts.AllStates)),
		Workers:         []contracts.WorkerInfo{},
	}
	out.RecentRejections = a.Rejections.Recent(tenant, operator)
	if !operator {
		own, err := a.Store.TenantCounts(r.Context(), tenant)
		if err != nil {
			noteCause(r, err)
			writeError(w, http.StatusServiceUnavailable, contracts.CodeUnavailable, msgUnavailable)
			return
		}
		for _, s := range contracts.AllStates {
			out.Counts[s] = own[s]
		}
		out.Active = c.TenantActive[tenant]
		out.TenantActive = map[string]int{tenant: c.TenantActive[tenant]}
		writeJSON(w, http.StatusOK, out)
		return
	}
	out.Active = c.Slots()
	for _, s := range contracts.AllStates {
		out.Counts[s] = c.ByState[s]
	}
	out.TenantActive = maps.Clone(c.TenantActive)
	if out.TenantActive == nil {
		out.TenantActive = map[string]int{}
	}
	if a.Scaling != nil {
		out.RecentScaleRequests = a.Scaling.Recent()
	}
	if a.Roster != nil {
		if ws := a.Roster.Workers(); len(ws) > 0 {
			out.Workers = ws
		}
	}
	writeJSON(w, http.StatusOK, out)
}
