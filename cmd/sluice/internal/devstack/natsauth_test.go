package devstack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/contracts"
)

// TestTokenModeClosesTheEmbeddedNATS runs the all-in-one stack in token
// mode: an outside NATS client without a token is refused; one that
// presents a tenant's API token submits through NATS (Sluice-Token header)
// and follows its own events, but cannot read another tenant's; the
// services inside keep working end to end.
func TestTokenModeClosesTheEmbeddedNATS(t *testing.T) {
	t.Parallel()
	b := startTokenStack(t, Options{Workers: 1}, map[string]string{
		"SLUICE_API_TOKENS": dashTenant + ":" + dashToken + ",other:other-token",
	})
	_, err := nats.Connect(b.stack.NATSURL, nats.Timeout(5*time.Second))
	require.Error(t, err, "no credentials: refused")

	nc, err := nats.Connect(b.stack.NATSURL, nats.UserInfo(dashTenant, dashToken),
		nats.CustomInboxPrefix(contracts.TenantInboxPrefix(dashTenant)))
	require.NoError(t, err)
	defer nc.Close()
	events, err := nc.SubscribeSync(contracts.TenantEventSubjects(dashTenant))
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	m := &nats.Msg{Subject: contracts.SubjectSubmit, Data: []byte(`{"kind":"sleep","payload":{"ms":1}}`), Header: nats.Header{}}
	m.Header.Set(contracts.HeaderToken, dashToken)
	res, err := nc.RequestMsg(m, 10*time.Second)
	require.NoError(t, err)
	var reply contracts.SubmitReply
	require.NoError(t, json.Unmarshal(res.Data, &reply), string(res.Data))
	require.Equal(t, http.StatusAccepted, reply.Status, string(res.Data))
	require.Equal(t, dashTenant, reply.Job.Tenant)
	_, err = events.NextMsg(10 * time.Second)
	require.NoError(t, err, "the tenant sees its own job's events")

	_, err = nc.SubscribeSync(contracts.TenantEventSubjects("other"))
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	require.Eventually(t, func() bool { return nc.LastError() != nil }, 5*time.Second, 10*time.Millisecond,
		"subscribing to another tenant's events is refused")
	require.ErrorIs(t, nc.LastError(), nats.ErrPermissionViolation)

	// The job runs to succeeded through the services' own connections.
	require.Eventually(t, func() bool {
		status, body := b.tokenDo(t, http.MethodGet, "/v1/jobs/"+reply.Job.ID, "")
		var j contracts.Job
		return status == http.StatusOK && json.Unmarshal([]byte(body), &j) == nil && j.State == contracts.StateSucceeded
	}, 20*time.Second, 20*time.Millisecond)
}

// tenantClient is a tenant's NATS connection as its own client would open
// it: its token, its own inbox prefix; it keeps every message it receives
// and every permission violation the server reports.
type tenantClient struct {
	tenant, token string
	nc            *nats.Conn

	mu         sync.Mutex
	got        []*nats.Msg
	violations []string
}

// keepViolation is the client's error handler: it keeps each permission
// violation the server reports, as "Publish to \"subject\"" or
// "Subscription to \"subject\"".
func (c *tenantClient) keepViolation(_ *nats.Conn, _ *nats.Subscription, err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	v := err.Error()
	if _, after, ok := strings.Cut(v, "Permissions Violation for "); ok {
		v = after
	}
	if i := strings.Index(v, `" `); i >= 0 {
		v = v[:i+1]
	}
	c.mu.Lock()
	c.violations = append(c.violations, v)
	c.mu.Unlock()
}

func connectTenant(t *testing.T, url, tenant, token string) *tenantClient {
	t.Helper()
	c := &tenantClient{tenant: tenant, token: token}
	nc, err := nats.Connect(url, nats.UserInfo(tenant, token),
		nats.CustomInboxPrefix(contracts.TenantInboxPrefix(tenant)),
		nats.ErrorHandler(c.keepViolation))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	c.nc = nc
	return c
}

// listen subscribes to subject, keeping what arrives.
func (c *tenantClient) listen(t *testing.T, subject string) {
	t.Helper()
	_, err := c.nc.Subscribe(subject, func(m *nats.Msg) {
		c.mu.Lock()
		c.got = append(c.got, m)
		c.mu.Unlock()
	})
	require.NoError(t, err)
}

func (c *tenantClient) received() []*nats.Msg {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

func (c *tenantClient) refused() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.violations)
}

