// Package admission is the one submit path the HTTP and the NATS APIs
// share: decode, validate, admit in the store under the caps, wake the
// schedulers (or publish a delayed job's due message), and say what
// happened as a transport-neutral Outcome.
//
// The store is the truth and the ready queue. A job is admitted the moment
// store.Admit says so; a wake-up or due message that cannot be published
// afterwards is logged (and a due message counted) but does not fail the
// request, because the schedulers' poll finds the job in the store.
package admission

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/bus/events"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/gateway/internal/metrics"
	"github.com/sluicehq/sluice/services/gateway/internal/ratelimit"
	"github.com/sluicehq/sluice/services/gateway/internal/rejections"
)

// publishTimeout bounds the wait for JetStream to acknowledge a due
// message. It is independent of the caller's context: a client that hangs
// up after its job was admitted still gets the job dispatched promptly.
const publishTimeout = 5 * time.Second

// Settings are the admission limits.
type Settings struct {
	// Caps are the global and per-tenant active limits (0 = none).
	Caps store.Caps
	// Limits bound the deadline and default the attempts of a request.
	Limits contracts.Limits
	// RetryAfter is what a rejected client is told to wait.
	RetryAfter time.Duration
	// Rejections remembers the cap rejections for /v1/stats (nil = not
	// remembered).
	Rejections *rejections.Log
	// Kinds, when not empty, are the only kinds admitted; others get 422.
	Kinds []string
	// Weights are the tenants' fair-queuing weights (nil: all 1).
	Weights Weights
	// MaxMessageBytes is the NATS connection's max payload: a job that
	// could not be carried by every hop (offer, submit reply, events) is
	// refused with 413 (0 = not checked).
	MaxMessageBytes int64
	// Pins hashes the files of "pin" inputs (nil: pinning is off).
	Pins *Pinner
	// MaxBodyBytes and MaxBatchBytes bound a submit body and a batch body
	// (0 = not checked here): the transports check them before reading
	// where they can, and both go through here.
	MaxBodyBytes, MaxBatchBytes int64
	// MaxItemsPerRequest bounds the items of one request, counted before
	// anything is decoded (see contracts.CountItems): the jobs of a batch
	// plus the items of every fan-out in it (0 = no bound).
	MaxItemsPerRequest int
	// TenantLimit is the per-tenant rate limit the transports already took
	// one token of for the request; a request costs one token per item,
	// and the rest are taken here (nil = off).
	TenantLimit *ratelimit.Limiter
	// Workers lists the live workers (nil: none known): a job whose
	// resource request fits in the capacity of none of those that run its
	// kind is refused with 422 (contracts.NeverFits). While none is known
	// it is admitted, and fails capacity: at its dispatch deadline if no
	// worker ever takes it.
	Workers func() []contracts.WorkerInfo
}

// Admitter admits submit requests. It is safe for concurrent use.
type Admitter struct {
	store   store.Store
	js      jetstream.JetStream
	set     Settings
	now     func() time.Time
	log     zerolog.Logger
	metrics *metrics.Metrics
	events  *events.Publisher
	// workers is the copy of the live workers the resource check reads.
	workers *workerCopy
}

// New returns an Admitter writing to st, publishing due messages to js and
// change events to ev (nil = none).
func New(st store.Store, js jetstream.JetStream, ev *events.Publisher, set Settings, now func() time.Time, log zerolog.Logger, m *metrics.Metrics) *Admitter {
	if now == nil {
		now = time.Now
	}
	return &Admitter{store: st, js: js, set: set, now: now, log: log, metrics: m, events: ev, workers: &workerCopy{}}
}

// Outcome is the result of one submit: the HTTP status it maps to, and
// either the job or the error. The NATS API sends the same status in its
// reply body.
type Outcome struct {
	// Status is an HTTP status code: 202, 200, 4xx or 503.
	Status int
	// Job is the admitted (202) or joined (200) job.
	Job *contracts.Job
	// Error is set on every status but 200 and 202.
	Error *contracts.ErrorDetail
	// RetryAfter is set on 429s: how long the client should wait.
	RetryAfter time.Duration
	// Cause is the internal error behind a 5xx, for the transport to log;
	// it is never shown to clients.
	Cause error
}

