package compose

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/bus/bustest"
	"github.com/sluicehq/sluice/pkg/bus/events"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/service"
)

// startNATS runs nats.conf alone on a random loopback port with JetStream
// under a temporary directory (StartEmbedded overrides the file's listen
// address and store directory, and drops its cluster) and returns its
// client URL. startNATSCluster runs it as the cluster it is.
func startNATS(t *testing.T) string {
	t.Helper()
	return bustest.StartWith(t, bus.EmbeddedOptions{ConfigFile: natsConf, Listen: "127.0.0.1:0", Standalone: true}).URL()
}

// startNATSCluster runs nats.conf as a cluster of three on loopback (the
// file's routes name the compose services; the nodes here route to each
// other's loopback ports) and returns the URL of every node.
func startNATSCluster(t *testing.T) *bustest.Cluster {
	t.Helper()
	return bustest.StartClusterWith(t, 3, bus.EmbeddedOptions{ConfigFile: natsConf})
}

// password is the password compose.yaml gives user (its default).
func password(t *testing.T, user string) string {
	t.Helper()
	pw := environment(defaultProject.Services[natsNodes[0]])[passwordVar(user)]
	require.NotEmpty(t, pw, user)
	return pw
}

// client is a NATS connection that records the asynchronous errors the
// server reports (permission violations among them).
type client struct {
	user string
	nc   *nats.Conn
	js   jetstream.JetStream
	errs chan error
}

func connect(t *testing.T, url, user string) *client {
	t.Helper()
	c := &client{user: user, errs: make(chan error, 256)}
	nc, err := nats.Connect(url,
		nats.Name("test-"+user),
		nats.UserInfo(user, password(t, user)),
		nats.CustomInboxPrefix(inboxPrefix(user)),
		nats.MaxReconnects(0),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case c.errs <- err:
			default:
			}
		}))
	require.NoError(t, err, "connect as %s", user)
	t.Cleanup(nc.Close)
	c.nc = nc
	c.js, err = jetstream.New(nc)
	require.NoError(t, err)
	return c
}

// inboxPrefix is the inbox prefix a connection of user takes: a service's
// as pkg/bus gives it, the client's its tenant's.
func inboxPrefix(user string) string {
	if user == "client" {
		return contracts.TenantInboxPrefix(user)
	}
	return bus.ServiceInboxPrefix(user, "")
}

// sentinel is a subject no user may publish to: its violation marks the
// end of a batch of checks on one connection (the server answers in order).
const sentinel = "sluice.test.sentinel"

// violations flushes c, publishes the sentinel and returns the permission
// violations the server reported before the sentinel's, as
// `Publish to "…"` and `Subscription to "…"` strings.
func (c *client) violations(t *testing.T) []string {
	t.Helper()
	require.NoError(t, c.nc.Publish(sentinel, nil))
	require.NoError(t, c.nc.Flush())
	var got []string
	timeout := time.After(5 * time.Second)
	for {
		select {
		case err := <-c.errs:
			require.ErrorIs(t, err, nats.ErrPermissionViolation, "%s: unexpected async error", c.user)
			v := violation(err)
			if v == fmt.Sprintf("Publish to %q", sentinel) {
				return got
			}
			got = append(got, v)
		case <-timeout:
			t.Fatalf("%s: no violation reported for the sentinel subject", c.user)
		}
	}
}

// violation turns `…Permissions Violation for Publish to "x" using reply…`
// into `Publish to "x"`.
func violation(err error) string {
	s := err.Error()
	if _, after, ok := strings.Cut(s, "Permissions Violation for "); ok {
		s = after
	}
	if i := strings.Index(s, `" `); i >= 0 { // drop `using queue "q"`, `using reply subject …`
		s = s[:i+1]
	}
	return s
}

// sub is a subscription: a subject, with an optional queue group.
type sub struct{ subject, queue string }

// access is what one user must be allowed and refused.
type access struct {
	pub, noPub []string
	sub, noSub []sub
}

// othersInboxes are the inboxes user may not read: the shared default, the
// other users' (services' and tenants') and every tenant's or service's at
// once.
func othersInboxes(user string) []sub {
	out := []sub{{contracts.DefaultInboxPrefix + ".>", ""}, {contracts.ServiceInboxRoot + ".>", ""}, {"_INBOX_*.>", ""},
		{contracts.TenantInboxSubjects("other-tenant"), ""}}
	for _, u := range natsUsers {
		if u == user {
			continue
		}
		if u == "client" {
			out = append(out, sub{contracts.TenantInboxSubjects(u), ""})
		} else {
			out = append(out, sub{contracts.ServiceInboxSubjects(u), ""})
		}
	}
	return out
}

