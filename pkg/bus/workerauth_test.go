package bus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/bus/bustest"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// startTokenServer runs an embedded server in token mode on loopback and
// returns it with its auth (which makes the workers' passwords).
func startTokenServer(t *testing.T) (*bustest.Server, *bus.EmbeddedAuth) {
	t.Helper()
	pw, err := bus.NewInternalPassword()
	require.NoError(t, err)
	auth := &bus.EmbeddedAuth{InternalPassword: pw, Tenant: tokens}
	return bustest.StartWith(t, bus.EmbeddedOptions{Listen: "127.0.0.1:0", Auth: auth}), auth
}

// connectWorker connects as worker id, with the inbox pkg/bus gives a
// service connection of that user, recording its permission violations.
func connectWorker(t *testing.T, url, id, password string, e *errs) *nats.Conn {
	t.Helper()
	user := bus.WorkerUser(id)
	nc, err := nats.Connect(url, nats.UserInfo(user, password), nats.ErrorHandler(e.handler),
		nats.CustomInboxPrefix(bus.ServiceInboxPrefix(user, "")))
	require.NoError(t, err, "worker %s connects with its own password", id)
	t.Cleanup(nc.Close)
	return nc
}

func TestWorkerPassword(t *testing.T) {
	t.Parallel()
	a := &bus.EmbeddedAuth{InternalPassword: "secret-1"}
	b := &bus.EmbeddedAuth{InternalPassword: "secret-2"}
	require.Len(t, a.WorkerPassword("w1"), 64)
	require.Equal(t, a.WorkerPassword("w1"), a.WorkerPassword("w1"), "derived, not drawn")
	require.NotEqual(t, a.WorkerPassword("w1"), a.WorkerPassword("w2"), "one per worker")
	require.NotEqual(t, a.WorkerPassword("w1"), b.WorkerPassword("w1"), "one per server start")
	require.NotContains(t, a.WorkerPassword("w1"), "secret-1")
	require.Empty(t, (&bus.EmbeddedAuth{}).WorkerPassword("w1"), "no internal password: no worker either")
	require.Equal(t, "worker:w1", bus.WorkerUser("w1"))
}

// TestWorkerIdentity: on an embedded server in token mode a worker logs in
// as its own user with its own password only: not with another worker's,
// not with a tenant's token, not without a valid worker id.
func TestWorkerIdentity(t *testing.T) {
	t.Parallel()
	srv, auth := startTokenServer(t)
	var e errs
	connectWorker(t, srv.URL(), "w1", auth.WorkerPassword("w1"), &e)
	for name, opts := range map[string][]nats.Option{
		"another worker's password": {nats.UserInfo(bus.WorkerUser("w1"), auth.WorkerPassword("w2"))},
		"no password":               {nats.UserInfo(bus.WorkerUser("w1"), "")},
		"the internal password":     {nats.UserInfo(bus.WorkerUser("w1"), auth.InternalPassword)},
		"a tenant's token":          {nats.UserInfo(bus.WorkerUser("w1"), "tok-a")},
		"not a worker id":           {nats.UserInfo(bus.WorkerUser("w.1"), auth.WorkerPassword("w.1"))},
		"a wildcard id":             {nats.UserInfo(bus.WorkerUser("*"), auth.WorkerPassword("*"))},
		"empty id":                  {nats.UserInfo(bus.WorkerUser(""), auth.WorkerPassword(""))},
		"its password as a token":   {nats.Token(auth.WorkerPassword("w1"))},
	} {
		nc, err := nats.Connect(srv.URL(), opts...)
		if err == nil {
			nc.Close()
		}
		require.Error(t, err, name)
	}
}

// TestWorkerPermissions publishes and subscribes, as worker w1, to every
// kind of subject of the system and compares the permission violations the
// server reports with the model: w1 publishes only its own report subjects
// and subscribes only to its own offers, cancels and inbox, and discovery.
func TestWorkerPermissions(t *testing.T) {
	t.Parallel()
	srv, auth := startTokenServer(t)
	var e errs
	nc := connectWorker(t, srv.URL(), "w1", auth.WorkerPassword("w1"), &e)
	checks := []permCheck{
		{contracts.HeartbeatSubject("w1"), true, false},
		{contracts.ProgressSubject("w1"), true, false},
		{contracts.AnnounceSubject("w1"), true, false},
		{contracts.ResultSubject("w1"), true, false},
		{contracts.WorkerRequeueSubject("w1"), true, false},
		{contracts.WorkerOfferSubject("w1"), false, true},
		{contracts.WorkerCancelSubject("w1"), false, true},
		{contracts.SubjectDiscover, false, true},
		{contracts.ServiceInboxSubjects(bus.WorkerUser("w1")), false, true},
		{contracts.ServiceInboxPrefix(bus.WorkerUser("w1"), "n1") + ".r1", false, true},
		// Another worker's subjects, each and all.
		{contracts.HeartbeatSubject("w2"), false, false},
		{contracts.ProgressSubject("w2"), false, false},
		{contracts.AnnounceSubject("w2"), false, false},
		{contracts.ResultSubject("w2"), false, false},
		{contracts.WorkerRequeueSubject("w2"), false, false},
		{contracts.WorkerOfferSubject("w2"), false, false},
		{contracts.WorkerCancelSubject("w2"), false, false},
		{"sluice.worker.offer.*", false, false},
		{"sluice.worker.offer.>", false, false},
		{"sluice.worker.>", false, false},
		{contracts.HeartbeatSubjects, false, false},
		{contracts.ResultSubjects, false, false},
		{contracts.ServiceInboxSubjects(bus.WorkerUser("w2")), false, false},
		{contracts.ServiceInboxSubjects(bus.InternalUser), false, false},
		{contracts.ServiceInboxRoot + ".>", false, false},
		// The shared subjects of earlier releases and the services'.
		{contracts.LegacySubjectResult, false, false},
		{"sluice.heartbeat", false, false},
		{"sluice.progress", false, false},
		{"sluice.worker.announce", false, false},
		{contracts.SubjectRequeue, false, false},
		{contracts.SubjectDue, false, false},
		{contracts.SubjectWake, false, false},
		{contracts.SubjectScaleRequest, false, false},
		{contracts.SubjectRateUsage, false, false},
		{contracts.StreamSubjects, false, false},
		{contracts.SubjectSubmit, false, false},
		{contracts.EventSubject("a", "j1"), false, false},
		{contracts.TenantInboxSubjects("a"), false, false},
		{contracts.DefaultInboxPrefix + ".>", false, false},
		{"$JS.API.STREAM.INFO." + contracts.StreamName, false, false},
		{"$JS.API.CONSUMER.MSG.NEXT." + contracts.StreamName + "." + contracts.ConsumerDue, false, false},
		{"$JS.API.>", false, false},
		{"$JS.ACK." + contracts.StreamName + ".>", false, false},
		{"$SRV.PING", false, false},
		{"$SYS.>", false, false},
		{">", false, false},
	}
	checkPermissions(t, nc, &e, checks)
}