// Reply is the outcome as the NATS API and the batch results carry it.
func (o Outcome) Reply() contracts.SubmitReply {
	r := contracts.SubmitReply{Status: o.Status, Job: o.Job, Error: o.Error}
	if o.RetryAfter > 0 {
		r.RetryAfterMS = max(o.RetryAfter.Milliseconds(), 1)
	}
	return r
}

// Fail builds an error outcome.
func Fail(status int, code, msg string) Outcome {
	return Outcome{Status: status, Error: &contracts.ErrorDetail{Code: code, Message: msg}}
}

// TooLarge is the outcome of a body over max bytes.
func TooLarge(max int64) Outcome {
	return Fail(http.StatusRequestEntityTooLarge, contracts.CodeTooLarge,
		fmt.Sprintf("request body is larger than %d bytes", max))
}

// TenantRateLimited is the outcome of a request the per-tenant rate
// limit refused: 429 naming tenant_rate, retry after wait. why is what
// the message says of the limit.
func TenantRateLimited(why string, wait time.Duration) Outcome {
	o := Fail(http.StatusTooManyRequests, contracts.CodeRateLimited,
		fmt.Sprintf("too many requests (%s), retry after %d ms", why, max(wait.Milliseconds(), 1)))
	o.Error.Limit = contracts.LimitTenantRate
	o.RetryAfter = wait
	return o
}

// RetryAfterSeconds is d rounded up to whole seconds, at least 1: the value
// of a Retry-After header.
func RetryAfterSeconds(d time.Duration) int64 {
	s := int64(math.Ceil(d.Seconds()))
	if s < 1 {
		return 1
	}
	return s
}

// Submit runs one submit request for tenant: body is the raw JSON body,
// already size-checked by the transport. Nothing is written unless the
// outcome is 202.
func (a *Admitter) Submit(ctx context.Context, tenant string, body []byte) Outcome {
	if refused := a.bound(tenant, body, false); refused != nil {
		return *refused
	}
	req, failed := a.prepare(ctx, tenant, body, a.now().UTC())
	if failed != nil {
		return *failed
	}
	var (
		got contracts.Job
		adm store.Admission
		err error
	)
	if len(req.Items) > 0 {
		var res []store.AdmitResult
		if res, err = a.store.AdmitBatch(ctx, []store.AdmitRequest{req}); err == nil {
			got, adm = res[0].Job, res[0].Admission
		}
	} else {
		got, adm, err = a.store.Admit(ctx, req.Job, req.Caps)
	}
	if err != nil {
		return a.storeDown(req.Job, err)
	}
	o := a.settle(tenant, got, adm)
	if o.Status == http.StatusAccepted {
		if got.Delayed(a.now()) {
			a.publishDue(ctx, dueJob(got))
		} else {
			a.wake()
		}
	}
	return o
}