// workerAccess is what worker id's user must be allowed and refused;
// other is another worker's id.
func workerAccess(id, other string) access {
	return access{
		pub: []string{contracts.HeartbeatSubject(id), contracts.AnnounceSubject(id), contracts.ResultSubject(id),
			contracts.WorkerRequeueSubject(id), contracts.ProgressSubject(id)},
		noPub: []string{contracts.SubjectDue, contracts.EventSubject("acme", "j1"), contracts.SubjectSubmit,
			contracts.WorkerOfferSubject(id), contracts.WorkerOfferSubject(other), contracts.WorkerCancelSubject(other),
			// Another worker's report subjects: one worker's password cannot
			// report (end, renew, requeue) another's jobs.
			contracts.HeartbeatSubject(other), contracts.ProgressSubject(other), contracts.AnnounceSubject(other),
			contracts.ResultSubject(other), contracts.WorkerRequeueSubject(other),
			// The shared subjects of earlier releases, and the reaper's.
			contracts.LegacySubjectResult, "sluice.heartbeat", "sluice.progress", "sluice.worker.announce", contracts.SubjectRequeue,
			contracts.SubjectRateUsage,
			contracts.SubjectDiscover, "$JS.API.STREAM.CREATE.SLUICE_JOBS", "$JS.API.STREAM.UPDATE.SLUICE_JOBS",
			"$JS.API.STREAM.DELETE.SLUICE_JOBS", "$JS.API.STREAM.INFO.SLUICE_JOBS",
			"$JS.API.CONSUMER.CREATE.SLUICE_JOBS.sluice-scheduler-due.sluice.jobs.due",
			"$JS.API.CONSUMER.CREATE.SLUICE_JOBS.sluice-scheduler-result",
			"$JS.API.CONSUMER.MSG.NEXT.SLUICE_JOBS.sluice-scheduler-due",
			"$JS.ACK.SLUICE_JOBS.sluice-scheduler-due.1.1.1.1.0", "_INBOX.someone.else"},
		sub: []sub{{contracts.WorkerOfferSubject(id), ""}, {contracts.WorkerCancelSubject(id), ""}, {contracts.SubjectDiscover, ""},
			{contracts.ServiceInboxPrefix(id, "abc") + ".*", ""}},
		// Never another worker's offers or cancels, each or all.
		noSub: append([]sub{{contracts.WorkerOfferSubject(other), ""}, {contracts.WorkerCancelSubject(other), ""},
			{"sluice.worker.offer.*", ""}, {"sluice.worker.cancel.*", ""}, {"sluice.worker.>", ""},
			{contracts.HeartbeatSubjects, ""}, {contracts.HeartbeatSubjects, contracts.QueueScheduler},
			{contracts.SubjectSubmit, "q"}, {contracts.SubjectDue, ""}, {"sluice.jobs.>", ""},
			{contracts.AnnounceSubjects, ""}, {contracts.AnnounceSubject(other), ""}, {"$SRV.PING", ""}}, othersInboxes(id)...),
	}
}

