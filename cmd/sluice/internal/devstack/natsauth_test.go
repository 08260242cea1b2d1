package devstack

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

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

	nc, err := nats.Connect(b.stack.NATSURL, nats.UserInfo(dashTenant, dashToken))
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