// prepare turns a submit body, submitted at now, into the job to admit and
// its caps, or the outcome that refuses it (400, 413, 422, 503). ctx
// bounds the hash of its pinned inputs.
func (a *Admitter) prepare(ctx context.Context, tenant string, body []byte, now time.Time) (store.AdmitRequest, *Outcome) {
	fail := func(o Outcome) (store.AdmitRequest, *Outcome) { return store.AdmitRequest{}, &o }
	req, err := contracts.DecodeSubmit(body)
	if err != nil {
		return fail(Fail(http.StatusBadRequest, contracts.CodeInvalidJSON, err.Error()))
	}
	sub, err := req.Validate(now, a.set.Limits)
	if err != nil {
		var (
			fe *contracts.FieldError
			de *contracts.DecodeError
		)
		switch {
		case errors.As(err, &fe):
			return fail(Fail(http.StatusUnprocessableEntity, contracts.CodeValidation, fe.Error()))
		case errors.As(err, &de): // a duplicate key inside a member
			return fail(Fail(http.StatusBadRequest, contracts.CodeInvalidJSON, de.Error()))
		}
		return fail(Fail(http.StatusUnprocessableEntity, contracts.CodeValidation, err.Error()))
	}
	id, err := uuid.NewV7()
	if err != nil {
		o := Fail(http.StatusServiceUnavailable, contracts.CodeUnavailable, "cannot make a job id, try again")
		o.Cause = fmt.Errorf("new job id: %w", err)
		return fail(o)
	}
	job := contracts.Job{
		ID:               id.String(),
		Tenant:           tenant,
		Kind:             sub.Kind,
		Payload:          sub.Payload,
		Key:              sub.Key,
		Priority:         sub.Priority,
		MaxAttempts:      sub.MaxAttempts,
		State:            contracts.StatePending,
		Claim:            0,
		CreatedAt:        now,
		UpdatedAt:        now,
		NextDispatchAt:   &now,
		DispatchDeadline: sub.DispatchDeadline.UTC(),
		ConcurrencyKey:   sub.ConcurrencyKey,
		ConcurrencyLimit: sub.ConcurrencyLimit,
		RunLimits:        sub.Limits,
		Resources:        sub.Resources,
	}
	if sub.RunAt != nil {
		at := sub.RunAt.UTC()
		job.RunAt, job.NextDispatchAt = &at, &at
	}
	if len(a.set.Kinds) > 0 && !slices.Contains(a.set.Kinds, job.Kind) {
		return fail(Fail(http.StatusUnprocessableEntity, contracts.CodeUnknownKind, fmt.Sprintf(
			"kind %q is not run here; the kinds are %s (SLUICE_GATEWAY_KINDS)", job.Kind, strings.Join(a.set.Kinds, ", "))))
	}
	if refused := a.checkFits(job); refused != nil {
		return fail(*refused)
	}
	// Last of the checks that read no file: pinning reads one.
	var refused *Outcome
	if job.Inputs, refused = a.set.Pins.pin(ctx, tenant, sub.Inputs); refused != nil {
		if refused.Error != nil && refused.Error.Limit == contracts.LimitTenantPins {
			a.metrics.Admission(metrics.OutcomeRejected, metrics.LimitTenantPins)
			a.set.Rejections.Record(contracts.Rejection{Tenant: tenant, Limit: contracts.LimitTenantPins})
		}
		return fail(*refused)
	}
	if len(sub.Items) > 0 {
		job.Concurrency, job.FailFast = sub.Concurrency, sub.FailFast
		// Each child must fit every hop as a job of its own.
		for i, item := range sub.Items {
			if err := contracts.CheckMessageSize(job.Child(i, item), a.set.MaxMessageBytes); err != nil {
				return fail(Fail(http.StatusRequestEntityTooLarge, contracts.CodeTooLarge, fmt.Sprintf("items[%d]: %s", i, err)))
			}
		}
	}
	if err := contracts.CheckMessageSize(job, a.set.MaxMessageBytes); err != nil {
		return fail(Fail(http.StatusRequestEntityTooLarge, contracts.CodeTooLarge, err.Error()))
	}
	caps := a.set.Caps
	caps.Weight = a.set.Weights.Of(tenant)
	return store.AdmitRequest{Job: job, Caps: caps, Items: sub.Items}, nil
}

// storeDown is the 503 of a store that did not answer an admission.
func (a *Admitter) storeDown(job contracts.Job, err error) Outcome {
	o := Fail(http.StatusServiceUnavailable, contracts.CodeUnavailable, "the job store is unavailable, try again")
	o.Cause = fmt.Errorf("admit job %s: %w", job.ID, err)
	o.RetryAfter = a.set.RetryAfter
	return o
}

