package reaper

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/pkg/bus/bustest"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/sqlite"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type bundle struct {
	t     *testing.T
	store store.Store
	js    jetstream.JetStream
	r     *Reaper
	now   time.Time
}

func setup(t *testing.T) *bundle {
	t.Helper()
	nc, js := bustest.Start(t).JobStream("reaper")
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "jobs.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	b := &bundle{t: t, store: st, js: js, now: time.Now().UTC()}
	cfg, err := LoadConfig(map[string]string{"SLUICE_STALE_THRESHOLD": "1s", "SLUICE_REAPER_RETENTION": "1h", "SLUICE_DATA_DIR": t.TempDir()})
	require.NoError(t, err)
	b.r, err = New(cfg, Deps{Store: st, NC: nc, JS: js, Log: zerolog.Nop(), Now: func() time.Time { return b.now }})
	require.NoError(t, err)
	return b
}

func (b *bundle) admit(id string, at time.Time) {
	b.t.Helper()
	j := contracts.Job{ID: id, Tenant: "t", Kind: "sleep", State: contracts.StatePending, MaxAttempts: 3,
		CreatedAt: at, UpdatedAt: at, NextDispatchAt: &at, DispatchDeadline: at.Add(time.Hour)}
	_, _, err := b.store.Admit(context.Background(), j, store.Caps{})
	require.NoError(b.t, err)
}

// running admits a job and starts it on worker w1 at `at`, its last
// heartbeat then.
func (b *bundle) running(id string, at time.Time) {
	b.t.Helper()
	ctx := context.Background()
	b.admit(id, at)
	claim := at.Add(time.Second)
	_, err := b.store.Transition(ctx, store.Expect{ID: id, State: contracts.StatePending},
		store.Change{Now: at, State: contracts.StatePending, Claim: 1, ClaimUntil: &claim})
	require.NoError(b.t, err)
	_, err = b.store.Heartbeat(ctx, "w1", []contracts.Lease{{JobID: id, Claim: 1}}, at, 0)
	require.NoError(b.t, err)
}

// requeues reads every requeue event published so far.
func (b *bundle) requeues() []contracts.Requeue {
	b.t.Helper()
	ctx := context.Background()
	c, err := b.js.CreateOrUpdateConsumer(ctx, contracts.StreamName, jetstream.ConsumerConfig{
		Durable: "test", FilterSubject: contracts.SubjectRequeue, AckPolicy: jetstream.AckExplicitPolicy,
	})
	require.NoError(b.t, err)
	batch, err := c.FetchNoWait(100)
	require.NoError(b.t, err)
	var out []contracts.Requeue
	for m := range batch.Messages() {
		rq, err := contracts.DecodeRequeue(m.Data())
		require.NoError(b.t, err)
		out = append(out, rq)
		require.NoError(b.t, m.Ack())
	}
	return out
}

func TestSweepRequeuesStaleJobsAndPurges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	old := b.now.Add(-time.Minute)

	// A running job whose worker went quiet a minute ago.
	b.running("stale", old)
	// Pending jobs, however long they wait, are the schedulers': the store
	// is their queue.
	b.admit("waiting", old.Add(-time.Hour))
	b.admit("fresh", b.now)
	// A job finished two hours ago: purged.
	b.admit("done", b.now.Add(-3*time.Hour))
	msg := "handler: x"
	_, err := b.store.Transition(ctx, store.Expect{ID: "done", State: contracts.StatePending},
		store.Change{Now: b.now.Add(-2 * time.Hour), State: contracts.StateFailed, Error: &msg})
	require.NoError(t, err)

	rep, err := b.r.Sweep(ctx)
	require.NoError(t, err)
	require.Equal(t, map[contracts.RequeueReason]int{contracts.ReasonStale: 1}, rep.Requeued)
	require.Equal(t, 1, rep.Purged)
	require.Zero(t, rep.Drift)
	require.Equal(t, []contracts.Requeue{
		{JobID: "stale", Claim: 1, State: contracts.StateRunning, Reason: contracts.ReasonStale},
	}, b.requeues())
	_, err = b.store.Get(ctx, "done")
	require.ErrorIs(t, err, store.ErrNotFound)
}

func TestRunSweepsOnBootAndStops(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.running("stale", b.now.Add(-time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.r.Run(ctx) }()
	require.Eventually(t, func() bool { return len(b.requeues()) > 0 }, 5*time.Second, 20*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
}