// submit submits body over NATS (sluice.api.submit) and returns the reply.
func (c *tenantClient) submit(t *testing.T, body string) contracts.SubmitReply {
	t.Helper()
	m := &nats.Msg{Subject: contracts.SubjectSubmit, Data: []byte(body), Header: nats.Header{}}
	m.Header.Set(contracts.HeaderToken, c.token)
	res, err := c.nc.RequestMsg(m, 10*time.Second)
	require.NoError(t, err, "%s: submit over NATS", c.tenant)
	var reply contracts.SubmitReply
	require.NoError(t, json.Unmarshal(res.Data, &reply), string(res.Data))
	require.Equal(t, http.StatusAccepted, reply.Status, string(res.Data))
	return reply
}

// waitSucceeded follows the client's own events until job succeeded.
func (c *tenantClient) waitSucceeded(t *testing.T, events *nats.Subscription, jobID string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		m, err := events.NextMsg(time.Until(deadline))
		require.NoError(t, err, "%s: no event of %s", c.tenant, jobID)
		var ev contracts.Event
		require.NoError(t, json.Unmarshal(m.Data, &ev))
		if ev.JobID == jobID && ev.State == contracts.StateSucceeded {
			return
		}
	}
	t.Fatalf("%s: job %s never succeeded", c.tenant, jobID)
}

// TestTenantsReadNothingOfEachOther runs two tenants in token mode on the
// embedded NATS server. Tenant acme, with its own token, tries to listen
// to every reply (_INBOX.>), to everything (>), to the other tenant's
// inbox and events, to the services' inboxes and subjects, while the
// other tenant submits an exec job over NATS and waits for its result
// (its job prints a secret). acme's forbidden subscriptions are refused,
// and nothing of the other tenant reaches acme on any subject.
func TestTenantsReadNothingOfEachOther(t *testing.T) {
	t.Parallel()
	b := startTokenStack(t, Options{Workers: 1}, map[string]string{
		"SLUICE_API_TOKENS":        dashTenant + ":" + dashToken + ",other:other-token",
		"SLUICE_WORKER_EXEC_ALLOW": "/bin/sh",
	})
	spy := connectTenant(t, b.stack.NATSURL, dashTenant, dashToken)
	forbidden := []string{
		contracts.DefaultInboxPrefix + ".>", ">", contracts.TenantInboxSubjects("other"),
		contracts.ServiceInboxRoot + ".>", contracts.TenantEventSubjects("other"), "sluice.events.>",
		contracts.StreamSubjects, "sluice.>", "$SRV.>", "$JS.>", "_INBOX_*.>", "*.>",
	}
	for _, s := range forbidden {
		spy.listen(t, s)
	}
	spy.listen(t, contracts.TenantInboxSubjects(dashTenant))
	spy.listen(t, contracts.TenantEventSubjects(dashTenant))
	require.NoError(t, spy.nc.Flush())
	var want []string
	for _, s := range forbidden {
		want = append(want, fmt.Sprintf("Subscription to %q", s))
	}
	require.Eventually(t, func() bool { return len(spy.refused()) >= len(forbidden) }, 10*time.Second, 10*time.Millisecond)
	require.ElementsMatch(t, want, spy.refused(), "every forbidden subscription is refused")

	// The other tenant submits over NATS and waits for its result.
	const secret = "other-tenant-secret-7f3a"
	victim := connectTenant(t, b.stack.NATSURL, "other", "other-token")
	events, err := victim.nc.SubscribeSync(contracts.TenantEventSubjects("other"))
	require.NoError(t, err)
	require.NoError(t, victim.nc.Flush())
	job := victim.submit(t, `{"kind":"exec","payload":{"argv":["/bin/sh","-c","echo `+secret+`"]}}`)
	require.Equal(t, "other", job.Job.Tenant)
	victim.waitSucceeded(t, events, job.Job.ID)
	require.Empty(t, victim.refused())

	// acme's own job runs through the same services after the other's:
	// once it succeeded, whatever the other's job sent is long delivered.
	mine, err := spy.nc.SubscribeSync(contracts.TenantEventSubjects(dashTenant))
	require.NoError(t, err)
	require.NoError(t, spy.nc.Flush())
	own := spy.submit(t, `{"kind":"sleep","payload":{"ms":1}}`)
	spy.waitSucceeded(t, mine, own.Job.ID)

	for _, m := range spy.received() {
		require.True(t, strings.HasPrefix(m.Subject, contracts.TenantInboxPrefix(dashTenant)+".") ||
			strings.HasPrefix(m.Subject, "sluice.events."+dashTenant+"."), "acme received a message on %s", m.Subject)
		require.NotContains(t, string(m.Data), job.Job.ID, "acme received the other tenant's job on %s", m.Subject)
		require.NotContains(t, string(m.Data), secret, "acme received the other tenant's output on %s", m.Subject)
		require.NotContains(t, string(m.Data), `"tenant":"other"`, "on %s", m.Subject)
	}
	require.ElementsMatch(t, want, spy.refused(), "nothing else was refused")
}

