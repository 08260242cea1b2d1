package bus

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// InternalUser is the NATS user the services in the process of an embedded
// server connect as when EmbeddedAuth closes it.
const InternalUser = "sluice-internal"

// EmbeddedAuth closes an embedded server to anonymous clients, for token
// mode (SLUICE_API_TOKENS): the services in its process connect as
// InternalUser with a password made at start and never shown; an outside
// client connects with a tenant's API token (as the password, with any user
// name, or as the NATS token) and may only call the submit API, receive
// its replies in its own inbox and read its own tenant's change events.
type EmbeddedAuth struct {
	// InternalPassword is InternalUser's password (NewInternalPassword).
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
