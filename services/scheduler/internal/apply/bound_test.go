package apply

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/scheduler/internal/consume"
	"github.com/sluicehq/sluice/services/scheduler/internal/metrics"
)

// TestCheckReport is the scheduler's check of a report's worker: the
// subject names the worker, the body must name the same, and the job at
// the report's claim must be that worker's.
func TestCheckReport(t *testing.T) {
	t.Parallel()
	running := contracts.Job{ID: "j1", State: contracts.StateRunning, Claim: 2, Worker: "wa"}
	pendingClaim := contracts.Job{ID: "j1", State: contracts.StatePending, Claim: 2}
	done := contracts.Job{ID: "j1", State: contracts.StateSucceeded, Claim: 2, Worker: "wa"}
	tests := []struct {
		name    string
		job     contracts.Job
		claim   int64
		subject string
		named   string
		want    Verdict
	}{
		{"its own running job", running, 2, contracts.ResultSubject("wa"), "wa", VerdictApplies},
		{"its own, body names none", running, 2, contracts.WorkerRequeueSubject("wa"), "", VerdictApplies},
		{"on each report subject", running, 2, contracts.ProgressSubject("wa"), "wa", VerdictApplies},
		{"heartbeat subject", running, 2, contracts.HeartbeatSubject("wa"), "wa", VerdictApplies},
		{"a pending dispatch claim, from the worker that reports it", pendingClaim, 2, contracts.ResultSubject("wb"), "wb", VerdictApplies},
		{"another worker's job, as itself", running, 2, contracts.ResultSubject("wb"), "wb", VerdictForeign},
		{"another worker's job, its body naming the holder", running, 2, contracts.ResultSubject("wb"), "wa", VerdictMismatch},
		{"the holder's name on another subject", running, 2, contracts.ProgressSubject("wb"), "wa", VerdictMismatch},
		{"its own job, its body naming another", running, 2, contracts.ResultSubject("wa"), "wb", VerdictMismatch},
		{"the shared result subject", running, 2, contracts.LegacySubjectResult, "wa", VerdictUnbound},
		{"the reaper's subject", running, 2, contracts.SubjectRequeue, "", VerdictUnbound},
		{"a subject token that is no worker id", running, 2, "sluice.jobs.result.w~a", "w~a", VerdictUnbound},
		{"not a report subject", running, 2, contracts.WorkerOfferSubject("wa"), "wa", VerdictUnbound},
		{"an old claim, its own", running, 1, contracts.ResultSubject("wa"), "wa", VerdictStale},
		{"an old claim, another worker's", running, 1, contracts.ResultSubject("wb"), "wb", VerdictStale},
		{"a finished job", done, 2, contracts.ResultSubject("wa"), "wa", VerdictStale},
		{"a missing job", contracts.Job{}, 2, contracts.ResultSubject("wa"), "wa", VerdictStale},
		{"a mismatch before anything is read", contracts.Job{}, 2, contracts.ResultSubject("wa"), "wb", VerdictMismatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := CheckReport(tc.job, tc.claim, tc.subject, tc.named)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.want == VerdictUnbound || tc.want == VerdictMismatch || tc.want == VerdictForeign, got.Refused())
		})
	}
}

func TestCheckRequeueSubject(t *testing.T) {
	t.Parallel()
	tests := []struct {
		subject string
		reason  contracts.RequeueReason
		want    Verdict
	}{
		{contracts.WorkerRequeueSubject("wa"), contracts.ReasonShutdown, VerdictApplies},
		{contracts.SubjectRequeue, contracts.ReasonShutdown, VerdictUnbound},
		{"sluice.jobs.requeue.w~a", contracts.ReasonShutdown, VerdictUnbound},
		{contracts.SubjectRequeue, contracts.ReasonStale, VerdictApplies},
		{contracts.SubjectRequeue, contracts.ReasonLost, VerdictApplies},
		{contracts.SubjectRequeue, contracts.ReasonTimeout, VerdictApplies},
		{contracts.WorkerRequeueSubject("wa"), contracts.ReasonStale, VerdictMismatch},
		{contracts.WorkerRequeueSubject("wa"), contracts.ReasonTimeout, VerdictMismatch},
		{contracts.WorkerRequeueSubject("wa"), contracts.ReasonLost, VerdictMismatch},
		{"sluice.jobs.requeue.w~a", contracts.ReasonStale, VerdictMismatch},
	}
	for _, tc := range tests {
		t.Run(tc.subject+" "+string(tc.reason), func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, CheckRequeueSubject(tc.subject, tc.reason))
		})
	}
}

// refused reads sluice_scheduler_refused_reports_total{report, outcome}.
func refused(b *bundle, report string, v Verdict) float64 {
	return testutil.ToFloat64(b.a.m.Refused.WithLabelValues(report, string(v)))
}