// accessOf is the permission model of nats.conf, user by user. Worker id
// "worker-1" is a worker's own, "worker-2" another's.
var accessOf = map[string]access{
	"gateway": {
		pub: []string{contracts.SubjectDue, "sluice.worker.cancel.worker-1", contracts.SubjectDiscover, contracts.SubjectRateUsage,
			"$JS.API.STREAM.INFO.SLUICE_JOBS", contracts.EventSubject("acme", "j1"), "$JS.API.STREAM.INFO.SLUICE_EVENTS",
			"$JS.API.CONSUMER.CREATE.SLUICE_EVENTS.abc.sluice.events.acme.j1"},
		noPub: []string{contracts.SubjectRequeue, contracts.LegacySubjectResult, contracts.ResultSubject("worker-1"),
			"sluice.worker.offer.worker-1", contracts.ProgressSubject("worker-1"),
			"$JS.API.STREAM.DELETE.SLUICE_EVENTS", "$JS.API.STREAM.PURGE.SLUICE_EVENTS",
			contracts.AnnounceSubject("worker-1"), contracts.HeartbeatSubject("worker-1"), contracts.SubjectSubmit,
			"$JS.API.STREAM.UPDATE.SLUICE_JOBS", "$JS.API.STREAM.DELETE.SLUICE_JOBS", "$JS.API.STREAM.PURGE.SLUICE_JOBS",
			"$JS.API.CONSUMER.CREATE.SLUICE_JOBS.sluice-scheduler-due.sluice.jobs.due",
			"$JS.API.CONSUMER.CREATE.SLUICE_JOBS.sluice-scheduler-result",
			"$JS.API.CONSUMER.MSG.NEXT.SLUICE_JOBS.sluice-scheduler-due",
			"$JS.ACK.SLUICE_JOBS.sluice-scheduler-due.1.1.1.1.0", "_INBOX.someone.else"},
		sub: []sub{{contracts.SubjectSubmit, "q"}, {"$SRV.PING", ""}, {"$SRV.INFO.sluice-api", ""},
			{"$SRV.STATS.sluice-api.abc", ""}, {contracts.AnnounceSubjects, ""}, {contracts.SubjectRateUsage, ""}, {"_SLUICE_INBOX.gateway.abc.*", ""}},
		noSub: append([]sub{{contracts.SubjectDue, ""}, {"sluice.jobs.>", ""}, {contracts.HeartbeatSubjects, contracts.QueueScheduler},
			{"sluice.worker.offer.worker-1", ""}, {"sluice.worker.cancel.worker-1", ""}, {"$SRV.PING.other", ""}, {">", ""}}, othersInboxes("gateway")...),
	},
	"scheduler": {
		pub: []string{contracts.SubjectDue, "sluice.worker.offer.worker-1", "sluice.worker.cancel.worker-1",
			contracts.SubjectDiscover, "$JS.API.STREAM.INFO.SLUICE_JOBS",
			"$JS.API.CONSUMER.INFO.SLUICE_JOBS.sluice-scheduler-due", contracts.EventSubject("acme", "j1")},
		noPub: []string{contracts.LegacySubjectResult, contracts.ResultSubject("worker-1"), contracts.ProgressSubject("worker-1"),
			"$JS.API.STREAM.DELETE.SLUICE_EVENTS", contracts.SubjectRequeue, contracts.WorkerRequeueSubject("worker-1"), contracts.SubjectSubmit,
			contracts.SubjectRateUsage,
			contracts.HeartbeatSubject("worker-1"), contracts.AnnounceSubject("worker-1"),
			"$JS.API.STREAM.UPDATE.SLUICE_JOBS", "$JS.API.STREAM.DELETE.SLUICE_JOBS", "$JS.API.STREAM.PURGE.SLUICE_JOBS",
			"$JS.API.STREAM.CREATE.OTHER",
			"$JS.API.CONSUMER.DELETE.SLUICE_JOBS.sluice-scheduler-due",
			"$JS.API.CONSUMER.CREATE.SLUICE_JOBS.other.sluice.jobs.due", "$JS.API.CONSUMER.CREATE.SLUICE_JOBS.other",
			"_INBOX.someone.else"},
		sub: []sub{{contracts.HeartbeatSubjects, contracts.QueueScheduler}, {contracts.ProgressSubjects, contracts.QueueScheduler},
			{contracts.AnnounceSubjects, ""}, {"_SLUICE_INBOX.scheduler.abc.*", ""}},
		noSub: append([]sub{{contracts.HeartbeatSubjects, ""}, {contracts.ProgressSubjects, ""}, {"sluice.events.>", ""},
			{contracts.HeartbeatSubjects, "other"}, {contracts.SubjectSubmit, "q"},
			{"sluice.worker.offer.worker-1", ""}, {"sluice.jobs.>", ""}}, othersInboxes("scheduler")...),
	},
	"worker-1": workerAccess("worker-1", "worker-2"),
	"worker-2": workerAccess("worker-2", "worker-3"),
	"worker-3": workerAccess("worker-3", "worker-1"),
	"reaper": {
		pub: []string{contracts.SubjectRequeue, "$JS.API.STREAM.INFO.SLUICE_JOBS"},
		noPub: []string{contracts.SubjectDue, contracts.LegacySubjectResult, contracts.ResultSubject("worker-1"),
			contracts.WorkerRequeueSubject("worker-1"), "sluice.worker.cancel.worker-1", "sluice.worker.offer.worker-1",
			contracts.HeartbeatSubject("worker-1"), contracts.SubjectSubmit, "$JS.API.STREAM.UPDATE.SLUICE_JOBS",
			"$JS.API.STREAM.DELETE.SLUICE_JOBS",
			"$JS.API.CONSUMER.CREATE.SLUICE_JOBS.sluice-scheduler-requeue",
			"$JS.API.CONSUMER.CREATE.SLUICE_JOBS.sluice-scheduler-requeue.sluice.jobs.requeue",
			"$JS.API.CONSUMER.MSG.NEXT.SLUICE_JOBS.sluice-scheduler-requeue"},
		sub: []sub{{"_SLUICE_INBOX.reaper.abc.*", ""}},
		noSub: append([]sub{{"sluice.jobs.>", ""}, {contracts.AnnounceSubjects, ""}, {contracts.HeartbeatSubjects, contracts.QueueScheduler},
			{"sluice.events.>", ""}}, othersInboxes("reaper")...),
	},
	"client": {
		pub: []string{contracts.SubjectSubmit, contracts.SubjectSubmitBatch},
		noPub: []string{contracts.SubjectDue, contracts.ResultSubject("worker-1"), contracts.SubjectRequeue, "sluice.worker.offer.worker-1",
			"sluice.worker.cancel.worker-1", contracts.HeartbeatSubject("worker-1"), contracts.AnnounceSubject("worker-1"),
			"$JS.API.STREAM.INFO.SLUICE_JOBS", "$JS.API.STREAM.DELETE.SLUICE_JOBS",
			// discovery: the gateway answers it at any reply subject
			"$SRV.PING", "$SRV.INFO.sluice-api", "_INBOX_client.someone"},
		sub: []sub{{"_INBOX_client.abc.*", ""}},
		noSub: append([]sub{{contracts.SubjectSubmit, "q"}, {contracts.AnnounceSubjects, ""}, {"sluice.jobs.>", ""},
			{"sluice.events.>", ""}, {"$SRV.>", ""}}, othersInboxes("client")...),
	},
}

