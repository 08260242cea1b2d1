package contracts

import "time"

// MaxRecentRejections bounds Stats.RecentRejections: a gateway remembers
// this many of its latest 429 answers.
const MaxRecentRejections = 50

// The limits a 429 names: one vocabulary for the error body's "limit", the
// NATS submit reply, GET /v1/stats' recent rejections, the gateway's
// metrics (the "limit" label), the dashboard and the CLI.
const (
	// LimitGlobal is the global admission cap (SLUICE_MAX_ACTIVE).
	LimitGlobal = "global"
	// LimitTenant is the per-tenant admission cap (SLUICE_TENANT_MAX_ACTIVE).
	LimitTenant = "tenant"
	// LimitTenantRate is the per-tenant rate limit on submits and cancels
	// (SLUICE_GATEWAY_RATE_LIMIT_TENANT).
	LimitTenantRate = "tenant_rate"
	// LimitIPRate is the per-client-IP rate limit on HTTP submits and
	// cancels (SLUICE_GATEWAY_RATE_LIMIT_IP).
	LimitIPRate = "ip_rate"
	// LimitTenantItems is the per-tenant bound on items in flight
	// (SLUICE_GATEWAY_TENANT_MAX_ITEMS): its active jobs plus the items of its
	// active fan-outs.
	LimitTenantItems = "tenant_items"
	// LimitTenantReadRate is the per-tenant rate limit on the read routes
	// (SLUICE_GATEWAY_RATE_LIMIT_TENANT_READ).
	LimitTenantReadRate = "tenant_read_rate"
	// LimitTenantStreams is the per-tenant share of the gateway's open
	// event streams (SLUICE_GATEWAY_TENANT_MAX_STREAMS).
	LimitTenantStreams = "tenant_streams"
	// LimitTenantPins is the per-tenant share of the files the gateway
	// hashes at once for "sha256":"pin" (SLUICE_GATEWAY_TENANT_MAX_PINS).
	LimitTenantPins = "tenant_pins"
)

// LimitRequestItems is the bound on the items of one request
// (SLUICE_GATEWAY_MAX_ITEMS_PER_REQUEST): a 413 names it, never a 429, since
// sending the same request again cannot succeed.
const LimitRequestItems = "request_items"

// Limits429 is every limit a 429 may name, in the order above.
var Limits429 = []string{LimitGlobal, LimitTenant, LimitTenantRate, LimitIPRate, LimitTenantItems, LimitTenantReadRate, LimitTenantStreams, LimitTenantPins}

// ErrorLimits is every limit an error body may name: those of Limits429,
// and LimitRequestItems and LimitTenantRate on a 413 (a request larger
// than the limit can ever let through).
var ErrorLimits = []string{LimitGlobal, LimitTenant, LimitTenantRate, LimitIPRate, LimitTenantItems, LimitTenantReadRate, LimitTenantStreams, LimitTenantPins, LimitRequestItems}

// Rejection is one request the gateway turned away with 429, as GET
// /v1/stats lists it.
type Rejection struct {
	// At is when the gateway answered.
	At time.Time `json:"at"`
	// Tenant made the request; empty when the per-IP rate limit turned it
	// away before its token was read (token mode).
	Tenant string `json:"tenant,omitempty"`
	// Limit is the limit hit: one of Limits429.
	Limit string `json:"limit"`
}
