// Package httpapi is the gateway's HTTP API v1: routing, authentication,
// the handlers and their JSON error bodies, and the middleware every
// response goes through (security headers, panic recovery, metrics, the
// access log).
//
// Every answer is JSON, including the 404 and 405 the router itself gives
// for unknown routes and wrong methods. Submit and cancel are rate limited
// per client IP and per tenant (429 rate_limited, limit ip_rate or
// tenant_rate); the authenticated read routes per tenant, in a bucket of
// their own (limit tenant_read_rate); each tenant holds at most its share
// of the open event streams (429, limit tenant_streams). Health,
// readiness, the OpenAPI document and the dashboard's page are never rate
// limited and need no token; in token mode /metrics needs an operator's
// token (unless MetricsAuth is off).
package httpapi

import (
	"net/http"
	"path"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/bus/roster"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/gateway/internal/admission"
	"github.com/sluicehq/sluice/services/gateway/internal/auth"
	"github.com/sluicehq/sluice/services/gateway/internal/cancel"
	"github.com/sluicehq/sluice/services/gateway/internal/dashboard"
	"github.com/sluicehq/sluice/services/gateway/internal/eventid"
	"github.com/sluicehq/sluice/services/gateway/internal/metrics"
	"github.com/sluicehq/sluice/services/gateway/internal/openapi"
	"github.com/sluicehq/sluice/services/gateway/internal/ratelimit"
	"github.com/sluicehq/sluice/services/gateway/internal/rejections"
	"github.com/sluicehq/sluice/services/gateway/internal/scaling"
)

// contentTypeJSON is the Content-Type of every API answer.
const contentTypeJSON = "application/json"

// Deps is everything the HTTP API uses.
type Deps struct {
	// Store answers reads and stats.
	Store store.Store
	// Admitter runs submits.
	Admitter *admission.Admitter
	// Canceller runs cancels.
	Canceller *cancel.Canceller
	// Auth resolves the tenant of every /v1 request.
	Auth *auth.Authenticator
	// Roster lists live workers in /v1/stats (nil = none).
	Roster *roster.Roster
	// Probe serves /healthz and /readyz (nil = not served).
	Probe *observe.Probe
	// Metrics counts requests (nil = not counted).
	Metrics *metrics.Metrics
	// Gatherer is served on /metrics (nil = not served).
	Gatherer prometheus.Gatherer
	// Log is the access and error log.
	Log zerolog.Logger

	// MaxBodyBytes bounds a submit body.
	MaxBodyBytes int64
	// MaxBatchBytes bounds a batch submit's body (0 = MaxBodyBytes).
	MaxBatchBytes int64
	// Caps are shown in /v1/stats.
	Caps store.Caps
	// TenantLimit rate-limits submits and cancels per tenant (nil = off).
	TenantLimit *ratelimit.Limiter
	// TenantReadLimit rate-limits the authenticated read routes (jobs,
	// events, stats) per tenant (nil = off).
	TenantReadLimit *ratelimit.Limiter
	// Operators are the tenants whose /v1/stats shows the whole system
	// (every tenant's counts, the workers, every rejection and scale
	// request); any other tenant sees its own in token mode.
	Operators map[string]bool
	// MetricsAuth makes /metrics, in token mode, answer only an
	// operator's token (401 without a valid token, 403 with another's).
	MetricsAuth bool
	// IPLimit rate-limits submits and cancels per client IP (nil = off).
	IPLimit *ratelimit.Limiter
	// TrustedProxies may name the client in X-Forwarded-For (nil = none:
	// the connection's peer is the client).
	TrustedProxies Proxies
	// Rejections remembers recent 429s for /v1/stats (nil = none); the
	// admitter records the cap rejections in the same log.
	Rejections *rejections.Log
	// Scaling holds the latest scale requests (nil = none shown).
	Scaling *scaling.Log
	// JS reads the event stream for the SSE routes (nil = job streams
	// follow the store alone, the tenant stream is unavailable).
	JS jetstream.JetStream
	// MaxStreams bounds the open event streams (0 = 1000).
	MaxStreams int
	// TenantMaxStreams bounds one tenant's open event streams (0 = 100,
	// and never more than MaxStreams).
	TenantMaxStreams int
}

// api holds the handlers' dependencies.
type api struct {
	Deps
	// streams counts the open event streams, per tenant too.
	streams *ratelimit.Pool
	// eventIDs makes the event ids of the streams, under a key every
	// gateway with the same tokens derives alike.
	eventIDs *eventid.Codec
}

// EventIDs is the codec of the event ids the API gives (eventid), under
// a key derived from the tokens, so that every gateway with the same
// SLUICE_API_TOKENS makes and reads the same ids.
func EventIDs(au *auth.Authenticator) *eventid.Codec {
	return eventid.New(au.Key("event ids"))
}

// Handler is the HTTP API: every route behind the shared middleware.
type Handler struct {
	http.Handler
	routes []string
}