func TestNATSConfigParses(t *testing.T) {
	t.Parallel()
	opts, err := server.ProcessConfigFile(natsConf)
	require.NoError(t, err)
	require.True(t, opts.JetStream)
	require.Equal(t, "/data/jetstream", opts.StoreDir)
	require.Equal(t, 4222, opts.Port)
	require.Zero(t, opts.HTTPPort, "the monitoring port is on compose's command line, not in the file")
	require.Empty(t, opts.NoAuthUser, "no anonymous user")
	var names []string
	for _, u := range opts.Users {
		names = append(names, u.Username)
		require.Equal(t, password(t, u.Username), u.Password, "the password comes from the container's environment")
		require.NotNil(t, u.Permissions, u.Username)
		require.NotNil(t, u.Permissions.Publish, u.Username)
		require.NotNil(t, u.Permissions.Subscribe, u.Username)
		require.Empty(t, u.Permissions.Publish.Deny, "allow lists only: everything else is refused")
	}
	require.ElementsMatch(t, natsUsers, names)
	require.Len(t, accessOf, len(natsUsers))
}

func TestNATSAuthentication(t *testing.T) {
	t.Parallel()
	url := startNATS(t)
	_, err := nats.Connect(url, nats.MaxReconnects(0))
	require.ErrorIs(t, err, nats.ErrAuthorization, "no anonymous connections")
	_, err = nats.Connect(url, nats.UserInfo("worker-1", "wrong"), nats.MaxReconnects(0))
	require.ErrorIs(t, err, nats.ErrAuthorization)
	_, err = nats.Connect(url, nats.UserInfo("worker-1", password(t, "gateway")), nats.MaxReconnects(0))
	require.ErrorIs(t, err, nats.ErrAuthorization, "a service's password is its own")
	_, err = nats.Connect(url, nats.UserInfo("worker-1", password(t, "worker-2")), nats.MaxReconnects(0))
	require.ErrorIs(t, err, nats.ErrAuthorization, "a worker's password is its own")
	_, err = nats.Connect(url, nats.UserInfo("worker", "worker-local-only"), nats.MaxReconnects(0))
	require.ErrorIs(t, err, nats.ErrAuthorization, "no shared worker user")
	for _, u := range natsUsers {
		connect(t, url, u)
	}
}

// TestNATSPermissions publishes and subscribes, as each user, to what it
// must and must not reach, and compares the violations the server reports.
func TestNATSPermissions(t *testing.T) {
	t.Parallel()
	url := startNATS(t)
	for user, a := range accessOf {
		t.Run(user, func(t *testing.T) {
			t.Parallel()
			c := connect(t, url, user)
			var want []string
			for _, s := range a.pub {
				require.NoError(t, c.nc.Publish(s, nil))
			}
			for _, s := range a.noPub {
				require.NoError(t, c.nc.Publish(s, nil))
				want = append(want, fmt.Sprintf("Publish to %q", s))
			}
			for _, s := range a.sub {
				_, err := c.nc.QueueSubscribe(s.subject, s.queue, func(*nats.Msg) {})
				require.NoError(t, err)
			}
			for _, s := range a.noSub {
				_, err := c.nc.QueueSubscribe(s.subject, s.queue, func(*nats.Msg) {})
				require.NoError(t, err)
				want = append(want, fmt.Sprintf("Subscription to %q", s.subject))
			}
			require.ElementsMatch(t, want, c.violations(t))
		})
	}
}

