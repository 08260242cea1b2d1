package natsapi

import (
	"github.com/nats-io/nats.go/micro"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
	"github.com/sluicehq/sluice/services/gateway/internal/admission"
)

// fieldReply is the log field of a refused reply subject.
const fieldReply = "reply"

// answerable identifies req, a request to subject, and decides whether
// the gateway answers it at its reply subject: it returns the tenant
// ("" when none), the refusal to answer instead of admitting it, and
// false when nothing may be answered at all.
//
// An answer goes only to the caller's own inbox: a tenant's is
// contracts.TenantInboxPrefix(tenant); in open mode, where clients need
// not set an inbox prefix, also contracts.DefaultInboxPrefix. A caller the
// gateway could not identify gets its refusal (401, 400) only at a subject
// under some tenant's inbox, where it tells nothing but the refusal.
//
// A valid token whose reply subject is under another tenant's inbox (in
// token mode) is answered there exactly as an unknown token is: the same
// 401, body, headers and subject, with no admission and no rate limit
// charged, so that a tenant cannot learn whether a string is another
// tenant's token by the gateway's silence (it is logged and counted as a
// refused reply). Anything else (an internal subject such as
// sluice.jobs.requeue, a service's inbox, an empty reply) is refused:
// logged, counted, neither admitted nor answered, so a request can never
// make the gateway publish where its caller chooses.
func (a *API) answerable(req micro.Request, subject string) (string, *admission.Outcome, bool) {
	tenant, refused := a.identify(req)
	reply := req.Reply()
	switch {
	case a.auth.Open() && contracts.InInbox(contracts.DefaultInboxPrefix, reply):
		return tenant, refused, true
	case tenant != "" && contracts.InInbox(contracts.TenantInboxPrefix(tenant), reply):
		return tenant, refused, true
	case tenant != "" && !a.auth.Open() && contracts.InSomeTenantInbox(reply):
		a.refusedReply(subject, reply, tenant, "nats request refused as unauthorized: a tenant's token from another tenant's inbox")
		o := unauthorized()
		return "", &o, true
	case tenant == "" && contracts.InSomeTenantInbox(reply):
		return tenant, refused, true
	}
	a.refusedReply(subject, reply, tenant, "nats request refused: reply subject outside the caller's inbox")
	return tenant, refused, false
}

// refusedReply logs and counts a request refused for its reply subject.
func (a *API) refusedReply(subject, reply, tenant, msg string) {
	if a.metrics != nil {
		a.metrics.ReplyRefused(subject)
	}
	ev := a.log.Warn().Str(observe.FieldSubject, subject).Str(fieldReply, reply)
	if tenant != "" {
		ev = ev.Str(observe.FieldTenant, tenant)
	}
	ev.Msg(msg)
}
