package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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

func TestWakeAndDuePublished(t *testing.T) {
	t.Parallel()
	b := setup(t)
	wakes, err := b.nc.SubscribeSync(contracts.SubjectWake)
	require.NoError(t, err)
	require.NoError(t, b.nc.Flush())

	// A ready job wakes the schedulers; it needs no due message, the store
	// is the queue.
	ready := b.submit(tokenA, `{"kind":"due","key":"r"}`).job(t)
	_, err = wakes.NextMsg(5 * time.Second)
	require.NoError(t, err, "wake-up for a ready job")
	// A delayed job gets its durable wake-up: a due message.
	delayed := b.submit(tokenA, `{"kind":"due","run_at":"1h"}`).job(t)
	// A joined submit publishes nothing new.
	_ = b.submit(tokenA, `{"kind":"due","key":"r"}`)
	require.NoError(t, b.nc.Flush())
	ids := b.dueIDs(t.Context())
	require.Equal(t, []string{delayed.ID}, ids)
	require.NotContains(t, ids, ready.ID)
	_, err = wakes.NextMsg(100 * time.Millisecond)
	require.ErrorIs(t, err, nats.ErrTimeout, "no wake-up for a delayed or a joined job")
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

	r := b.doOn(srv.URL, req{method: http.MethodPost, path: "/v1/jobs", token: tokenA, body: `{"kind":"lost","run_at":"1h"}`})
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	j := r.job(t)
	_, err = b.st.Get(t.Context(), j.ID)
	require.NoError(t, err, "the job is in the store, the truth")

	n, err := testutil.GatherAndCount(reg, "sluice_gateway_due_publish_failures_total")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP sluice_gateway_due_publish_failures_total Delayed jobs whose due message could not be published (a scheduler's poll finds them when due).
# TYPE sluice_gateway_due_publish_failures_total counter
sluice_gateway_due_publish_failures_total 1
`), "sluice_gateway_due_publish_failures_total"))
}