// TestNATSRequestReply runs the core NATS conversations between the
// services, each as its own user, and what another worker's user may not
// do: listen to a worker's offers or report on its subjects.
func TestNATSRequestReply(t *testing.T) {
	t.Parallel()
	url := startNATS(t)
	gw, sched, wk, caller := connect(t, url, "gateway"), connect(t, url, "scheduler"),
		connect(t, url, "worker-1"), connect(t, url, "client")
	other := connect(t, url, "worker-2")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	// The worker listens on its own subjects and discovery; another
	// worker's user tries to listen to its offers and cancels.
	offers := make(chan *nats.Msg, 4)
	cancels := make(chan *nats.Msg, 1)
	discovers := make(chan *nats.Msg, 2)
	for subj, ch := range map[string]chan *nats.Msg{
		contracts.WorkerOfferSubject("worker-1"): offers, contracts.WorkerCancelSubject("worker-1"): cancels,
		contracts.SubjectDiscover: discovers,
	} {
		_, err := wk.nc.ChanSubscribe(subj, ch)
		require.NoError(t, err)
	}
	stolen := make(chan *nats.Msg, 4)
	for _, subj := range []string{contracts.WorkerOfferSubject("worker-1"), contracts.WorkerCancelSubject("worker-1")} {
		_, err := other.nc.ChanSubscribe(subj, stolen)
		require.NoError(t, err)
	}
	// The scheduler answers heartbeats in its queue group, with the
	// worker its subject names; it and the gateway keep the roster from
	// announcements.
	_, err := sched.nc.QueueSubscribe(contracts.HeartbeatSubjects, contracts.QueueScheduler, func(m *nats.Msg) {
		_ = m.Respond([]byte(m.Subject))
	})
	require.NoError(t, err)
	announced := make(chan *nats.Msg, 2)
	for _, c := range []*client{gw, sched} {
		_, err := c.nc.ChanSubscribe(contracts.AnnounceSubjects, announced)
		require.NoError(t, err)
	}
	// The gateway's NATS API is a micro service.
	svc, err := micro.AddService(gw.nc, micro.Config{Name: contracts.SubmitServiceName, Version: "0.0.0"})
	require.NoError(t, err)
	defer func() { _ = svc.Stop() }()
	require.NoError(t, svc.AddEndpoint("submit", micro.HandlerFunc(func(r micro.Request) {
		_ = r.Respond([]byte(`{"status":202}`))
	}), micro.WithEndpointSubject(contracts.SubjectSubmit)))
	for _, c := range []*client{gw, sched, wk, other} {
		require.NoError(t, c.nc.Flush())
	}

	// Offer: scheduler → worker, answered once.
	offerReply := make(chan string, 1)
	go func() {
		m := <-offers
		offerReply <- m.Reply
		_ = m.Respond([]byte(`{"status":"accepted"}`))
		_ = m.Respond([]byte(`{"status":"accepted"}`)) // one answer only: refused
	}()
	reply, err := sched.nc.RequestWithContext(ctx, contracts.WorkerOfferSubject("worker-1"), []byte(`{"job":"payload"}`))
	require.NoError(t, err)
	require.JSONEq(t, `{"status":"accepted"}`, string(reply.Data))
	inbox := <-offerReply

	// Heartbeat: worker → scheduler, on the worker's own subject.
	reply, err = wk.nc.RequestWithContext(ctx, contracts.HeartbeatSubject("worker-1"), []byte(`{"worker_id":"worker-1"}`))
	require.NoError(t, err)
	require.Equal(t, contracts.HeartbeatSubject("worker-1"), string(reply.Data))

	// Announce: worker → gateway and scheduler; discover and cancel → worker.
	require.NoError(t, wk.nc.Publish(contracts.AnnounceSubject("worker-1"), []byte(`{"worker_id":"worker-1"}`)))
	for range 2 {
		requireMsg(t, announced)
	}
	require.NoError(t, sched.nc.Publish(contracts.SubjectDiscover, nil))
	require.NoError(t, gw.nc.Publish(contracts.SubjectDiscover, nil))
	requireMsg(t, discovers)
	requireMsg(t, discovers)
	require.NoError(t, gw.nc.Publish(contracts.WorkerCancelSubject("worker-1"), []byte(`{"job_id":"j"}`)))
	requireMsg(t, cancels)

	// Another worker's user reports as worker-1: refused by the server,
	// heard by nobody.
	sctx, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer scancel()
	_, err = other.nc.RequestWithContext(sctx, contracts.HeartbeatSubject("worker-1"), []byte(`{"worker_id":"worker-1"}`))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, other.nc.Publish(contracts.AnnounceSubject("worker-1"), []byte(`{"worker_id":"worker-1","leaving":true}`)))

	// Submit: client → gateway, answered in the client's own inbox.
	reply, err = caller.nc.RequestWithContext(ctx, contracts.SubjectSubmit, []byte(`{"kind":"sleep"}`))
	require.NoError(t, err)
	require.JSONEq(t, `{"status":202}`, string(reply.Data))
	require.True(t, strings.HasPrefix(reply.Subject, contracts.TenantInboxPrefix("client")+"."), reply.Subject)

	// A worker cannot submit (the request is dropped: no answer).
	sctx2, scancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer scancel2()
	_, err = wk.nc.RequestWithContext(sctx2, contracts.SubjectSubmit, nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	require.Empty(t, gw.violations(t))
	require.Empty(t, sched.violations(t))
	require.Empty(t, caller.violations(t))
	// The server reports violations asynchronously: their order is not
	// the order of the publishes.
	require.ElementsMatch(t, []string{
		fmt.Sprintf("Publish to %q", inbox), // the second answer to the offer
		fmt.Sprintf("Publish to %q", contracts.SubjectSubmit),
	}, wk.violations(t))
	require.ElementsMatch(t, []string{
		fmt.Sprintf("Subscription to %q", contracts.WorkerOfferSubject("worker-1")),
		fmt.Sprintf("Subscription to %q", contracts.WorkerCancelSubject("worker-1")),
		fmt.Sprintf("Publish to %q", contracts.HeartbeatSubject("worker-1")),
		fmt.Sprintf("Publish to %q", contracts.AnnounceSubject("worker-1")),
	}, other.violations(t))
	require.Empty(t, stolen, "worker-2 received nothing of worker-1's offer or cancel")
	require.Empty(t, announced, "nobody heard the forged announcement")
}

