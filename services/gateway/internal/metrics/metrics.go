// Package metrics defines the gateway's Prometheus metrics in one place so
// that the HTTP API, the NATS API and admission count the same things under
// the same names.
package metrics

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"

	"github.com/prometheus/client_golang/prometheus"
)

// Admission outcome label values of sluice_gateway_admissions_total.
const (
	OutcomeAdmitted = "admitted"
	OutcomeJoined   = "joined"
	OutcomeRejected = "rejected"
)

// Limit label values: "none" for an admission nothing limited, otherwise
// the limit a 429 names (contracts.LimitGlobal, LimitTenant,
// LimitTenantRate, LimitIPRate), the same word as in the error body and in
// /v1/stats.
const (
	LimitNone       = "none"
	LimitGlobal     = contracts.LimitGlobal
	LimitTenant     = contracts.LimitTenant
	LimitTenantRate = contracts.LimitTenantRate
	LimitIPRate     = contracts.LimitIPRate
	// LimitTenantItems is the bound on a tenant's items in flight.
	LimitTenantItems = contracts.LimitTenantItems
	// LimitTenantReadRate and LimitTenantStreams refuse reads and event
	// streams: they count in RateLimited, never as admissions.
	LimitTenantReadRate = contracts.LimitTenantReadRate
	LimitTenantStreams  = contracts.LimitTenantStreams
	// LimitTenantPins is the tenant's share of the files hashed at once
	// for pins: a rejected admission.
	LimitTenantPins = contracts.LimitTenantPins
)

// Transport label values of sluice_gateway_rate_limited_total.
const (
	TransportHTTP = "http"
	TransportNATS = "nats"
)

// RouteUnmatched labels requests that matched no route.
const RouteUnmatched = "unmatched"

// Metrics are the gateway's collectors. The zero value is not usable; build
// one with New.
type Metrics struct {
	admissions      *prometheus.CounterVec
	httpRequests    *prometheus.CounterVec
	httpDuration    *prometheus.HistogramVec
	publishFailures prometheus.Counter
	rateLimited     *prometheus.CounterVec
	repliesRefused  *prometheus.CounterVec
}

// New creates the gateway's collectors and registers them with reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("metrics: nil registerer")
	}
	m := &Metrics{
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_gateway_admissions_total",
			Help: "Submit requests, by outcome (admitted, joined, rejected) and by the limit that rejected them (global, tenant, tenant_items: the active caps; tenant_rate, ip_rate: the rate limits; tenant_pins: the tenant's share of the files hashed at once; none).",
		}, []string{"outcome", "limit"}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_gateway_http_requests_total",
			Help: "HTTP requests served, by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_gateway_http_request_duration_seconds",
			Help:    "Time to serve an HTTP request, by route pattern and method.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "method"}),
		publishFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_gateway_due_publish_failures_total",
			Help: "Delayed jobs whose due message could not be published (a scheduler's poll finds them when due).",
		}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_gateway_rate_limited_total",
			Help: "Requests refused with 429 rate_limited, by transport and by the limit hit (tenant_rate, ip_rate, tenant_read_rate or tenant_streams).",
		}, []string{"transport", "limit"}),
		repliesRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_gateway_nats_replies_refused_total",
			Help: "NATS API requests refused because their reply subject is outside the caller's inbox, by API subject: neither admitted nor answered, or (a tenant's token from another tenant's inbox) answered 401 as an unknown token is.",
		}, []string{"subject"}),
	}
	for _, c := range []prometheus.Collector{m.admissions, m.httpRequests, m.httpDuration, m.publishFailures, m.rateLimited, m.repliesRefused} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: register: %w", err)
		}
	}
	// Every admission series exists from the start, so dashboards and
	// alerts see zeros rather than gaps.
	for _, l := range [][2]string{
		{OutcomeAdmitted, LimitNone}, {OutcomeJoined, LimitNone},
		{OutcomeRejected, LimitGlobal}, {OutcomeRejected, LimitTenant},
		{OutcomeRejected, LimitTenantRate}, {OutcomeRejected, LimitIPRate},
		{OutcomeRejected, LimitTenantItems}, {OutcomeRejected, LimitTenantPins},
	} {
		m.admissions.WithLabelValues(l[0], l[1])
	}
	for _, l := range [][2]string{
		{TransportHTTP, LimitTenantRate}, {TransportHTTP, LimitIPRate}, {TransportNATS, LimitTenantRate},
		{TransportHTTP, LimitTenantReadRate}, {TransportHTTP, LimitTenantStreams},
	} {
		m.rateLimited.WithLabelValues(l[0], l[1])
	}
	for _, subject := range []string{contracts.SubjectSubmit, contracts.SubjectSubmitBatch} {
		m.repliesRefused.WithLabelValues(subject)
	}
	return m, nil
}

// Admission counts one admission outcome.
func (m *Metrics) Admission(outcome, limit string) {
	m.admissions.WithLabelValues(outcome, limit).Inc()
}

// AdmissionRateLimited counts one submit refused by a rate limit
// (LimitTenantRate or LimitIPRate) as a rejected admission; refused
// cancels are no admissions and count in RateLimited alone.
func (m *Metrics) AdmissionRateLimited(limit string) {
	m.admissions.WithLabelValues(OutcomeRejected, limit).Inc()
}

// RateLimited counts one request refused by a rate limit.
func (m *Metrics) RateLimited(transport, limit string) {
	m.rateLimited.WithLabelValues(transport, limit).Inc()
}

// ReplyRefused counts one NATS request to subject (contracts.SubjectSubmit
// or SubjectSubmitBatch) refused for its reply subject.
func (m *Metrics) ReplyRefused(subject string) {
	m.repliesRefused.WithLabelValues(subject).Inc()
}

// PublishFailure counts one due message that could not be published.
func (m *Metrics) PublishFailure() { m.publishFailures.Inc() }

// HTTPRequest records one served HTTP request: pattern is the mux pattern
// it matched ("POST /v1/jobs/{id}/cancel"; RouteUnmatched for none), whose
// path part becomes the route label.
func (m *Metrics) HTTPRequest(pattern, method string, code int, took time.Duration) {
	route, meth := routeOf(pattern), methodOf(method)
	m.httpRequests.WithLabelValues(route, meth, strconv.Itoa(code)).Inc()
	m.httpDuration.WithLabelValues(route, meth).Observe(took.Seconds())
}

// routeOf is the path part of a mux pattern ("[METHOD ][HOST]/PATH").
func routeOf(pattern string) string {
	if i := strings.IndexByte(pattern, ' '); i >= 0 {
		pattern = strings.TrimLeft(pattern[i+1:], " \t")
	}
	return pattern
}

// methodOf bounds the method label: the standard methods as they are,
// anything else "other".
func methodOf(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return "other"
}