// Routes lists every route the API serves as "METHOD pattern", in the
// http.ServeMux pattern syntax, in the order they were registered.
func (h *Handler) Routes() []string { return append([]string(nil), h.routes...) }

// recordingMux registers routes on a ServeMux and remembers their patterns.
type recordingMux struct {
	*http.ServeMux
	patterns []string
}

// Handle implements observe.Router.
func (m *recordingMux) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	m.ServeMux.Handle(pattern, h)
}

// New returns the HTTP API as one handler.
func New(d Deps) *Handler {
	a := &api{Deps: d, streams: newStreamPool(d.MaxStreams, d.TenantMaxStreams),
		eventIDs: EventIDs(d.Auth)}
	mux := &recordingMux{ServeMux: http.NewServeMux()}
	// The writing /v1 routes are rate limited per client IP (before
	// authentication, so token guessing is limited too), then per tenant.
	// The reading /v1 routes are rate limited per tenant in a bucket of
	// their own, so reads (a dashboard, pollers, event streams) never use
	// up a tenant's submits, and a read flood never stalls the store for
	// the other tenants. A read that fails authentication counts against
	// the per-IP limit (authed), so nobody guesses tokens through the
	// reads either. Health, readiness, an operator's metrics, the OpenAPI
	// document and the dashboard's page are never rate limited.
	write := func(h tenantHandler) http.Handler { return a.ipLimited(a.authedCharging(a.tenantLimited(h), false)) }
	read := func(h tenantHandler) http.Handler { return a.authed(a.tenantReadLimited(h)) }
	mux.Handle(patternSubmit, write(a.submit))
	mux.Handle(patternSubmitBatch, write(a.submitBatch))
	mux.Handle("POST /v1/jobs/{id}/cancel", write(a.cancelJob))
	mux.Handle("GET /v1/jobs", read(a.listJobs))
	mux.Handle("GET /v1/jobs/{id}", read(a.getJob))
	mux.Handle("GET /v1/jobs/{id}/events", read(a.jobEvents))
	mux.Handle("GET /v1/events", read(a.tenantEvents))
	mux.Handle("GET /v1/stats", read(a.stats))
	mux.Handle("GET /openapi.json", openapi.Handler())
	// The dashboard page and its embedded assets need no token: the page
	// asks the user for one and sends it to the API itself.
	dash := dashboard.New()
	mux.Handle("GET /{$}", dash)
	mux.Handle("GET "+dashboard.AssetPrefix+"{file}", dash)
	if d.Probe != nil {
		d.Probe.Register(mux)
	}
	if d.Gatherer != nil {
		var metrics http.Handler = promhttp.HandlerFor(d.Gatherer, promhttp.HandlerOpts{})
		if d.MetricsAuth && !d.Auth.Open() {
			// Every tenant's activity: for operators only.
			metrics = a.authed(a.operatorOnly(metrics))
		}
		mux.Handle("GET /metrics", metrics)
	}
	return &Handler{Handler: a.instrument(router{mux: mux.ServeMux}), routes: mux.patterns}
}

// router serves the mux, answering in JSON where the mux itself would
// answer in plain text: unknown routes (404), wrong methods (405) and
// non-canonical paths (404 instead of a redirect).
type router struct {
	mux *http.ServeMux
}

// ServeHTTP implements http.Handler.
func (rt router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.EscapedPath()
	if p == "" || p[0] != '/' || path.Clean(p) != p {
		writeError(w, http.StatusNotFound, contracts.CodeNotFound, "no such route")
		return
	}
	if _, pattern := rt.mux.Handler(r); pattern == "" {
		rt.mux.ServeHTTP(&fallbackWriter{ResponseWriter: w}, r)
		return
	}
	rt.mux.ServeHTTP(w, r)
}

// fallbackWriter turns the mux's plain-text 404 and 405 answers into JSON
// error bodies and lets anything else through unchanged.
type fallbackWriter struct {
	http.ResponseWriter
	wrote, pass bool
}

// WriteHeader implements http.ResponseWriter.
func (f *fallbackWriter) WriteHeader(code int) {
	if f.wrote {
		return
	}
	f.wrote = true
	switch code {
	case http.StatusNotFound:
		writeError(f.ResponseWriter, code, contracts.CodeNotFound, "no such route")
	case http.StatusMethodNotAllowed:
		msg := "method not allowed"
		if allow := f.Header().Get("Allow"); allow != "" {
			msg += "; allowed: " + allow
		}
		writeError(f.ResponseWriter, code, contracts.CodeMethodNotAllowed, msg)
	default:
		f.pass = true
		f.ResponseWriter.WriteHeader(code)
	}
}

// Write implements http.ResponseWriter; the mux's own text is dropped.
func (f *fallbackWriter) Write(b []byte) (int, error) {
	if !f.wrote {
		f.WriteHeader(http.StatusOK)
	}
	if f.pass {
		return f.ResponseWriter.Write(b)
	}
	return len(b), nil
}

// Unwrap lets http.ResponseController reach the real writer.
func (f *fallbackWriter) Unwrap() http.ResponseWriter { return f.ResponseWriter }