func requireMsg(t *testing.T, ch <-chan *nats.Msg) *nats.Msg {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(5 * time.Second):
		t.Fatal("no message")
		return nil
	}
}

// link dials NATS as the services do (bus.Dial with the user and password
// compose.yaml sets), logging into a buffer the test inspects.
func link(t *testing.T, url, user string) (*bus.Link, *syncBuffer) {
	t.Helper()
	env := environment(defaultProject.Services[user])
	buf := &syncBuffer{}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	replicas, err := strconv.Atoi(env["SLUICE_STREAM_REPLICAS"])
	require.NoError(t, err, "SLUICE_STREAM_REPLICAS of %s", user)
	l, err := bus.Dial(ctx, bus.Env{URL: url, User: env["SLUICE_NATS_USER"], Password: env["SLUICE_NATS_PASSWORD"], StreamReplicas: replicas},
		t.TempDir(), "test-"+user, service.LogNotices(zerolog.New(buf)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l, buf
}

// TestNATSJetStream runs every JetStream operation of each service under
// its own user, and the ones it must not do.
// ensureStream runs ensure, each try bounded by try, until it succeeds or
// 30 s have passed: a new stream of three replicas answers only once it has
// its leader, which on a loaded machine can outlast one request.
func ensureStream(ctx context.Context, t *testing.T, name string, try time.Duration, ensure func(context.Context) error) {
	t.Helper()
	require.Eventually(t, func() bool {
		tctx, cancel := context.WithTimeout(ctx, try)
		defer cancel()
		return ensure(tctx) == nil
	}, 30*time.Second, 100*time.Millisecond, "%s stream never created", name)
}

func TestNATSJetStream(t *testing.T) {
	t.Parallel()
	// On the cluster compose.yaml runs, with its three replicas.
	url := startNATSCluster(t).URL()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	gw, gwLog := link(t, url, "gateway")
	sched, schedLog := link(t, url, "scheduler")
	wk, wkLog := link(t, url, "worker-1")
	rp, rpLog := link(t, url, "reaper")

	// Gateway: ensures the stream at startup (creating it: the cluster is
	// new, and answers once it has elected its JetStream leader),
	// publishes "due", readiness.
	ensureStream(ctx, t, "job", 2*time.Second, func(ctx context.Context) error {
		_, err := bus.EnsureStream(ctx, gw.JS)
		return err
	})
	require.NoError(t, bus.Publish(ctx, gw.JS, contracts.SubjectDue, contracts.Due{JobID: "j1"}, "due-j1"))
	require.NoError(t, bus.Check(ctx, gw.Conn, gw.JS))

	// Gateway: the event stream, followed with an ordered consumer; the
	// scheduler and the gateway publish events, a worker reports progress
	// to the schedulers' queue group.
	ensureStream(ctx, t, "event", 5*time.Second, func(ctx context.Context) error {
		_, err := events.EnsureStream(ctx, gw.JS)
		return err
	})
	follow, err := events.Follow(ctx, gw.JS, contracts.TenantEventSubjects("acme"), 0)
	require.NoError(t, err)
	progress, err := sched.Conn.QueueSubscribeSync(contracts.ProgressSubjects, contracts.QueueScheduler)
	require.NoError(t, err)
	events.NewPublisher(sched.Conn).State(contracts.Job{ID: "j1", Tenant: "acme", State: contracts.StateRunning, Claim: 1})
	events.NewPublisher(gw.Conn).State(contracts.Job{ID: "j1", Tenant: "acme", State: contracts.StateCancelled, Claim: 1})
	var got []contracts.JobState // two connections: no order between them
	for len(got) < 2 {
		select {
		case r := <-follow.C():
			got = append(got, r.Event.State)
		case <-ctx.Done():
			t.Fatalf("events %v arrived, want 2: %v", got, follow.Err())
		}
	}
	require.ElementsMatch(t, []contracts.JobState{contracts.StateRunning, contracts.StateCancelled}, got)
	follow.Close()
	require.NoError(t, wk.Conn.Publish(contracts.ProgressSubject("worker-1"), []byte(`{}`)))
	_, err = progress.NextMsg(5 * time.Second)
	require.NoError(t, err)

	// Scheduler: the stream and its three durable consumers; "due" again.
	// The result consumer is found as a release before the per-worker
	// subjects left it, reading the shared result subject alone, and is
	// moved to what this release reads (the upgrade of a deployment whose
	// JetStream volume is kept).
	old := bus.ConsumerConfig(contracts.ConsumerResult, 5*time.Second)
	old.FilterSubjects = []string{contracts.LegacySubjectResult}
	_, err = sched.JS.CreateOrUpdateConsumer(ctx, contracts.StreamName, old)
	require.NoError(t, err, "the scheduler may update its own consumer's filter")
	consumers := map[string]jetstream.Consumer{}
	for _, name := range []string{contracts.ConsumerDue, contracts.ConsumerRequeue, contracts.ConsumerResult} {
		cfg := bus.ConsumerConfig(name, 5*time.Second, contracts.ConsumerSubjects(name)...)
		c, err := bus.EnsureConsumer(ctx, sched.JS, cfg)
		require.NoError(t, err, name)
		info, err := c.Info(ctx)
		require.NoError(t, err, name)
		require.Equal(t, bus.Filters(cfg), bus.Filters(info.Config), name)
		consumers[name] = c
	}
	require.NoError(t, bus.Publish(ctx, sched.JS, contracts.SubjectDue, contracts.Due{JobID: "j2"}, ""))
	require.NoError(t, bus.Check(ctx, sched.Conn, sched.JS))
	// Creating the stream again with the same config is a no-op that proves
	// the scheduler and the reaper may create it when it is gone.
	same := bus.StreamConfig()
	same.Replicas = bus.Replicas(sched.JS)
	require.Equal(t, 3, same.Replicas)
	_, err = sched.JS.CreateStream(ctx, same)
	require.NoError(t, err)
	_, err = rp.JS.CreateStream(ctx, same)
	require.NoError(t, err)

	// Worker: results and shutdown requeues. Reaper: requeues, readiness,
	// and the stream again.
	require.NoError(t, bus.Publish(ctx, wk.JS, contracts.ResultSubject("worker-1"), contracts.Result{JobID: "j1", Claim: 1}, "result-j1-1"))
	require.NoError(t, bus.Publish(ctx, wk.JS, contracts.WorkerRequeueSubject("worker-1"), contracts.Requeue{JobID: "j3", Claim: 1}, ""))
	require.NoError(t, bus.Publish(ctx, rp.JS, contracts.SubjectRequeue, contracts.Requeue{JobID: "j4", Claim: 1}, ""))
	require.NoError(t, bus.Check(ctx, rp.Conn, rp.JS))
	_, err = bus.EnsureStream(ctx, rp.JS)
	require.NoError(t, err)

	// The scheduler consumes all of it: pull, in progress, nak with delay, ack.
	fetch := func(name string, n int) []jetstream.Msg {
		var out []jetstream.Msg
		for len(out) < n {
			b, err := consumers[name].Fetch(n-len(out), jetstream.FetchMaxWait(2*time.Second))
			require.NoError(t, err, name)
			for m := range b.Messages() {
				out = append(out, m)
			}
			require.NoError(t, b.Error(), name)
		}
		return out
	}
	due := fetch(contracts.ConsumerDue, 2)
	require.NoError(t, due[0].InProgress())
	require.NoError(t, due[0].DoubleAck(ctx))
	require.NoError(t, due[1].NakWithDelay(10*time.Millisecond))
	require.NoError(t, fetch(contracts.ConsumerDue, 1)[0].DoubleAck(ctx))
	require.NoError(t, fetch(contracts.ConsumerResult, 1)[0].DoubleAck(ctx))
	for _, m := range fetch(contracts.ConsumerRequeue, 2) {
		require.NoError(t, m.DoubleAck(ctx))
	}

	// What they must not do. A refused JetStream request gets no answer:
	// the call ends with its context, and the server reports the violation.
	refused := func(c *bus.Link, what string, op func(ctx context.Context) error) {
		octx, ocancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer ocancel()
		assert.Error(t, op(octx), what) // not require: this runs in its own goroutine
		assert.NoError(t, c.Conn.Flush())
	}
	refusals := []struct {
		c       *bus.Link
		what    string
		subject string
		op      func(ctx context.Context) error
	}{
		{wk, "worker publishes due", contracts.SubjectDue, func(ctx context.Context) error {
			_, err := wk.JS.Publish(ctx, contracts.SubjectDue, []byte(`{"job_id":"x"}`))
			return err
		}},
		{wk, "worker creates the stream", "$JS.API.STREAM.CREATE.SLUICE_JOBS", func(ctx context.Context) error {
			_, err := wk.JS.CreateStream(ctx, bus.StreamConfig())
			return err
		}},
		{wk, "worker updates the stream", "$JS.API.STREAM.UPDATE.SLUICE_JOBS", func(ctx context.Context) error {
			_, err := wk.JS.UpdateStream(ctx, bus.StreamConfig())
			return err
		}},
		{wk, "worker deletes the stream", "$JS.API.STREAM.DELETE.SLUICE_JOBS", func(ctx context.Context) error {
			return wk.JS.DeleteStream(ctx, contracts.StreamName)
		}},
		{wk, "worker creates a consumer", "$JS.API.CONSUMER.CREATE.SLUICE_JOBS.thief.sluice.jobs.due", func(ctx context.Context) error {
			_, err := wk.JS.CreateOrUpdateConsumer(ctx, contracts.StreamName, bus.ConsumerConfig("thief", time.Second, contracts.SubjectDue))
			return err
		}},
		{wk, "worker pulls due messages", "$JS.API.CONSUMER.MSG.NEXT.SLUICE_JOBS.sluice-scheduler-due", func(ctx context.Context) error {
			_, err := wk.Conn.RequestWithContext(ctx, "$JS.API.CONSUMER.MSG.NEXT.SLUICE_JOBS.sluice-scheduler-due", []byte(`{"batch":1}`))
			return err
		}},
		{wk, "worker reports a result as another worker", contracts.ResultSubject("worker-2"), func(ctx context.Context) error {
			_, err := wk.JS.Publish(ctx, contracts.ResultSubject("worker-2"), []byte(`{"job_id":"x","attempt":1,"worker_id":"worker-2","state":"succeeded"}`))
			return err
		}},
		{wk, "worker requeues as another worker", contracts.WorkerRequeueSubject("worker-2"), func(ctx context.Context) error {
			_, err := wk.JS.Publish(ctx, contracts.WorkerRequeueSubject("worker-2"), []byte(`{"job_id":"x","attempt":1,"state":"running","reason":"shutdown"}`))
			return err
		}},
		{wk, "worker reports on the shared result subject", contracts.LegacySubjectResult, func(ctx context.Context) error {
			_, err := wk.JS.Publish(ctx, contracts.LegacySubjectResult, []byte(`{"job_id":"x","attempt":1,"worker_id":"worker-1","state":"succeeded"}`))
			return err
		}},
		{rp, "reaper publishes due", contracts.SubjectDue, func(ctx context.Context) error {
			return bus.Publish(ctx, rp.JS, contracts.SubjectDue, contracts.Due{JobID: "x"}, "")
		}},
		{rp, "reaper creates a consumer", "$JS.API.CONSUMER.CREATE.SLUICE_JOBS.sluice-scheduler-requeue", func(ctx context.Context) error {
			_, err := rp.JS.CreateOrUpdateConsumer(ctx, contracts.StreamName,
				bus.ConsumerConfig(contracts.ConsumerRequeue, time.Second, contracts.ConsumerSubjects(contracts.ConsumerRequeue)...))
			return err
		}},
		{gw, "gateway updates the stream", "$JS.API.STREAM.UPDATE.SLUICE_JOBS", func(ctx context.Context) error {
			_, err := gw.JS.UpdateStream(ctx, bus.StreamConfig())
			return err
		}},
		{gw, "gateway deletes the stream", "$JS.API.STREAM.DELETE.SLUICE_JOBS", func(ctx context.Context) error {
			return gw.JS.DeleteStream(ctx, contracts.StreamName)
		}},
		{gw, "gateway publishes a result", contracts.ResultSubject("worker-1"), func(ctx context.Context) error {
			return bus.Publish(ctx, gw.JS, contracts.ResultSubject("worker-1"), contracts.Result{JobID: "x"}, "")
		}},
		{sched, "scheduler purges the stream", "$JS.API.STREAM.PURGE.SLUICE_JOBS", func(ctx context.Context) error {
			s, err := sched.JS.Stream(ctx, contracts.StreamName)
			if err != nil {
				return err
			}
			return s.Purge(ctx)
		}},
		{sched, "scheduler deletes a consumer", "$JS.API.CONSUMER.DELETE.SLUICE_JOBS.sluice-scheduler-due", func(ctx context.Context) error {
			return sched.JS.DeleteConsumer(ctx, contracts.StreamName, contracts.ConsumerDue)
		}},
	}
	var wg sync.WaitGroup
	for _, r := range refusals {
		wg.Go(func() { refused(r.c, r.what, r.op) })
	}
	wg.Wait()
	// Nothing was lost or changed by the refused calls.
	s, err := gw.JS.Stream(ctx, contracts.StreamName)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, info.State.Consumers)
	require.Zero(t, info.State.Msgs, "every message was acknowledged and nothing else was published")

	// Each refusal was a permission violation on the expected subject, and
	// the allowed operations caused none.
	logs := map[*bus.Link]*syncBuffer{gw: gwLog, sched: schedLog, wk: wkLog, rp: rpLog}
	wantViolations := map[*syncBuffer][]string{}
	for _, r := range refusals {
		wantViolations[logs[r.c]] = append(wantViolations[logs[r.c]], r.subject)
	}
	for buf, subjects := range wantViolations {
		var want []string
		for _, s := range subjects {
			want = append(want, fmt.Sprintf("Publish to %q", s))
		}
		require.Eventually(t, func() bool { return len(buf.violations()) >= len(want) }, 5*time.Second, 10*time.Millisecond)
		require.ElementsMatch(t, want, dedup(buf.violations()))
	}
}

// dedup drops repeats (a refused publish may be retried).
func dedup(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// syncBuffer collects a service's JSON log lines.
type syncBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, string(p))
	return len(p), nil
}

// violations are the permission violations bus.Connect logged, as
// `Publish to "…"` and `Subscription to "…"`.
func (b *syncBuffer) violations() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range b.lines {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal([]byte(l), &e) == nil && strings.Contains(e.Error, "Permissions Violation") {
			out = append(out, violation(errors.New(e.Error)))
		}
	}
	return out
}

// String is the log's warnings and errors.
func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range b.lines {
		if strings.Contains(l, `"level":"warn"`) || strings.Contains(l, `"level":"error"`) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}