// TestForgedReportsFromAnotherWorker: worker wb reports on its own
// subjects (which its NATS identity may publish on) for a job running on
// wa: a result (as itself, and naming wa), a heartbeat, progress and a
// shutdown requeue. Each is refused and counted, the job stays running on
// wa at its claim, wa's own progress and result then apply.
func TestForgedReportsFromAnotherWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.running("j1", "wa", 3)
	forged := contracts.Result{JobID: "j1", Claim: 1, WorkerID: "wb", State: contracts.StateSucceeded, Result: json.RawMessage(`"forged"`)}
	require.Equal(t, consume.Ack(), b.a.Result(ctx, contracts.ResultSubject("wb"), enc(t, forged), nil))
	require.Equal(t, 1.0, refused(b, metrics.ReportResult, VerdictForeign))
	forged.WorkerID = "wa" // naming the holder on its own subject
	require.Equal(t, consume.Ack(), b.a.Result(ctx, contracts.ResultSubject("wb"), enc(t, forged), nil))
	require.Equal(t, 1.0, refused(b, metrics.ReportResult, VerdictMismatch))
	batch := contracts.ResultBatch{Results: []contracts.Result{forged, forged}}
	require.Equal(t, consume.Ack(), b.a.Result(ctx, contracts.LegacySubjectResult, enc(t, batch), nil))
	require.Equal(t, 2.0, refused(b, metrics.ReportResult, VerdictUnbound), "the shared subject binds nobody")
	require.Equal(t, contracts.StateRunning, b.get("j1").State)

	// A heartbeat as itself: wa's lease is lost to wb, and is not renewed.
	ack, err := contracts.DecodeHeartbeatAck(b.a.Heartbeat(ctx, contracts.HeartbeatSubject("wb"),
		enc(t, contracts.Heartbeat{WorkerID: "wb", Leases: []contracts.Lease{{JobID: "j1", Claim: 1}}})))
	require.NoError(t, err)
	require.Equal(t, []contracts.Lease{{JobID: "j1", Claim: 1}}, ack.Lost)
	// Naming wa: refused whole, nothing renewed.
	before := b.get("j1").HeartbeatAt
	b.now = b.now.Add(500 * time.Millisecond)
	ack, err = contracts.DecodeHeartbeatAck(b.a.Heartbeat(ctx, contracts.HeartbeatSubject("wb"),
		enc(t, contracts.Heartbeat{WorkerID: "wa", Leases: []contracts.Lease{{JobID: "j1", Claim: 1}}})))
	require.NoError(t, err)
	require.Contains(t, ack.Error, "heartbeat refused")
	require.Empty(t, ack.Lost)
	require.Equal(t, 1.0, refused(b, metrics.ReportHeartbeat, VerdictMismatch))
	require.Equal(t, before, b.get("j1").HeartbeatAt, "wa's lease was not renewed by wb")

	// Progress, as itself and naming wa.
	b.a.Progress(ctx, contracts.ProgressSubject("wb"), report(t, "j1", 1, "wb", 66))
	b.a.Progress(ctx, contracts.ProgressSubject("wb"), report(t, "j1", 1, "wa", 67))
	require.Equal(t, 1.0, refused(b, metrics.ReportProgress, VerdictForeign))
	require.Equal(t, 1.0, refused(b, metrics.ReportProgress, VerdictMismatch))
	require.Nil(t, b.get("j1").Progress)

	// A shutdown requeue on its own subject, and on the reaper's.
	rq := contracts.Requeue{JobID: "j1", Claim: 1, State: contracts.StateRunning, Reason: contracts.ReasonShutdown}
	require.Equal(t, consume.Ack(), b.a.Requeue(ctx, contracts.WorkerRequeueSubject("wb"), enc(t, rq), nil))
	require.Equal(t, consume.Ack(), b.a.Requeue(ctx, contracts.SubjectRequeue, enc(t, rq), nil))
	require.Equal(t, 1.0, refused(b, metrics.ReportRequeue, VerdictForeign))
	require.Equal(t, 1.0, refused(b, metrics.ReportRequeue, VerdictUnbound))
	got := b.get("j1")
	require.Equal(t, contracts.StateRunning, got.State)
	require.Equal(t, "wa", got.Worker)
	require.Equal(t, int64(1), got.Claim)
	require.Empty(t, b.n.due, "nothing dispatched again")

	// wa's own reports apply.
	ack, err = contracts.DecodeHeartbeatAck(b.a.Heartbeat(ctx, contracts.HeartbeatSubject("wa"),
		enc(t, contracts.Heartbeat{WorkerID: "wa", Leases: []contracts.Lease{{JobID: "j1", Claim: 1}}})))
	require.NoError(t, err)
	require.Empty(t, ack.Lost)
	require.Empty(t, ack.Error)
	b.a.Progress(ctx, contracts.ProgressSubject("wa"), report(t, "j1", 1, "wa", 50))
	require.InDelta(t, 50.0, b.get("j1").Progress.Percent, 0)
	own := contracts.Result{JobID: "j1", Claim: 1, WorkerID: "wa", State: contracts.StateSucceeded, Result: json.RawMessage(`"mine"`)}
	require.Equal(t, consume.Ack(), b.a.Result(ctx, contracts.ResultSubject("wa"), enc(t, own), nil))
	got = b.get("j1")
	require.Equal(t, contracts.StateSucceeded, got.State)
	require.JSONEq(t, `"mine"`, string(got.Result))
}

// TestForgedResultInABatchIsRefusedAlone: a batch on a worker's subject
// whose results are partly for another worker's jobs applies its own and
// refuses the others, in one store call.
func TestForgedResultInABatchIsRefusedAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.running("mine", "wb", 3)
	b.running("theirs", "wa", 3)
	batch := contracts.ResultBatch{Results: []contracts.Result{
		{JobID: "mine", Claim: 1, WorkerID: "wb", State: contracts.StateSucceeded},
		{JobID: "theirs", Claim: 1, WorkerID: "wb", State: contracts.StateSucceeded},
	}}
	require.Equal(t, consume.Ack(), b.a.Result(context.Background(), contracts.ResultSubject("wb"), enc(t, batch), nil))
	require.Equal(t, contracts.StateSucceeded, b.get("mine").State)
	require.Equal(t, contracts.StateRunning, b.get("theirs").State)
	require.Equal(t, 1.0, refused(b, metrics.ReportResult, VerdictForeign))
}
