package bus

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// InternalUser is the NATS user the services in the process of an embedded
// server connect as when EmbeddedAuth closes it.
const InternalUser = "sluice-internal"

// workerUserPrefix starts the NATS user of every worker (WorkerUser).
const workerUserPrefix = "worker:"

// WorkerUser is the NATS user a worker connects to an embedded server in
// token mode as: "worker:<id>". Its inbox is then
// contracts.ServiceInboxPrefix of this user ("_SLUICE_INBOX.worker_<id>.…").
func WorkerUser(id string) string { return workerUserPrefix + id }

// EmbeddedAuth closes an embedded server to anonymous clients, for token
// mode (SLUICE_API_TOKENS): the services in its process connect as
// InternalUser with a password made at start and never shown; each worker
// connects as its own WorkerUser with its own password (WorkerPassword),
// which the process that started the server hands to that worker alone,
// and may use its own subjects only (WorkerPermissions); an outside client
// connects with a tenant's API token (as the password, with any other user
// name, or as the NATS token) and may only call the submit API, receive its
// replies in its own inbox and read its own tenant's change events.
type EmbeddedAuth struct {
	// InternalPassword is InternalUser's password (NewInternalPassword).
	// Every worker's password is derived from it (WorkerPassword).
	InternalPassword string
	// Tenant resolves an API token to its tenant; false refuses it.
	Tenant func(token string) (tenant string, ok bool)
}

// NewInternalPassword returns a random password for InternalUser.
func NewInternalPassword() (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("internal nats password: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// WorkerPassword is worker id's password on this server: the HMAC-SHA256
// of its WorkerUser under InternalPassword, in hex. The process that holds
// the server can so give any worker it starts (in process or as a child
// process) its own password without keeping a list, and one worker's
// password tells nothing of another's or of InternalPassword. Empty when
// the server has no InternalPassword (nobody may then log in as a worker).
func (a *EmbeddedAuth) WorkerPassword(id string) string {
	if a.InternalPassword == "" {
		return ""
	}
	mac := hmac.New(sha256.New, []byte(a.InternalPassword))
	mac.Write([]byte("sluice nats worker password\x00" + WorkerUser(id)))
	return hex.EncodeToString(mac.Sum(nil))
}

// WorkerPermissions are what worker id's NATS identity may do: publish its
// own heartbeats, progress reports, announcements, results and shutdown
// requeues (the JetStream acknowledgements of the last two come back to its
// inbox); receive its own offers and cancels, the discovery requests every
// worker answers, and replies in its own inbox
// (contracts.ServiceInboxSubjects of its WorkerUser); answer the offers it
// received, once each. Nothing else: not another worker's offers or report
// subjects, not the JetStream API (it cannot create, change or read the
// stream or a consumer), not the API or events of any tenant.
func WorkerPermissions(id string) *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{
			contracts.HeartbeatSubject(id), contracts.ProgressSubject(id), contracts.AnnounceSubject(id),
			contracts.ResultSubject(id), contracts.WorkerRequeueSubject(id),
		}},
		Subscribe: &server.SubjectPermission{Allow: []string{
			contracts.WorkerOfferSubject(id), contracts.WorkerCancelSubject(id), contracts.SubjectDiscover,
			contracts.ServiceInboxSubjects(WorkerUser(id)),
		}},
		// allow_responses, as a configuration file says it: one answer
		// to each request received, within the server's default time.
		Response: &server.ResponsePermission{MaxMsgs: server.DEFAULT_ALLOW_RESPONSE_MAX_MSGS,
			Expires: server.DEFAULT_ALLOW_RESPONSE_EXPIRATION},
	}
}

// TenantPermissions are what an outside client authenticated as tenant may
// do: request the submit APIs, receive replies in its own inbox
// (contracts.TenantInboxPrefix: the client sets it with
// nats.CustomInboxPrefix) and follow its own tenant's change events.
// Nothing else: not another tenant's inbox or events, not the services'
// inboxes or subjects, not the JetStream API, not micro discovery.
func TenantPermissions(tenant string) *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{contracts.SubjectSubmit, contracts.SubjectSubmitBatch}},
		Subscribe: &server.SubjectPermission{Allow: []string{
			contracts.TenantInboxSubjects(tenant), contracts.TenantEventSubjects(tenant),
		}},
	}
}

// Check implements server.Authentication.
func (a *EmbeddedAuth) Check(c server.ClientAuthentication) bool {
	o := c.GetOpts()
	if o.Username == InternalUser {
		if a.InternalPassword == "" || subtle.ConstantTimeCompare([]byte(o.Password), []byte(a.InternalPassword)) != 1 {
			return false
		}
		c.RegisterUser(&server.User{Username: InternalUser})
		return true
	}
	if id, ok := strings.CutPrefix(o.Username, workerUserPrefix); ok {
		// A worker's user: its own password, its own subjects. Never a
		// tenant's token under this name.
		want := a.WorkerPassword(id)
		if want == "" || !contracts.ValidWorkerID(id) || subtle.ConstantTimeCompare([]byte(o.Password), []byte(want)) != 1 {
			return false
		}
		c.RegisterUser(&server.User{Username: o.Username, Permissions: WorkerPermissions(id)})
		return true
	}
	token := o.Password
	if token == "" {
		token = o.Token
	}
	if token == "" || a.Tenant == nil {
		return false
	}
	tenant, ok := a.Tenant(token)
	if !ok {
		return false
	}
	c.RegisterUser(&server.User{Username: "tenant:" + tenant, Permissions: TenantPermissions(tenant)})
	return true
}
