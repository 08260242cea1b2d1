package apply

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/scheduler/internal/consume"
	"github.com/sluicehq/sluice/services/scheduler/internal/metrics"
)

// withMetrics gives the bundle's applier collectors on a registry the test reads.
func withMetrics(b *bundle) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	b.a.m = metrics.New(reg)
	return reg
}

// series finds one series of a family by its labels (nil when absent).
func series(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) *float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			var v float64
			switch {
			case m.GetCounter() != nil:
				v = m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				v = float64(m.GetHistogram().GetSampleCount())
			}
			return &v
		}
	}
	return nil
}

func requireSeries(t *testing.T, reg *prometheus.Registry, want float64, name string, labels map[string]string) {
	t.Helper()
	got := series(t, reg, name, labels)
	require.NotNil(t, got, "%s%v missing", name, labels)
	require.Equal(t, want, *got, "%s%v", name, labels)
}

func TestHeartbeatPromotionObservesQueueWait(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg := withMetrics(b)
	ctx := context.Background()
	created := b.now.Add(-1500 * time.Millisecond)
	j := contracts.Job{ID: "q1", Tenant: "t", Kind: "sleep", State: contracts.StatePending, MaxAttempts: 3,
		CreatedAt: created, UpdatedAt: created, NextDispatchAt: &created, DispatchDeadline: b.now.Add(time.Hour)}
	_, _, err := b.store.Admit(ctx, j, store.Caps{})
	require.NoError(t, err)
	claim := b.now.Add(time.Minute)
	_, err = b.store.Transition(ctx, store.Expect{ID: "q1", State: contracts.StatePending},
		store.Change{Now: b.now, State: contracts.StatePending, Claim: 1, ClaimUntil: &claim})
	require.NoError(t, err)

	hb := enc(t, contracts.Heartbeat{WorkerID: "w1", Leases: []contracts.Lease{{JobID: "q1", Claim: 1}}})
	b.a.Heartbeat(ctx, contracts.HeartbeatSubject("w1"), hb) // promotes: submit → running took 1.5s
	b.now = b.now.Add(time.Second)
	b.a.Heartbeat(ctx, contracts.HeartbeatSubject("w1"), hb) // renews: no second observation

	requireSeries(t, reg, 1, "sluice_scheduler_queue_wait_seconds", nil)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "sluice_scheduler_queue_wait_seconds" {
			require.InDelta(t, 1.5, mf.GetMetric()[0].GetHistogram().GetSampleSum(), 1e-6)
		}
	}
	requireSeries(t, reg, 1, "sluice_scheduler_heartbeat_leases_total", map[string]string{"outcome": "promoted"})
	requireSeries(t, reg, 1, "sluice_scheduler_heartbeat_leases_total", map[string]string{"outcome": "renewed"})
}

// A worker heartbeating every 5 s with a 20 s renew point: its claim's
// first heartbeat writes (promoted), the next three are kept without a
// write, the fourth, 20 s on, writes (renewed); a cancel request still
// reaches it from a kept one.
func TestHeartbeatKeptWithoutWriteIsCounted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.a.cfg.LeaseRenewAfter = 20 * time.Second
	reg := withMetrics(b)
	ctx := context.Background()
	_, _, err := b.store.Admit(ctx, contracts.Job{ID: "k1", Tenant: "t", Kind: "sleep", State: contracts.StatePending, MaxAttempts: 3,
		CreatedAt: b.now, UpdatedAt: b.now, NextDispatchAt: &b.now, DispatchDeadline: b.now.Add(time.Hour)}, store.Caps{})
	require.NoError(t, err)
	claim := b.now.Add(time.Minute)
	_, err = b.store.Transition(ctx, store.Expect{ID: "k1", State: contracts.StatePending},
		store.Change{Now: b.now, State: contracts.StatePending, Claim: 1, ClaimUntil: &claim})
	require.NoError(t, err)

	hb := enc(t, contracts.Heartbeat{WorkerID: "w1", Leases: []contracts.Lease{{JobID: "k1", Claim: 1}}})
	started := b.now
	for i := 0; i < 5; i++ {
		if i == 2 {
			_, err = b.store.Transition(ctx, store.Expect{ID: "k1", State: contracts.StateRunning, Claim: 1},
				store.Change{Now: b.now, State: contracts.StateRunning, CancelRequested: new(true)})
			require.NoError(t, err)
		}
		ack, err := contracts.DecodeHeartbeatAck(b.a.Heartbeat(ctx, contracts.HeartbeatSubject("w1"), hb))
		require.NoError(t, err)
		require.Empty(t, ack.Lost)
		if i >= 2 {
			require.Equal(t, []contracts.Lease{{JobID: "k1", Claim: 1}}, ack.Cancel, "heartbeat %d", i)
		}
		b.now = b.now.Add(5 * time.Second)
	}
	requireSeries(t, reg, 1, "sluice_scheduler_heartbeat_leases_total", map[string]string{"outcome": metrics.HeartbeatPromoted})
	requireSeries(t, reg, 3, "sluice_scheduler_heartbeat_leases_total", map[string]string{"outcome": metrics.HeartbeatKept})
	requireSeries(t, reg, 1, "sluice_scheduler_heartbeat_leases_total", map[string]string{"outcome": metrics.HeartbeatRenewed})
	got, err := b.store.Get(ctx, "k1")
	require.NoError(t, err)
	require.WithinDuration(t, started.Add(20*time.Second), *got.HeartbeatAt, time.Millisecond, "written at the renew point only")
}

