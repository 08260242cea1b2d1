package gateway_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// cancel posts a cancel request for id.
func (b *bundle) cancel(token, id string) response {
	b.tb.Helper()
	return b.do(req{method: http.MethodPost, path: "/v1/jobs/" + id + "/cancel", token: token})
}

func TestCancelPending(t *testing.T) {
	t.Parallel()
	b := setup(t, caps(1, 0))
	j := b.submit(tokenA, `{"kind":"slow"}`).job(t)

	r := b.cancel(tokenA, j.ID)
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	got := r.job(t)
	require.Equal(t, contracts.StateCancelled, got.State)
	require.Equal(t, contracts.ClassCancelled, contracts.ClassOf(got.Error))
	require.NotNil(t, got.FinishedAt)

	// Idempotent.
	again := b.cancel(tokenA, j.ID)
	require.Equal(t, http.StatusAccepted, again.status)
	require.Equal(t, contracts.StateCancelled, again.job(t).State)

	// The slot is free again.
	require.Equal(t, http.StatusAccepted, b.submit(tokenA, `{"kind":"slow"}`).status)
}

func TestCancelFinished(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(tokenA, `{"kind":"quick"}`).job(t)
	b.finish(j.ID)
	before := b.snap()
	e := b.cancel(tokenA, j.ID).requireError(t, http.StatusConflict, contracts.CodeConflict)
	require.Contains(t, e.Message, string(contracts.StateSucceeded))
	require.Equal(t, before, b.snap())
}

func TestCancelRunning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(tokenA, `{"kind":"long"}`).job(t)
	b.start(j.ID, "w-7")

	msgs := make(chan *nats.Msg, 4)
	sub, err := b.nc.ChanSubscribe(contracts.WorkerCancelSubject("w-7"), msgs)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, b.nc.Flush())

	r := b.cancel(tokenA, j.ID)
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	got := r.job(t)
	require.Equal(t, contracts.StateRunning, got.State, "the worker ends it")
	require.True(t, got.CancelRequested)

	select {
	case m := <-msgs:
		c, err := contracts.DecodeCancelJob(m.Data)
		require.NoError(t, err)
		require.Equal(t, contracts.CancelJob{JobID: j.ID, Claim: 1}, c)
	case <-time.After(5 * time.Second):
		t.Fatal("no CancelJob on the worker's cancel subject")
	}

	stored, err := b.st.Get(t.Context(), j.ID)
	require.NoError(t, err)
	require.True(t, stored.CancelRequested)
	require.Equal(t, contracts.StateRunning, stored.State)

	// Asking again is fine and reminds the worker.
	again := b.cancel(tokenA, j.ID)
	require.Equal(t, http.StatusAccepted, again.status)
	require.True(t, again.job(t).CancelRequested)
	select {
	case <-msgs:
	case <-time.After(5 * time.Second):
		t.Fatal("no second CancelJob")
	}
}