// TestWorkerConversations runs what a worker does on NATS as its own
// user: it answers its own offers, not another worker's (which never reach
// it); its results reach the stream and JetStream's acknowledgement
// reaches it; a result on another worker's subject is refused and stored
// nowhere.
func TestWorkerConversations(t *testing.T) {
	t.Parallel()
	srv, auth := startTokenServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	internal, err := bus.Connect(ctx, bus.ConnectOptions{URL: srv.URL(), Name: "scheduler", User: bus.InternalUser, Password: auth.InternalPassword})
	require.NoError(t, err)
	defer internal.Close()
	ijs, err := jetstream.New(internal)
	require.NoError(t, err)
	_, err = bus.EnsureStream(ctx, ijs)
	require.NoError(t, err)

	var e1, e2 errs
	w1 := connectWorker(t, srv.URL(), "w1", auth.WorkerPassword("w1"), &e1)
	w2 := connectWorker(t, srv.URL(), "w2", auth.WorkerPassword("w2"), &e2)
	_, err = w1.Subscribe(contracts.WorkerOfferSubject("w1"), func(m *nats.Msg) { _ = m.Respond([]byte("w1")) })
	require.NoError(t, err)
	stolen := make(chan *nats.Msg, 4)
	_, err = w2.ChanSubscribe(contracts.WorkerOfferSubject("w1"), stolen) // refused
	require.NoError(t, err)
	require.NoError(t, w1.Flush())
	require.NoError(t, w2.Flush())

	reply, err := internal.RequestWithContext(ctx, contracts.WorkerOfferSubject("w1"), []byte(`{"job":"secret"}`))
	require.NoError(t, err)
	require.Equal(t, "w1", string(reply.Data), "w1 answers its own offer")

	js1, err := jetstream.New(w1)
	require.NoError(t, err)
	require.NoError(t, bus.Publish(ctx, js1, contracts.ResultSubject("w1"), contracts.Result{JobID: "j1", Claim: 1, WorkerID: "w1", State: contracts.StateSucceeded}, ""),
		"w1's result is stored and acknowledged")
	js2, err := jetstream.New(w2)
	require.NoError(t, err)
	pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer pcancel()
	require.Error(t, bus.Publish(pctx, js2, contracts.ResultSubject("w1"), contracts.Result{JobID: "j1", Claim: 1, WorkerID: "w1", State: contracts.StateSucceeded}, ""),
		"w2 cannot report as w1")

	s, err := ijs.Stream(ctx, contracts.StreamName)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.Msgs, "only w1's own result is in the stream")

	require.Empty(t, stolen, "w2 never receives w1's offer")
	require.Empty(t, e1.violations())
	require.Eventually(t, func() bool { return len(e2.violations()) >= 2 }, 5*time.Second, 10*time.Millisecond)
	// The refused publish may be tried again when the stream seems gone
	// (bus.Publish looks the stream up, which w2 may not do either).
	got := e2.violations()
	require.Contains(t, got, fmt.Sprintf("Subscription to %q", contracts.WorkerOfferSubject("w1")))
	require.Contains(t, got, fmt.Sprintf("Publish to %q", contracts.ResultSubject("w1")))
}

// TestPermissionsOfOneWorker checks WorkerPermissions as the server takes
// them: the lists themselves.
func TestPermissionsOfOneWorker(t *testing.T) {
	t.Parallel()
	p := bus.WorkerPermissions("w-7")
	require.Equal(t, []string{"sluice.heartbeat.w-7", "sluice.progress.w-7", "sluice.worker.announce.w-7",
		"sluice.jobs.result.w-7", "sluice.jobs.requeue.w-7"}, p.Publish.Allow)
	require.Empty(t, p.Publish.Deny)
	require.Equal(t, []string{"sluice.worker.offer.w-7", "sluice.worker.cancel.w-7", "sluice.worker.discover",
		"_SLUICE_INBOX.worker_w-7.>"}, p.Subscribe.Allow)
	require.Empty(t, p.Subscribe.Deny)
	require.Equal(t, &server.ResponsePermission{MaxMsgs: 1, Expires: 2 * time.Minute}, p.Response, "answers each offer once")
}
