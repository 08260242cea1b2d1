package bus_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/bus/bustest"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// tokens is the token mode of these tests: tok-a is tenant a's, tok-b b's.
func tokens(token string) (string, bool) {
	switch token {
	case "tok-a":
		return "a", true
	case "tok-b":
		return "b", true
	}
	return "", false
}

// errs collects a connection's asynchronous errors (permission violations).
type errs struct {
	mu  sync.Mutex
	all []error
}

func (e *errs) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, err)
}

func (e *errs) permissionViolations() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, err := range e.all {
		if errors.Is(err, nats.ErrPermissionViolation) {
			n++
		}
	}
	return n
}

// TestTokenModeClosesTheEmbeddedServer checks an embedded server in token
// mode: anonymous and wrong-token clients are refused; a tenant's client
// may call the submit API and read its own events, nothing else (not
// another tenant's events, not the JetStream API); the internal user may
// do anything.
func TestTokenModeClosesTheEmbeddedServer(t *testing.T) {
	t.Parallel()
	pw, err := bus.NewInternalPassword()
	require.NoError(t, err)
	srv := bustest.StartWith(t, bus.EmbeddedOptions{Listen: "127.0.0.1:0", Auth: &bus.EmbeddedAuth{InternalPassword: pw, Tenant: tokens}})

	for name, opts := range map[string][]nats.Option{
		"anonymous":         nil,
		"wrong token":       {nats.UserInfo("a", "nope")},
		"wrong internal pw": {nats.UserInfo(bus.InternalUser, "nope")},
	} {
		_, err := nats.Connect(srv.URL(), opts...)
		require.Error(t, err, name)
	}

	internal, err := nats.Connect(srv.URL(), nats.UserInfo(bus.InternalUser, pw))
	require.NoError(t, err)
	defer internal.Close()
	// The gateway's stand-in answers submits.
	sub, err := internal.Subscribe(contracts.SubjectSubmit, func(m *nats.Msg) { _ = m.Respond([]byte(`{"status":202}`)) })
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, internal.Flush())

	var e errs
	tenantA, err := nats.Connect(srv.URL(), nats.UserInfo("anyone", "tok-a"), nats.ErrorHandler(e.handler))
	require.NoError(t, err)
	defer tenantA.Close()
	reply, err := tenantA.Request(contracts.SubjectSubmit, []byte(`{"kind":"x"}`), 5*time.Second)
	require.NoError(t, err, "a tenant may submit and gets its reply")
	require.JSONEq(t, `{"status":202}`, string(reply.Data))

	own, err := tenantA.SubscribeSync(contracts.TenantEventSubjects("a"))
	require.NoError(t, err)
	require.NoError(t, tenantA.Flush())
	require.NoError(t, internal.Publish(contracts.EventSubject("a", "job-1"), []byte(`{}`)))
	_, err = own.NextMsg(5 * time.Second)
	require.NoError(t, err, "a tenant reads its own events")

	_, err = tenantA.SubscribeSync(contracts.TenantEventSubjects("b"))
	require.NoError(t, err) // refused asynchronously
	_, err = tenantA.SubscribeSync("sluice.events.>")
	require.NoError(t, err)
	require.NoError(t, tenantA.Publish("$JS.API.STREAM.LIST", nil))
	require.NoError(t, tenantA.Flush())
	require.Eventually(t, func() bool { return e.permissionViolations() >= 3 }, 5*time.Second, 10*time.Millisecond,
		"another tenant's events, all events and the JetStream API are refused")

	byToken, err := nats.Connect(srv.URL(), nats.Token("tok-b"))
	require.NoError(t, err, "the API token also works as a NATS token")
	byToken.Close()
}

func TestOpenModeEmbeddedServerTakesAnyone(t *testing.T) {
	t.Parallel()
	srv := bustest.StartWith(t, bus.EmbeddedOptions{Listen: "127.0.0.1:0"})
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	nc.Close()
}