// settle turns the store's answer into the outcome, counts it and
// publishes the new job's change event. The caller publishes its due
// message.
func (a *Admitter) settle(tenant string, got contracts.Job, adm store.Admission) Outcome {
	switch adm {
	case store.Admitted:
		a.metrics.Admission(metrics.OutcomeAdmitted, metrics.LimitNone)
		a.events.State(got)
		return Outcome{Status: http.StatusAccepted, Job: &got}
	case store.Joined:
		a.metrics.Admission(metrics.OutcomeJoined, metrics.LimitNone)
		return Outcome{Status: http.StatusOK, Job: &got}
	case store.RejectedGlobal:
		a.metrics.Admission(metrics.OutcomeRejected, metrics.LimitGlobal)
		return a.rejected(tenant, contracts.CodeGlobalCap, metrics.LimitGlobal,
			fmt.Sprintf("the global cap of %d active jobs is reached, retry later", a.set.Caps.Global))
	case store.RejectedTenant:
		a.metrics.Admission(metrics.OutcomeRejected, metrics.LimitTenant)
		return a.rejected(tenant, contracts.CodeTenantCap, metrics.LimitTenant,
			fmt.Sprintf("the tenant cap of %d active jobs is reached, retry later", a.set.Caps.Tenant))
	case store.RejectedTenantItems:
		a.metrics.Admission(metrics.OutcomeRejected, metrics.LimitTenantItems)
		return a.rejected(tenant, contracts.CodeTenantCap, metrics.LimitTenantItems, fmt.Sprintf(
			"the tenant's bound of %d items in flight (SLUICE_GATEWAY_TENANT_MAX_ITEMS: active jobs plus the items of active fan-outs) would be passed, retry later",
			a.set.Caps.TenantItems))
	}
	o := Fail(http.StatusServiceUnavailable, contracts.CodeUnavailable, "the job store gave no answer, try again")
	o.Cause = fmt.Errorf("admit job %s: unknown admission outcome %d", got.ID, adm)
	return o
}

// rejected builds a 429 outcome for the cap (metrics.LimitGlobal or
// metrics.LimitTenant) that turned tenant's submit away, and remembers it.
func (a *Admitter) rejected(tenant, code, limit, msg string) Outcome {
	a.set.Rejections.Record(contracts.Rejection{Tenant: tenant, Limit: limit})
	o := Fail(http.StatusTooManyRequests, code, msg)
	o.Error.Limit = limit
	o.RetryAfter = a.set.RetryAfter
	return o
}

// wake tells the schedulers that ready jobs were admitted. The store is
// the queue: a wake-up that does not arrive only delays the jobs until a
// scheduler's next poll, so a failure is only logged.
func (a *Admitter) wake() {
	if err := a.js.Conn().Publish(contracts.SubjectWake, nil); err != nil {
		a.log.Debug().Err(err).Str(observe.FieldSubject, contracts.SubjectWake).Msg("wake-up not published")
	}
}

// publishDue hands a delayed job's durable wake-up to the schedulers: its
// due message, held until run_at. A failure is only logged and counted:
// the job is in the store, and a scheduler's poll finds it when it is due.
func (a *Admitter) publishDue(ctx context.Context, job contracts.Job) {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	due := dueOf(job)
	if err := bus.Publish(pctx, a.js, due.Subject, due.Value, due.ID); err != nil {
		a.dueFailed(job, err)
	}
}

// dueJob is the job whose due message wakes dispatch for job at its
// run_at: the job itself, or a fan-out parent's first child (a parent is
// never dispatched).
func dueJob(job contracts.Job) contracts.Job {
	if job.IsParent() {
		c := job
		c.ID, c.Parent, c.Concurrency = contracts.ChildID(job.ID, 0), job.ID, 0
		return c
	}
	return job
}

// dueOf is the due message of a job.
func dueOf(job contracts.Job) bus.Message {
	return bus.Message{Subject: contracts.SubjectDue, Value: contracts.Due{JobID: job.ID}, ID: "due-" + job.ID}
}

// dueFailed logs and counts a due message that was not published.
func (a *Admitter) dueFailed(job contracts.Job, err error) {
	a.metrics.PublishFailure()
	a.log.Warn().Err(err).
		Str(observe.FieldJobID, job.ID).
		Str(observe.FieldTenant, job.Tenant).
		Str(observe.FieldSubject, contracts.SubjectDue).
		Msg("due message not published; a scheduler finds the job in the store when it is due")
}
