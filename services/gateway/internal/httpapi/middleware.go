package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/services/gateway/internal/auth"
	"github.com/sluicehq/sluice/services/gateway/internal/metrics"
)

// requestInfo is what a handler tells the middleware about its request:
// the tenant it served and the internal error behind a 5xx.
type requestInfo struct {
	tenant string
	cause  error
}

type infoKey struct{}

// infoOf returns the request's info holder (a throwaway one when the
// request did not come through instrument, as in handler-level tests).
func infoOf(r *http.Request) *requestInfo {
	if ri, ok := r.Context().Value(infoKey{}).(*requestInfo); ok {
		return ri
	}
	return &requestInfo{}
}

// noteCause records the internal error behind a failed request for the
// access log.
func noteCause(r *http.Request, err error) {
	if err != nil {
		infoOf(r).cause = err
	}
}

// statusWriter remembers the status a handler answered.
type statusWriter struct {
	http.ResponseWriter
	status int
}

// WriteHeader implements http.ResponseWriter.
func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the real writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// instrument wraps the whole API: default JSON headers, panic recovery,
// request metrics by route pattern, and the access log (debug for every
// request, error for 5xx with their cause). It never logs tokens, bodies or
// query strings.
func (a *api) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		h := w.Header()
		h.Set("Content-Type", contentTypeJSON)
		h.Set("X-Content-Type-Options", "nosniff")
		ri := &requestInfo{}
		r = r.WithContext(context.WithValue(r.Context(), infoKey{}, ri))
		sw := &statusWriter{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				ri.cause = fmt.Errorf("panic: %v", v)
				if sw.status == 0 {
					writeError(sw, http.StatusInternalServerError, contracts.CodeInternal, "internal error")
				}
			}
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			route := r.Pattern
			if route == "" {
				route = metrics.RouteUnmatched
			}
			took := time.Since(start)
			if a.Metrics != nil {
				a.Metrics.HTTPRequest(route, r.Method, status, took)
			}
			ev := a.Log.Debug()
			if status >= http.StatusInternalServerError {
				ev = a.Log.Error().Err(ri.cause)
			}
			if ri.tenant != "" {
				ev = ev.Str(observe.FieldTenant, ri.tenant)
			}
			ev.Str("method", r.Method).Str("route", route).Int("status", status).
				Dur("took", took).Msg("http request")
		}()
		next.ServeHTTP(sw, r)
	})
}

// tenantHandler is a handler that runs for an authenticated tenant.
type tenantHandler func(w http.ResponseWriter, r *http.Request, tenant string)

// authed resolves the request's tenant from its bearer token (or the
// default tenant in open mode) and answers 401 when it cannot. A request
// it cannot authenticate counts against its client's per-IP rate limit
// (429 ip_rate past it), so token guessing through the read routes and
// /metrics is limited as through the writing ones.
func (a *api) authed(h tenantHandler) http.Handler { return a.authedCharging(h, true) }

// authedCharging is authed; chargeIP false leaves out the per-IP charge
// of a failed authentication, for routes that charged every request
// before (ipLimited).
func (a *api) authedCharging(h tenantHandler, chargeIP bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		values := r.Header.Values("Authorization")
		var header string
		if len(values) == 1 {
			header = values[0]
		}
		tenant, err := a.Auth.HTTPTenant(header)
		if !a.Auth.Open() && len(values) > 1 {
			err = auth.ErrUnauthorized // two credentials: trust neither
		}
		if err != nil {
			if chargeIP && a.IPLimit != nil {
				if ok, wait := a.IPLimit.Allow(a.clientKey(r)); !ok {
					a.rateLimited(w, "", metrics.LimitIPRate, wait)
					return
				}
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="sluice"`)
			writeError(w, http.StatusUnauthorized, contracts.CodeUnauthorized, msgUnauthorized)
			return
		}
		infoOf(r).tenant = tenant
		h(w, r, tenant)
	})
}

// operatorOnly lets through a request of an operator tenant (Operators)
// and answers any other tenant 403.
func (a *api) operatorOnly(next http.Handler) tenantHandler {
	return func(w http.ResponseWriter, r *http.Request, tenant string) {
		if !a.Operators[tenant] {
			writeError(w, http.StatusForbidden, contracts.CodeForbidden,
				"this route needs an operator's token (SLUICE_GATEWAY_OPERATOR_TENANTS)")
			return
		}
		next.ServeHTTP(w, r)
	}
}
