package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/gateway/gateway"
)

// dueIDs reads every due message in the stream with an ephemeral consumer.
func (b *bundle) dueIDs(ctx context.Context) []string {
	b.tb.Helper()
	cons, err := b.js.CreateConsumer(ctx, contracts.StreamName, jetstream.ConsumerConfig{
		FilterSubject: contracts.SubjectDue,
		AckPolicy:     jetstream.AckExplicitPolicy,
	})
	require.NoError(b.tb, err)
	batch, err := cons.Fetch(100, jetstream.FetchMaxWait(time.Second))
	require.NoError(b.tb, err)
	var ids []string
	for m := range batch.Messages() {
		d, err := contracts.DecodeDue(m.Data())
		require.NoError(b.tb, err)
		ids = append(ids, d.JobID)
	}
	require.NoError(b.tb, batch.Error())
	return ids
}

func TestDuePublished(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(tokenA, `{"kind":"due"}`).job(t)
	// A joined submit publishes nothing new.
	_ = b.submit(tokenA, `{"kind":"due"}`)
	ids := b.dueIDs(t.Context())
	require.Contains(t, ids, j.ID)
	require.Len(t, ids, 2)
}

func TestDueStreamDeleted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.js.DeleteStream(t.Context(), contracts.StreamName))

	r := b.submit(tokenA, `{"kind":"due"}`)
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	j := r.job(t)
	stored, err := b.st.Get(t.Context(), j.ID)
	require.NoError(t, err)
	require.Equal(t, contracts.StatePending, stored.State)
}

func TestDuePublishFailureStillAdmits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	broken := b.connect()
	js, err := jetstream.New(broken)
	require.NoError(t, err)
	broken.Close()

	reg := prometheus.NewRegistry()
	gw, err := gateway.New(b.cfg, gateway.Deps{Store: b.st, NC: b.nc, JS: js, Registry: reg})
	require.NoError(t, err)
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(srv.Close)

	r := b.doOn(srv.URL, req{method: http.MethodPost, path: "/v1/jobs", token: tokenA, body: `{"kind":"lost"}`})
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	j := r.job(t)
	_, err = b.st.Get(t.Context(), j.ID)
	require.NoError(t, err, "the job is in the store, the truth")

	n, err := testutil.GatherAndCount(reg, "sluice_gateway_due_publish_failures_total")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP sluice_gateway_due_publish_failures_total Admitted jobs whose due message could not be published (the reaper republishes them).
# TYPE sluice_gateway_due_publish_failures_total counter
sluice_gateway_due_publish_failures_total 1
`), "sluice_gateway_due_publish_failures_total"))
}
