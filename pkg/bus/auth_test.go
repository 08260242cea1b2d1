package bus_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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

// violations are the permission violations so far, as `Publish to "x"`
// and `Subscription to "x"`.
func (e *errs) violations() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, err := range e.all {
		if !errors.Is(err, nats.ErrPermissionViolation) {
			continue
		}
		s := err.Error()
		if _, after, ok := strings.Cut(s, "Permissions Violation for "); ok {
			s = after
		}
		if i := strings.Index(s, `" `); i >= 0 {
			s = s[:i+1]
		}
		out = append(out, s)
	}
	return out
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
	tenantA, err := nats.Connect(srv.URL(), nats.UserInfo("anyone", "tok-a"), nats.ErrorHandler(e.handler),
		nats.CustomInboxPrefix(contracts.TenantInboxPrefix("a")))
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

	byToken, err := nats.Connect(srv.URL(), nats.Token("tok-b"), nats.CustomInboxPrefix(contracts.TenantInboxPrefix("b")))
	require.NoError(t, err, "the API token also works as a NATS token")
	byToken.Close()
}

// tenantDotted is a tenant whose name holds '.', the subject separator.
const tenantDotted = "team.blue"

// permTokens is the token mode of TestTenantPermissions.
func permTokens(token string) (string, bool) {
	switch token {
	case "tok-a":
		return "a", true
	case "tok-b":
		return "b", true
	case "tok-dotted":
		return tenantDotted, true
	}
	return "", false
}

// TestTenantPermissions publishes and subscribes, as tenant a's client
// (and as a tenant whose name holds '.'), to every kind of subject of the
// system and compares the permission violations the server reports with
// the model: a tenant publishes only to the submit APIs and subscribes
// only to its own inbox and its own events.
func TestTenantPermissions(t *testing.T) {
	t.Parallel()
	pw, err := bus.NewInternalPassword()
	require.NoError(t, err)
	srv := bustest.StartWith(t, bus.EmbeddedOptions{Listen: "127.0.0.1:0", Auth: &bus.EmbeddedAuth{InternalPassword: pw, Tenant: permTokens}})
	service := contracts.ServiceInboxPrefix(bus.InternalUser, "n1")

	type check = permCheck
	for tenant, table := range map[string]struct {
		token  string
		checks []check
	}{
		"a": {"tok-a", []check{
			{contracts.SubjectSubmit, true, false},
			{contracts.SubjectSubmitBatch, true, false},
			{contracts.SubjectSubmit + ".other", false, false},
			{contracts.TenantInboxPrefix("a") + ".r1", false, true},
			{contracts.TenantInboxSubjects("a"), false, true},
			{contracts.EventSubject("a", "j1"), false, true},
			{contracts.TenantEventSubjects("a"), false, true},
			{contracts.DefaultInboxPrefix + ".>", false, false},
			{contracts.DefaultInboxPrefix + ".r1", false, false},
			{contracts.TenantInboxSubjects("b"), false, false},
			{contracts.TenantInboxPrefix("b") + ".r1", false, false},
			{contracts.TenantInboxSubjects(tenantDotted), false, false},
			{"_INBOX_*.>", false, false},
			{"*.>", false, false},
			{">", false, false},
			{service + ".r1", false, false},
			{contracts.ServiceInboxRoot + ".>", false, false},
			{contracts.EventSubject("b", "j1"), false, false},
			{contracts.TenantEventSubjects("b"), false, false},
			{"sluice.events.>", false, false},
			{contracts.SubjectDue, false, false},
			{contracts.SubjectRequeue, false, false},
			{contracts.LegacySubjectResult, false, false},
			{contracts.ResultSubject("w1"), false, false},
			{contracts.HeartbeatSubject("w1"), false, false},
			{contracts.ProgressSubject("w1"), false, false},
			{contracts.AnnounceSubject("w1"), false, false},
			{contracts.WorkerRequeueSubject("w1"), false, false},
			{contracts.ServiceInboxSubjects(bus.WorkerUser("w1")), false, false},
			{contracts.SubjectDiscover, false, false},
			{contracts.SubjectWake, false, false},
			{contracts.SubjectScaleRequest, false, false},
			{contracts.SubjectRateUsage, false, false},
			{contracts.WorkerOfferSubject("w1"), false, false},
			{contracts.WorkerCancelSubject("w1"), false, false},
			{"$SRV.PING", false, false},
			{"$SRV.INFO." + contracts.SubmitServiceName, false, false},
			{"$SRV.>", false, false},
			{"$JS.API.STREAM.LIST", false, false},
			{"$JS.API.>", false, false},
			{"$JS.ACK.SLUICE_JOBS.>", false, false},
			{"$JS.EVENT.>", false, false},
			{"$SYS.>", false, false},
		}},
		tenantDotted: {"tok-dotted", []check{
			{contracts.TenantInboxSubjects(tenantDotted), false, true},
			{contracts.TenantEventSubjects(tenantDotted), false, true},
			{"_INBOX_team.>", false, false},
			{"_INBOX_team~blue", false, false},
			{contracts.TenantInboxSubjects("a"), false, false},
		}},
	} {
		t.Run(tenant, func(t *testing.T) {
			t.Parallel()
			var e errs
			nc, err := nats.Connect(srv.URL(), nats.UserInfo("anyone", table.token), nats.ErrorHandler(e.handler),
				nats.CustomInboxPrefix(contracts.TenantInboxPrefix(tenant)))
			require.NoError(t, err)
			defer nc.Close()
			checkPermissions(t, nc, &e, table.checks)
		})
	}
}