// thiefClient is a NATS connection with one worker's credentials, used to
// try what a leaked worker password allows.
type thiefClient struct {
	*tenantClient
	js jetstream.JetStream
}

// connectAsWorker connects to the stack's embedded server with worker id's
// own credentials (Stack.WorkerCredentials), with the inbox a service
// connection of that user takes, recording its permission violations.
func connectAsWorker(t *testing.T, b *bundle, id string) *thiefClient {
	t.Helper()
	user, password := b.stack.WorkerCredentials(id)
	require.NotEmpty(t, user, "token mode gives each worker its own user")
	c := &tenantClient{tenant: user}
	nc, err := nats.Connect(b.stack.NATSURL, nats.UserInfo(user, password),
		nats.CustomInboxPrefix(bus.ServiceInboxPrefix(user, "")),
		nats.ErrorHandler(c.keepViolation))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	c.nc = nc
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return &thiefClient{tenantClient: c, js: js}
}

// refusedReports reads sluice_scheduler_refused_reports_total{report, outcome}
// from the stack's registry (the first scheduler's metrics).
func refusedReports(t *testing.T, b *bundle, report, outcome string) float64 {
	t.Helper()
	mfs, err := b.stack.Registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "sluice_scheduler_refused_reports_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["report"] == report && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestForgedReportsFromASecondWorkerIdentity runs the attack a leaked
// worker password allowed: with a second worker's NATS credentials, read
// the first worker's offers and end its job with a forged result. On the
// embedded server in token mode the second identity may neither listen to
// the first worker's offers or cancels nor publish on its report subjects
// (permission violations); what it sends on its own subjects about the
// first worker's job (results naming itself or the victim, heartbeats,
// progress, a shutdown requeue) is refused by the scheduler and counted;
// the victim's run goes on, and its own result is the one applied.
func TestForgedReportsFromASecondWorkerIdentity(t *testing.T) {
	t.Parallel()
	b := startTokenStack(t, Options{Workers: 1}, map[string]string{
		"SLUICE_API_TOKENS": dashTenant + ":" + dashToken,
	})
	victim := b.stack.Workers[0].ID()
	id := b.tokenSubmit(t, `{"kind":"sleep","payload":{"ms":3000},"max_attempts":1}`)
	var running contracts.Job
	require.Eventually(t, func() bool {
		status, body := b.tokenDo(t, http.MethodGet, "/v1/jobs/"+id, "")
		return status == http.StatusOK && json.Unmarshal([]byte(body), &running) == nil && running.State == contracts.StateRunning
	}, 20*time.Second, 10*time.Millisecond)
	require.Equal(t, victim, running.Worker)
	lease := contracts.Lease{JobID: id, Claim: running.Claim}

	thief := connectAsWorker(t, b, "thief")
	// The victim's subjects: refused by the server.
	var want []string
	for _, s := range []string{contracts.WorkerOfferSubject(victim), contracts.WorkerCancelSubject(victim), "sluice.worker.offer.*"} {
		thief.listen(t, s)
		want = append(want, fmt.Sprintf("Subscription to %q", s))
	}
	forgedAsVictim, err := json.Marshal(contracts.Result{JobID: id, Claim: running.Claim, WorkerID: victim,
		State: contracts.StateSucceeded, Result: json.RawMessage(`"forged"`)})
	require.NoError(t, err)
	for _, s := range []string{contracts.ResultSubject(victim), contracts.LegacySubjectResult, contracts.HeartbeatSubject(victim),
		contracts.ProgressSubject(victim), contracts.AnnounceSubject(victim), contracts.WorkerRequeueSubject(victim)} {
		require.NoError(t, thief.nc.Publish(s, forgedAsVictim))
		want = append(want, fmt.Sprintf("Publish to %q", s))
	}
	require.NoError(t, thief.nc.Flush())
	require.Eventually(t, func() bool { return len(thief.refused()) >= len(want) }, 10*time.Second, 10*time.Millisecond)
	require.ElementsMatch(t, want, thief.refused())

	// Its own subjects: stored or answered, and refused by the scheduler.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	asItself := contracts.Result{JobID: id, Claim: running.Claim, WorkerID: "thief", State: contracts.StateSucceeded,
		Result: json.RawMessage(`"forged"`)}
	require.NoError(t, bus.Publish(ctx, thief.js, contracts.ResultSubject("thief"), asItself, ""))
	require.NoError(t, bus.PublishMessage(ctx, thief.js, bus.Message{Subject: contracts.ResultSubject("thief"), Data: forgedAsVictim}))
	hb := func(named string) contracts.HeartbeatAck {
		data, err := json.Marshal(contracts.Heartbeat{WorkerID: named, Leases: []contracts.Lease{lease}})
		require.NoError(t, err)
		msg, err := thief.nc.RequestWithContext(ctx, contracts.HeartbeatSubject("thief"), data)
		require.NoError(t, err)
		ack, err := contracts.DecodeHeartbeatAck(msg.Data)
		require.NoError(t, err)
		return ack
	}
	require.Equal(t, []contracts.Lease{lease}, hb("thief").Lost, "a lease it does not hold is lost to it")
	require.Contains(t, hb(victim).Error, "heartbeat refused")
	for _, named := range []string{"thief", victim} {
		p, err := json.Marshal(contracts.ProgressReport{JobID: id, Claim: running.Claim, WorkerID: named,
			Progress: contracts.Progress{Percent: 99, Message: "forged"}})
		require.NoError(t, err)
		require.NoError(t, thief.nc.Publish(contracts.ProgressSubject("thief"), p))
	}
	require.NoError(t, bus.Publish(ctx, thief.js, contracts.WorkerRequeueSubject("thief"),
		contracts.Requeue{JobID: id, Claim: running.Claim, State: contracts.StateRunning, Reason: contracts.ReasonShutdown}, ""))
	for _, c := range []struct{ report, outcome string }{
		{"result", "foreign"}, {"result", "mismatch"}, {"heartbeat", "mismatch"},
		{"progress", "foreign"}, {"progress", "mismatch"}, {"requeue", "foreign"},
	} {
		require.Eventually(t, func() bool { return refusedReports(t, b, c.report, c.outcome) >= 1 }, 10*time.Second, 10*time.Millisecond,
			"%s refused as %s", c.report, c.outcome)
	}

	// The victim's run went on: still its own, at its claim; its own result ends it.
	status, body := b.tokenDo(t, http.MethodGet, "/v1/jobs/"+id, "")
	require.Equal(t, http.StatusOK, status)
	var mid contracts.Job
	require.NoError(t, json.Unmarshal([]byte(body), &mid))
	require.Equal(t, contracts.StateRunning, mid.State, "the forged reports ended nothing")
	require.Equal(t, victim, mid.Worker)
	require.Equal(t, running.Claim, mid.Claim)
	var done contracts.Job
	require.Eventually(t, func() bool {
		status, body := b.tokenDo(t, http.MethodGet, "/v1/jobs/"+id, "")
		return status == http.StatusOK && json.Unmarshal([]byte(body), &done) == nil && done.State.Final()
	}, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, contracts.StateSucceeded, done.State, done.Error)
	require.Equal(t, victim, done.Worker)
	require.Equal(t, running.Claim, done.Claim)
	require.JSONEq(t, `{"slept_ms":3000}`, string(done.Result), "the victim's own result")
	if done.Progress != nil {
		require.NotEqual(t, "forged", done.Progress.Message)
	}
}

