package store

import (
	"github.com/sluicehq/sluice/pkg/contracts"
)

// The admission rule. A new job takes its slots (contracts.Job.Slots) in
// the global counter and its tenant's, and its items
// (contracts.Job.HeldItems) in its tenant's items counter, each within its
// cap (0: no cap, the counter still counts); the first cap it does not fit
// under rejects it and nothing is written. A job with a dedup key that an
// active job of its tenant already holds joins that job instead (Joined),
// before any cap is looked at.
//
// The embedded driver reads the counters and decides in one transaction
// (DecideAdmission); the MongoDB driver takes each cap in turn with a
// conditional $inc that is CapCheck.Fits made atomic, giving back what it
// took when a later cap rejects.

// CapCheck is one cap a new job must fit under.
type CapCheck struct {
	// Scope is the counter: GlobalScope, TenantScope or ItemsScope.
	Scope string
	// Limit is the cap; 0 is none.
	Limit int
	// N is what the job takes of the counter.
	N int
	// Rejection is the outcome when the job does not fit.
	Rejection Admission
}

// Fits reports whether the job fits under the cap when the counter holds
// active.
func (k CapCheck) Fits(active int) bool { return k.Limit <= 0 || active+k.N <= k.Limit }

// CapChecks lists the caps job is admitted under, in the order they are
// checked: the global slots, the tenant's slots, the tenant's items.
func (c Caps) CapChecks(job contracts.Job) []CapCheck {
	slots, items := job.Slots(), job.HeldItems()
	return []CapCheck{
		{Scope: GlobalScope, Limit: c.Global, N: slots, Rejection: RejectedGlobal},
		{Scope: TenantScope(job.Tenant), Limit: c.Tenant, N: slots, Rejection: RejectedTenant},
		{Scope: ItemsScope(job.Tenant), Limit: c.TenantItems, N: items, Rejection: RejectedTenantItems},
	}
}

// DecideAdmission is the outcome of admitting job under caps when each
// counter holds active(scope): Admitted, or the rejection of the first cap
// it does not fit under.
func DecideAdmission(job contracts.Job, caps Caps, active func(scope string) int) Admission {
	for _, k := range caps.CapChecks(job) {
		if !k.Fits(active(k.Scope)) {
			return k.Rejection
		}
	}
	return Admitted
}