// permCheck is one subject of a permission test and what the connection
// may do with it.
type permCheck struct {
	subject  string
	pub, sub bool // publishing, subscribing allowed
}

// checkPermissions publishes to and subscribes on every subject of checks
// (publishes only to literal subjects) and compares the permission
// violations the server reports to e with what checks forbid.
func checkPermissions(t *testing.T, nc *nats.Conn, e *errs, checks []permCheck) {
	t.Helper()
	var want []string
	for _, c := range checks {
		if !strings.ContainsAny(c.subject, "*>") {
			require.NoError(t, nc.Publish(c.subject, nil))
			if !c.pub {
				want = append(want, fmt.Sprintf("Publish to %q", c.subject))
			}
		}
		_, err := nc.SubscribeSync(c.subject)
		require.NoError(t, err)
		if !c.sub {
			want = append(want, fmt.Sprintf("Subscription to %q", c.subject))
		}
	}
	// The server answers in order: once the sentinel's violation is in,
	// every earlier one is.
	const sentinel = "sluice.test.sentinel"
	require.NoError(t, nc.Publish(sentinel, nil))
	want = append(want, fmt.Sprintf("Publish to %q", sentinel))
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool { return slices.Contains(e.violations(), want[len(want)-1]) },
		5*time.Second, 10*time.Millisecond)
	require.ElementsMatch(t, want, e.violations())
}

// TestPermissionsOfOneTenant checks TenantPermissions as the server takes
// them: the lists themselves.
func TestPermissionsOfOneTenant(t *testing.T) {
	t.Parallel()
	for tenant, want := range map[string][2][]string{
		"a":         {{"sluice.api.submit", "sluice.api.submit.batch"}, {"_INBOX_a.>", "sluice.events.a.*"}},
		"team.blue": {{"sluice.api.submit", "sluice.api.submit.batch"}, {"_INBOX_team~blue.>", "sluice.events.team~blue.*"}},
		"x_y-z.1.2": {{"sluice.api.submit", "sluice.api.submit.batch"}, {"_INBOX_x_y-z~1~2.>", "sluice.events.x_y-z~1~2.*"}},
	} {
		p := bus.TenantPermissions(tenant)
		require.Equal(t, want[0], p.Publish.Allow, tenant)
		require.Empty(t, p.Publish.Deny, tenant)
		require.Equal(t, want[1], p.Subscribe.Allow, tenant)
		require.Empty(t, p.Subscribe.Deny, tenant)
		require.Nil(t, p.Response, "a tenant answers no requests")
	}
}

func TestOpenModeEmbeddedServerTakesAnyone(t *testing.T) {
	t.Parallel()
	srv := bustest.StartWith(t, bus.EmbeddedOptions{Listen: "127.0.0.1:0"})
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	nc.Close()
}