// TestWorkerProcessWithItsOwnCredentials: in token mode a worker process
// the stack's owner starts joins with the credentials the stack gives its
// id (SLUICE_NATS_USER, SLUICE_NATS_PASSWORD) and runs jobs end to end;
// with another id's credentials it is refused.
func TestWorkerProcessWithItsOwnCredentials(t *testing.T) {
	t.Parallel()
	b := startTokenStack(t, Options{Workers: -1}, map[string]string{
		"SLUICE_API_TOKENS": dashTenant + ":" + dashToken,
	})
	user, password := b.stack.WorkerCredentials("proc-1")
	_, wrong := b.stack.WorkerCredentials("proc-2")
	_, err := nats.Connect(b.stack.NATSURL, nats.UserInfo(user, wrong))
	require.Error(t, err, "another worker's password is refused")
	startWorkerProcess(t, b, "proc-1", "SLUICE_NATS_USER="+user, "SLUICE_NATS_PASSWORD="+password)
	id := b.tokenSubmit(t, `{"kind":"sleep","payload":{"ms":10}}`)
	var done contracts.Job
	require.Eventually(t, func() bool {
		status, body := b.tokenDo(t, http.MethodGet, "/v1/jobs/"+id, "")
		return status == http.StatusOK && json.Unmarshal([]byte(body), &done) == nil && done.State.Final()
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, contracts.StateSucceeded, done.State, done.Error)
	require.Equal(t, "proc-1", done.Worker)
}
