package httpapi

import (
	"maps"
	"net/http"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// stats is GET /v1/stats: the caps, the active count, counts by state
// (every state present), active jobs by tenant and this gateway's recent
// 429s (only the caller's in token mode) and the live workers.
func (a *api) stats(w http.ResponseWriter, r *http.Request, tenant string) {
	c, err := a.Store.Stats(r.Context())
	if err != nil {
		noteCause(r, err)
		writeError(w, http.StatusServiceUnavailable, contracts.CodeUnavailable, msgUnavailable)
		return
	}
	out := contracts.Stats{
		MaxActive:       a.Caps.Global,
		TenantMaxActive: a.Caps.Tenant,
		Active:          c.Slots(),
		Counts:          make(map[contracts.JobState]int, len(contracts.AllStates)),
		Workers:         []contracts.WorkerInfo{},
	}
	out.RecentRejections = a.Rejections.Recent(tenant, a.Auth.Open())
	if a.Scaling != nil {
		out.RecentScaleRequests = a.Scaling.Recent()
	}
	for _, s := range contracts.AllStates {
		out.Counts[s] = c.ByState[s]
	}
	if a.Auth.Open() {
		out.TenantActive = maps.Clone(c.TenantActive)
		if out.TenantActive == nil {
			out.TenantActive = map[string]int{}
		}
	} else {
		out.TenantActive = map[string]int{tenant: c.TenantActive[tenant]}
	}
	if a.Roster != nil {
		if ws := a.Roster.Workers(); len(ws) > 0 {
			out.Workers = ws
		}
	}
	writeJSON(w, http.StatusOK, out)
}
