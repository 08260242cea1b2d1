package natsapi

import (
	"github.com/nats-io/nats.go/micro"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe"
)

// fieldReply is the log field of a refused reply subject.
const fieldReply = "reply"

// replyAllowed reports whether the gateway may answer req, a request to
// subject from tenant ("" when the request named no valid tenant), at its
// reply subject. An answer goes only to the caller's own inbox: a tenant's
// is contracts.TenantInboxPrefix(tenant); in open mode, where clients
// need not set an inbox prefix, also contracts.DefaultInboxPrefix. A
// caller the gateway could not identify gets its refusal only at a
// subject under some tenant's inbox, where it tells nothing but the
// refusal. Anything else (an internal subject such as sluice.jobs.requeue,
// a service's inbox, an empty reply) is refused: logged, counted, neither
// admitted nor answered, so a request can never make the gateway publish
// where its caller chooses.
func (a *API) replyAllowed(req micro.Request, subject, tenant string) bool {
	reply := req.Reply()
	ok := a.auth.Open() && contracts.InInbox(contracts.DefaultInboxPrefix, reply)
	switch {
	case ok:
	case tenant != "":
		ok = contracts.InInbox(contracts.TenantInboxPrefix(tenant), reply)
	default:
		ok = contracts.InSomeTenantInbox(reply)
	}
	if ok {
		return true
	}
	if a.metrics != nil {
		a.metrics.ReplyRefused(subject)
	}
	ev := a.log.Warn().Str(observe.FieldSubject, subject).Str(fieldReply, reply)
	if tenant != "" {
		ev = ev.Str(observe.FieldTenant, tenant)
	}
	ev.Msg("nats request refused: reply subject outside the caller's inbox")
	return false
}
