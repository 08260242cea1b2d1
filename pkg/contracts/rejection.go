package contracts

import "time"

// MaxRecentRejections bounds Stats.RecentRejections: a gateway remembers
// this many of its latest 429 answers.
const MaxRecentRejections = 50

// Limits a Rejection names.
const (
	// RejectGlobal is the global admission cap (SLUICE_MAX_ACTIVE).
	RejectGlobal = "global"
	// RejectTenant is the per-tenant admission cap (SLUICE_TENANT_MAX_ACTIVE).
	RejectTenant = "tenant"
	// RejectRate is a rate limit on submits and cancels; Rejection.RateLimit
	// says which one.
	RejectRate = "rate"
)

// Rejection is one request the gateway turned away with 429, as GET
// /v1/stats lists it.
type Rejection struct {
	// At is when the gateway answered.
	At time.Time `json:"at"`
	// Tenant made the request; empty when the per-IP rate limit turned it
	// away before its token was read (token mode).
	Tenant string `json:"tenant,omitempty"`
	// Limit is the limit hit: RejectGlobal, RejectTenant or RejectRate.
	Limit string `json:"limit"`
	// RateLimit names the rate limit ("tenant" or "ip") when Limit is
	// RejectRate.
	RateLimit string `json:"rate_limit,omitempty"`
}
