// Package natsapi is the gateway's NATS request-reply API: a nats micro
// service whose one endpoint takes the same body as POST /v1/jobs and
// answers a contracts.SubmitReply carrying the HTTP status the same request
// would have had.
//
// Every answer, errors included, carries a SubmitReply body (a BatchReply
// for an admitted batch), so clients parse one shape. An error answer
// (status 400 or more) is also a micro error: it carries the
// Nats-Service-Error and Nats-Service-Error-Code (the status) headers and
// counts in the endpoint's errors ($SRV.STATS). An answer goes only
// to a reply subject in the caller's own inbox (replyAllowed); a request
// with any other reply subject is neither admitted nor answered.
package natsapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/services/gateway/internal/admission"
	"github.com/sluicehq/sluice/services/gateway/internal/auth"
	"github.com/sluicehq/sluice/services/gateway/internal/metrics"
	"github.com/sluicehq/sluice/services/gateway/internal/ratelimit"
	"github.com/sluicehq/sluice/services/gateway/internal/rejections"
)

// Version is the micro service version the gateway announces: the
// release (contracts.Release).
const Version = contracts.Release

// endpointName names the submit endpoint in micro's INFO and STATS.
const endpointName = "submit"

// batchEndpointName is the micro endpoint name of the batch submit.
const batchEndpointName = "submit-batch"

// requestTimeout bounds the work done for one request; a client has
// usually given up by then.
const requestTimeout = 30 * time.Second

// API serves submit requests over NATS.
type API struct {
	nc           *nats.Conn
	admitter     *admission.Admitter
	auth         *auth.Authenticator
	maxBodyBytes int64
	log          zerolog.Logger
	tenantLimit  *ratelimit.Limiter
	metrics      *metrics.Metrics
	rejections   *rejections.Log
}

// Options are the NATS API's optional settings.
type Options struct {
	// TenantLimit rate-limits submits per tenant (nil = off); the gateway
	// shares it with the HTTP API.
	TenantLimit *ratelimit.Limiter
	// Metrics counts rate-limited requests (nil = not counted).
	Metrics *metrics.Metrics
	// Rejections remembers rate-limited requests for /v1/stats (nil = not
	// remembered).
	Rejections *rejections.Log
}

// New returns the NATS API; Serve runs it.
func New(nc *nats.Conn, ad *admission.Admitter, au *auth.Authenticator, maxBodyBytes int64, log zerolog.Logger, o Options) *API {
	return &API{nc: nc, admitter: ad, auth: au, maxBodyBytes: maxBodyBytes, log: log,
		tenantLimit: o.TenantLimit, metrics: o.Metrics, rejections: o.Rejections}
}

// Serve registers the micro service and its endpoint on
// contracts.SubjectSubmit, answers requests until ctx ends, then stops the
// service (draining its subscriptions).
func (a *API) Serve(ctx context.Context) error {
	svc, err := micro.AddService(a.nc, micro.Config{
		Name:        contracts.SubmitServiceName,
		Version:     Version,
		Description: "Sluice job submission (same body and rules as POST /v1/jobs)",
	})
	if err != nil {
		return fmt.Errorf("natsapi: add service: %w", err)
	}
	err = svc.AddEndpoint(endpointName, micro.ContextHandler(ctx, a.handle),
		micro.WithEndpointSubject(contracts.SubjectSubmit))
	if err != nil {
		_ = svc.Stop()
		return fmt.Errorf("natsapi: add endpoint %s: %w", contracts.SubjectSubmit, err)
	}
	err = svc.AddEndpoint(batchEndpointName, micro.ContextHandler(ctx, a.handleBatch),
		micro.WithEndpointSubject(contracts.SubjectSubmitBatch))
	if err != nil {
		_ = svc.Stop()
		return fmt.Errorf("natsapi: add endpoint %s: %w", contracts.SubjectSubmitBatch, err)
	}
	<-ctx.Done()
	if err := svc.Stop(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("natsapi: stop service: %w", err)
	}
	return nil
}

// handle answers one submit request.
func (a *API) handle(ctx context.Context, req micro.Request) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	tenant, refused, ok := a.answerable(req, contracts.SubjectSubmit)
	if !ok {
		return
	}
	if refused == nil {
		refused = a.limit(req, tenant)
	}
	var o admission.Outcome
	if refused != nil {
		o = *refused
	} else {
		o = a.admitter.Submit(ctx, tenant, req.Data())
	}
	reply := o.Reply()
	ev := a.log.Debug()
	if o.Status >= http.StatusInternalServerError {
		ev = a.log.Error().Err(o.Cause)
	}
	if tenant != "" {
		ev = ev.Str(observe.FieldTenant, tenant)
	}
	if o.Job != nil {
		ev = ev.Str(observe.FieldJobID, o.Job.ID)
	}
	ev.Str(observe.FieldSubject, contracts.SubjectSubmit).Int("status", o.Status).Msg("nats submit")
	if err := respond(req, reply, reply.Status, reply.Error); err != nil {
		a.log.Warn().Err(err).Str(observe.FieldSubject, contracts.SubjectSubmit).Msg("nats submit reply not sent")
	}
}