func TestAppliedResultObservesRunTimeByState(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg := withMetrics(b)
	b.running("r1", "w1", 3)
	b.running("r2", "w1", 3)
	b.now = b.now.Add(2 * time.Second)
	ok := contracts.Result{JobID: "r1", Claim: 1, WorkerID: "w1", State: contracts.StateSucceeded}
	require.Equal(t, consume.Ack(), b.a.Result(context.Background(), contracts.ResultSubject(ok.WorkerID), enc(t, ok), nil))
	require.Equal(t, consume.Ack(), b.a.Result(context.Background(), contracts.ResultSubject(ok.WorkerID), enc(t, ok), nil)) // duplicate: stale
	cancelled := contracts.Result{JobID: "r2", Claim: 1, WorkerID: "w1", State: contracts.StateCancelled, Error: "cancelled: by request"}
	require.Equal(t, consume.Ack(), b.a.Result(context.Background(), contracts.ResultSubject(cancelled.WorkerID), enc(t, cancelled), nil))

	requireSeries(t, reg, 1, "sluice_scheduler_run_duration_seconds", map[string]string{"state": "succeeded"})
	requireSeries(t, reg, 1, "sluice_scheduler_run_duration_seconds", map[string]string{"state": "cancelled"})
	require.Nil(t, series(t, reg, "sluice_scheduler_run_duration_seconds", map[string]string{"state": "failed"}))
	requireSeries(t, reg, 2, "sluice_scheduler_results_total", map[string]string{"outcome": "applied"})
	requireSeries(t, reg, 1, "sluice_scheduler_results_total", map[string]string{"outcome": "stale"})
}

func TestRequeuesCountedByReasonAndOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg := withMetrics(b)
	ctx := context.Background()
	b.running("stale", "w1", 3)
	b.running("last", "w1", 1)
	b.running("long", "w1", 3)
	b.running("gone", "w1", 3)
	b.running("asked", "w1", 3)
	yes := true
	_, err := b.store.Transition(ctx, store.Expect{ID: "asked", State: contracts.StateRunning, Claim: 1},
		store.Change{Now: b.now, State: contracts.StateRunning, CancelRequested: &yes})
	require.NoError(t, err)
	p := contracts.Job{ID: "lost", Tenant: "t", Kind: "sleep", State: contracts.StatePending, MaxAttempts: 3,
		CreatedAt: b.now, UpdatedAt: b.now, NextDispatchAt: &b.now, DispatchDeadline: b.now.Add(time.Hour)}
	_, _, err = b.store.Admit(ctx, p, store.Caps{})
	require.NoError(t, err)

	b.now = b.now.Add(2 * time.Hour) // stale and past the max runtime
	for _, rq := range []contracts.Requeue{
		{JobID: "stale", Claim: 1, State: contracts.StateRunning, Reason: contracts.ReasonStale},
		{JobID: "last", Claim: 1, State: contracts.StateRunning, Reason: contracts.ReasonStale},
		{JobID: "long", Claim: 1, State: contracts.StateRunning, Reason: contracts.ReasonTimeout},
		{JobID: "gone", Claim: 1, State: contracts.StateRunning, Reason: contracts.ReasonShutdown},
		{JobID: "asked", Claim: 1, State: contracts.StateRunning, Reason: contracts.ReasonStale},
		{JobID: "lost", Claim: 0, State: contracts.StatePending, Reason: contracts.ReasonLost},
		{JobID: "stale", Claim: 1, State: contracts.StateRunning, Reason: contracts.ReasonStale}, // moved on: not counted
	} {
		require.Equal(t, consume.Ack(), b.a.Requeue(ctx, requeueSubject(rq), enc(t, rq), nil))
	}
	const name = "sluice_scheduler_requeues_total"
	requireSeries(t, reg, 1, name, map[string]string{"reason": "stale", "outcome": metrics.RequeueRequeued})
	requireSeries(t, reg, 1, name, map[string]string{"reason": "stale", "outcome": metrics.RequeueFailed})
	requireSeries(t, reg, 1, name, map[string]string{"reason": "timeout", "outcome": metrics.RequeueFailed})
	requireSeries(t, reg, 1, name, map[string]string{"reason": "shutdown", "outcome": metrics.RequeueRequeued})
	requireSeries(t, reg, 1, name, map[string]string{"reason": "lost", "outcome": metrics.RequeueRedelivered})
	requireSeries(t, reg, 1, name, map[string]string{"reason": "stale", "outcome": metrics.RequeueCancelled})
}
