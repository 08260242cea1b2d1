package gateway

import "time"

// SetServerTimeouts shortens the HTTP server's timeouts for tests; call it
// before Serve.
func SetServerTimeouts(g *Gateway, readHeader, read, write, idle time.Duration) {
	g.timeouts = serverTimeouts{readHeader: readHeader, read: read, write: write, idle: idle}
}

// RateLimitKeys is how many keys the per-tenant and per-IP limiters hold.
func RateLimitKeys(g *Gateway) (tenants, ips int) {
	return g.tenantLimit.Len(), g.ipLimit.Len()
}

// Routes lists the gateway's HTTP routes as "METHOD pattern".
func Routes(g *Gateway) []string { return g.handler.Routes() }