// identify resolves a request's tenant from its headers; a refusal is the
// outcome to answer, with no tenant.
func (a *API) identify(req micro.Request) (string, *admission.Outcome) {
	refuse := func(o admission.Outcome) (string, *admission.Outcome) { return "", &o }
	h := req.Headers()
	var token string
	if v := h.Values(contracts.HeaderToken); len(v) == 1 {
		token = v[0] // two tokens: trust neither
	}
	tenant, err := a.auth.NATSTenant(token, h.Get(contracts.HeaderTenant))
	switch {
	case errors.Is(err, auth.ErrUnauthorized):
		return refuse(unauthorized())
	case err != nil:
		return refuse(admission.Fail(http.StatusBadRequest, contracts.CodeBadRequest,
			"the "+contracts.HeaderTenant+" header must be 1-64 letters, digits, '_', '.' or '-'"))
	}
	return tenant, nil
}

// unauthorized is the answer to a request without a valid token, and to
// one whose token's tenant is not the caller's (answerable): one answer
// for both, so that neither tells a token of another tenant from no token.
func unauthorized() admission.Outcome {
	return admission.Fail(http.StatusUnauthorized, contracts.CodeUnauthorized,
		"a valid API token is required in the "+contracts.HeaderToken+" header")
}

// limit applies tenant's rate limit and checks the request's size; a
// refusal is the outcome to answer.
func (a *API) limit(req micro.Request, tenant string) *admission.Outcome {
	if ok, wait := a.tenantLimit.Allow(tenant); !ok {
		if a.metrics != nil {
			a.metrics.RateLimited(metrics.TransportNATS, metrics.LimitTenantRate)
			a.metrics.AdmissionRateLimited(metrics.LimitTenantRate)
		}
		a.rejections.Record(contracts.Rejection{Tenant: tenant, Limit: contracts.LimitTenantRate})
		o := admission.TenantRateLimited("per-tenant rate limit", wait)
		return &o
	}
	if int64(len(req.Data())) > a.maxBodyBytes {
		o := admission.TooLarge(a.maxBodyBytes)
		return &o
	}
	return nil
}

// handleBatch answers one batch submit request: the batch's refusal as a
// SubmitReply, or a BatchReply with one result per job.
func (a *API) handleBatch(ctx context.Context, req micro.Request) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	tenant, refused, ok := a.answerable(req, contracts.SubjectSubmitBatch)
	if !ok {
		return
	}
	if refused == nil {
		refused = a.limit(req, tenant)
	}
	var (
		reply  any
		status = http.StatusOK
		detail *contracts.ErrorDetail
	)
	switch {
	case refused != nil:
		reply, status, detail = refused.Reply(), refused.Status, refused.Error
	default:
		bo := a.admitter.SubmitBatch(ctx, tenant, req.Data())
		if bo.Refused != nil {
			reply, status, detail = bo.Refused.Reply(), bo.Refused.Status, bo.Refused.Error
			break
		}
		br := contracts.BatchReply{Results: make([]contracts.SubmitReply, len(bo.Results))}
		for i, o := range bo.Results {
			if o.Cause != nil {
				a.log.Error().Err(o.Cause).Str(observe.FieldTenant, tenant).Str(observe.FieldSubject, contracts.SubjectSubmitBatch).Msg("nats batch submit")
			}
			br.Results[i] = o.Reply()
		}
		reply = br
	}
	if err := respond(req, reply, status, detail); err != nil {
		a.log.Warn().Err(err).Str(observe.FieldSubject, contracts.SubjectSubmitBatch).Msg("nats batch submit reply not sent")
	}
}

// respond answers req with v as JSON, encoded as the HTTP API encodes it
// (contracts.EncodeJSON: a payload's '<', '>' and '&' stay as sent). An
// answer of status 400 or more goes as a micro error (the same body, with
// the error headers), so the service's stats count it.
func respond(req micro.Request, v any, status int, detail *contracts.ErrorDetail) error {
	body, err := contracts.EncodeJSON(v)
	if err != nil {
		return fmt.Errorf("encode reply: %w", err)
	}
	if status < http.StatusBadRequest {
		return req.Respond(body)
	}
	desc := http.StatusText(status)
	if detail != nil && detail.Message != "" {
		desc = detail.Message
	}
	if desc == "" {
		desc = "error"
	}
	return req.Error(strconv.Itoa(status), headerText(desc), body)
}

// maxErrorHeader bounds the Nats-Service-Error header; the body has the
// whole message.
const maxErrorHeader = 256

// headerText makes s safe as a NATS header value: control characters
// (a message may quote the caller's input) become spaces, and it is cut
// to maxErrorHeader bytes on a character boundary.
func headerText(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	if len(s) <= maxErrorHeader {
		return s
	}
	cut := maxErrorHeader
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
