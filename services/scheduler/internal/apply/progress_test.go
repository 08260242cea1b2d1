package apply

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/services/scheduler/internal/consume"
	"github.com/sluicehq/sluice/services/scheduler/internal/metrics"
)

// TestProgressRecordedOnlyForTheRunningAttempt: with flush period 0
// every report is written as it comes, while its claim is current.
func TestProgressRecordedOnlyForTheRunningAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.running("j1", "w1", 3)
	ctx := context.Background()
	p := contracts.Progress{Percent: 40, Stage: "copy", Message: "4 of 10"}

	b.a.Progress(ctx, contracts.ProgressSubject("w1"), enc(t, contracts.ProgressReport{JobID: "j1", Claim: 1, WorkerID: "w1", Progress: p}))
	got := b.get("j1")
	require.Equal(t, &p, got.Progress)
	require.Equal(t, contracts.StateRunning, got.State)

	// Another worker, an old attempt, an unknown job, a malformed report:
	// nothing changes.
	other := contracts.Progress{Percent: 99}
	for _, rep := range [][]byte{
		enc(t, contracts.ProgressReport{JobID: "j1", Claim: 1, WorkerID: "w2", Progress: other}),
		enc(t, contracts.ProgressReport{JobID: "j1", Claim: 2, WorkerID: "w1", Progress: other}),
		enc(t, contracts.ProgressReport{JobID: "nope", Claim: 1, WorkerID: "w1", Progress: other}),
		[]byte(`{"job_id":"j1","attempt":1,"worker_id":"w1","progress":{"percent":250}}`),
		[]byte(`not json`),
	} {
		b.a.Progress(ctx, contracts.ProgressSubject("w1"), rep)
	}
	require.Equal(t, &p, b.get("j1").Progress)

	// A finished job takes no more progress.
	res := contracts.Result{JobID: "j1", Claim: 1, WorkerID: "w1", State: contracts.StateSucceeded}
	b.a.Result(ctx, contracts.ResultSubject(res.WorkerID), enc(t, res), nil)
	b.a.Progress(ctx, contracts.ProgressSubject("w1"), enc(t, contracts.ProgressReport{JobID: "j1", Claim: 1, WorkerID: "w1", Progress: other}))
	require.Equal(t, &p, b.get("j1").Progress)
}

// flushing gives the bundle an applier that keeps progress in memory and
// writes it once per period (the test flushes by hand, on its clock).
func flushing(b *bundle, period time.Duration) {
	b.a = New(Config{StaleThreshold: time.Second, MaxRuntime: time.Hour, ProgressFlush: period}, b.store, b.n, nil,
		func() time.Time { return b.now }, zerolog.Nop(), metrics.New(prometheus.NewRegistry()))
}

// writes is what the bundle's store has written so far.
func (b *bundle) writes() uint64 {
	b.t.Helper()
	wc, ok := b.store.(store.WriteCounter)
	require.True(b.t, ok)
	return wc.WriteCounts().Total()
}

// progressCount reads the progress reports counted with outcome.
func (b *bundle) progressCount(outcome string) float64 {
	return testutil.ToFloat64(b.a.m.Progress.WithLabelValues(outcome))
}

func report(t *testing.T, job string, claim int64, worker string, pct float64) []byte {
	return enc(t, contracts.ProgressReport{JobID: job, Claim: claim, WorkerID: worker,
		Progress: contracts.Progress{Percent: pct, Stage: "copy", Message: fmt.Sprintf("%v %%", pct)}})
}

// TestProgressCoalescedToOneWritePerFlush: many reports within a flush
// period write nothing; the flush writes the newest, once, in one store
// call; a flush with nothing new writes nothing; a job that reports no
// more is forgotten.
func TestProgressCoalescedToOneWritePerFlush(t *testing.T) {
	t.Parallel()
	b := setup(t)
	flushing(b, 5*time.Second)
	b.running("j1", "w1", 3)
	b.running("j2", "w1", 3)
	ctx := context.Background()
	before := b.writes()
	for pct := range 10 {
		b.a.Progress(ctx, contracts.ProgressSubject("w1"), report(t, "j1", 1, "w1", float64(pct*10)))
		b.a.Progress(ctx, contracts.ProgressSubject("w1"), report(t, "j2", 1, "w1", float64(pct)))
		b.now = b.now.Add(400 * time.Millisecond)
	}
	require.Nil(t, b.get("j1").Progress, "nothing written before the flush")
	require.Equal(t, before, b.writes())
	require.Equal(t, 18.0, b.progressCount(metrics.ProgressCoalesced), "each report but the newest of each job")

	b.a.flushProgress(ctx)
	require.Equal(t, before+1, b.writes(), "one store call for both jobs")
	require.Equal(t, 90.0, b.get("j1").Progress.Percent)
	require.Equal(t, 9.0, b.get("j2").Progress.Percent)
	require.Equal(t, contracts.StateRunning, b.get("j1").State)
	require.Equal(t, 2.0, b.progressCount(metrics.ProgressApplied))

	b.now = b.now.Add(5 * time.Second)
	b.a.flushProgress(ctx)
	require.Equal(t, before+1, b.writes(), "nothing new: nothing written")
	require.Zero(t, b.a.book.len(), "jobs that reported nothing for a period are forgotten")

	// A later report starts again from a read, and is written at the next flush.
	b.a.Progress(ctx, contracts.ProgressSubject("w1"), report(t, "j1", 1, "w1", 95))
	b.a.flushProgress(ctx)
	require.Equal(t, 95.0, b.get("j1").Progress.Percent)
	require.Equal(t, before+2, b.writes())
}

// TestProgressStoredWithTheResult: the newest report not yet written is
// stored by the job's result, with no write of its own, and the job is
// forgotten; a report that comes after the result is stale.
func TestProgressStoredWithTheResult(t *testing.T) {
	t.Parallel()
	for _, st := range []contracts.JobState{contracts.StateSucceeded, contracts.StateFailed} {
		t.Run(string(st), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			flushing(b, time.Hour)
			b.running("j1", "w1", 3)
			ctx := context.Background()
			b.a.Progress(ctx, contracts.ProgressSubject("w1"), report(t, "j1", 1, "w1", 10))
			b.a.flushProgress(ctx)
			b.a.Progress(ctx, contracts.ProgressSubject("w1"), report(t, "j1", 1, "w1", 60))
			b.a.Progress(ctx, contracts.ProgressSubject("w1"), report(t, "j1", 1, "w1", 70))
			before := b.writes()

			res := contracts.Result{JobID: "j1", Claim: 1, WorkerID: "w1", State: st}
			if st == contracts.StateFailed {
				res.Error = "handler: boom" // runs again: the failed run's progress is kept
			}
			require.Equal(t, consume.Ack(), b.a.Result(ctx, contracts.ResultSubject(res.WorkerID), enc(t, res), nil))
			require.Equal(t, before+1, b.writes(), "the result's write alone")
			got := b.get("j1")
			require.Equal(t, 70.0, got.Progress.Percent)
			require.Zero(t, b.a.book.len(), "forgotten at the job's end")
			require.Equal(t, 2.0, b.progressCount(metrics.ProgressCoalesced), "60 replaced; 70 stored with the result")

			b.a.Progress(ctx, contracts.ProgressSubject("w1"), report(t, "j1", 1, "w1", 99))
			b.a.flushProgress(ctx)
			require.Equal(t, 70.0, b.get("j1").Progress.Percent)
			require.Equal(t, 1.0, b.progressCount(metrics.ProgressStale))
			require.Zero(t, b.a.book.len())
		})
	}
}

// TestProgressOfAnOldClaimDropped: once the job runs a newer claim, a
// report of the old one is dropped whether or not this scheduler kept
// that claim, and the flush never writes a kept report over the newer
// claim.
func TestProgressOfAnOldClaimDropped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	flushing(b, time.Hour)
	b.running("j1", "w1", 3)
	ctx := context.Background()
	b.a.Progress(ctx, contracts.ProgressSubject("w1"), report(t, "j1", 1, "w1", 40)) // kept, not written

	// Another scheduler requeues the job (claim 2) and runs it on w2 (claim 3).
	b.now = b.now.Add(2 * time.Second)
	rq := contracts.Requeue{JobID: "j1", Claim: 1, State: contracts.StateRunning, Reason: contracts.ReasonStale}
	require.Equal(t, consume.Ack(), b.a.Requeue(ctx, requeueSubject(rq), enc(t, rq), nil))
	b.claimAgain("j1", "w2")
	require.Equal(t, int64(3), b.get("j1").Claim)

	// The old worker's reports still come, kept as its claim's newest.
	b.a.Progress(ctx, contracts.ProgressSubject("w1"), report(t, "j1", 1, "w1", 50))
	b.a.flushProgress(ctx)
	require.Nil(t, b.get("j1").Progress, "the flush's compare-and-set misses: nothing written")
	require.Zero(t, b.a.book.len(), "the lost claim is forgotten")

	// The new claim's report is kept; the old claim's are now stale at once.
	b.a.Progress(ctx, contracts.ProgressSubject("w2"), report(t, "j1", 3, "w2", 5))
	stale := b.progressCount(metrics.ProgressStale)
	b.a.Progress(ctx, contracts.ProgressSubject("w1"), report(t, "j1", 1, "w1", 60))
	require.Equal(t, stale+1, b.progressCount(metrics.ProgressStale))
	// The right claim from another worker is refused: the claim is w2's.
	b.a.Progress(ctx, contracts.ProgressSubject("w1"), report(t, "j1", 3, "w1", 60))
	require.Equal(t, stale+1, b.progressCount(metrics.ProgressStale))
	require.Equal(t, 1.0, testutil.ToFloat64(b.a.m.Refused.WithLabelValues(metrics.ReportProgress, metrics.RefusedForeign)))
	b.a.flushProgress(ctx)
	got := b.get("j1")
	require.Equal(t, 5.0, got.Progress.Percent)
	require.Equal(t, "w2", got.Worker)
}

// TestProgressForgottenWhenTheClaimIsLost: a heartbeat answered lost
// drops what was kept of that claim.
func TestProgressForgottenWhenTheClaimIsLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	flushing(b, time.Hour)
	b.running("j1", "w1", 3)
	ctx := context.Background()
	b.a.Progress(ctx, contracts.ProgressSubject("w1"), report(t, "j1", 1, "w1", 40))
	require.Equal(t, 1, b.a.book.len())
	b.now = b.now.Add(2 * time.Second)
	rq := contracts.Requeue{JobID: "j1", Claim: 1, State: contracts.StateRunning, Reason: contracts.ReasonStale}
	require.Equal(t, consume.Ack(), b.a.Requeue(ctx, requeueSubject(rq), enc(t, rq), nil))

	ack, err := contracts.DecodeHeartbeatAck(b.a.Heartbeat(ctx, contracts.HeartbeatSubject("w1"), enc(t, contracts.Heartbeat{WorkerID: "w1", Leases: []contracts.Lease{{JobID: "j1", Claim: 1}}})))
	require.NoError(t, err)
	require.Len(t, ack.Lost, 1)
	require.Zero(t, b.a.book.len())
	require.Equal(t, 1.0, b.progressCount(metrics.ProgressStale))
}

// TestProgressFlushedWhenRunStops: a scheduler that stops writes what it
// kept before Run returns.
func TestProgressFlushedWhenRunStops(t *testing.T) {
	t.Parallel()
	b := setup(t)
	flushing(b, time.Hour)
	b.a.cfg.ShutdownTimeout = time.Minute
	b.running("j1", "w1", 3)
	b.a.Progress(context.Background(), contracts.ProgressSubject("w1"), report(t, "j1", 1, "w1", 33))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, b.a.Run(ctx))
	require.Equal(t, 33.0, b.get("j1").Progress.Percent)

	// Flush period 0: Run has nothing to do.
	flushing(b, 0)
	require.NoError(t, b.a.Run(context.Background()))
}

// claimAgain claims the pending job id at its next claim and runs it on w.
func (b *bundle) claimAgain(id, w string) {
	b.t.Helper()
	ctx := context.Background()
	j := b.get(id)
	claim := j.Claim + 1
	until := b.now.Add(time.Minute)
	_, err := b.store.Transition(ctx, store.Expect{ID: id, State: contracts.StatePending, Claim: j.Claim},
		store.Change{Now: b.now, State: contracts.StatePending, Claim: claim, ClaimUntil: &until})
	require.NoError(b.t, err)
	out, err := b.store.Heartbeat(ctx, w, []contracts.Lease{{JobID: id, Claim: claim}}, b.now, 0)
	require.NoError(b.t, err)
	require.Len(b.t, out.Promoted, 1)
}

// TestProgressOfANewClaimReplacesTheOld: the first report of the job's
// next claim replaces what was kept of the former one, which is never
// written.
func TestProgressOfANewClaimReplacesTheOld(t *testing.T) {
	t.Parallel()
	b := setup(t)
	flushing(b, time.Hour)
	b.running("j1", "w1", 3)
	ctx := context.Background()
	b.a.Progress(ctx, contracts.ProgressSubject("w1"), report(t, "j1", 1, "w1", 80)) // kept, not written
	b.now = b.now.Add(2 * time.Second)
	rq := contracts.Requeue{JobID: "j1", Claim: 1, State: contracts.StateRunning, Reason: contracts.ReasonStale}
	require.Equal(t, consume.Ack(), b.a.Requeue(ctx, requeueSubject(rq), enc(t, rq), nil))
	b.claimAgain("j1", "w2")

	b.a.Progress(ctx, contracts.ProgressSubject("w2"), report(t, "j1", 3, "w2", 5))
	require.Equal(t, 1.0, b.progressCount(metrics.ProgressStale), "the former claim's 80 %")
	require.Equal(t, 1, b.a.book.len())
	b.a.flushProgress(ctx)
	require.Equal(t, 5.0, b.get("j1").Progress.Percent)
	require.Equal(t, 1.0, b.progressCount(metrics.ProgressApplied))
}

// TestProgressWithTwoSchedulers: reports of one job go to two
// schedulers; each keeps and writes its own, every write fenced by the
// claim. A result applied by one never writes back a report it wrote
// already (the other may have written a newer one since), and the other
// forgets the job at its next flush without writing.
func TestProgressWithTwoSchedulers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	flushing(b, time.Hour)
	a1 := b.a
	flushing(b, time.Hour)
	a2 := b.a
	b.running("j1", "w1", 3)
	ctx := context.Background()

	a1.Progress(ctx, contracts.ProgressSubject("w1"), report(t, "j1", 1, "w1", 10))
	a1.flushProgress(ctx)
	a2.Progress(ctx, contracts.ProgressSubject("w1"), report(t, "j1", 1, "w1", 20))
	a2.flushProgress(ctx)
	require.Equal(t, 20.0, b.get("j1").Progress.Percent)
	a2.Progress(ctx, contracts.ProgressSubject("w1"), report(t, "j1", 1, "w1", 30)) // kept by a2 alone

	res := contracts.Result{JobID: "j1", Claim: 1, WorkerID: "w1", State: contracts.StateSucceeded}
	require.Equal(t, consume.Ack(), a1.Result(ctx, contracts.ResultSubject(res.WorkerID), enc(t, res), nil))
	got := b.get("j1")
	require.Equal(t, contracts.StateSucceeded, got.State)
	require.Equal(t, 20.0, got.Progress.Percent, "a1's 10 %, written already, does not go back over a2's 20 %")
	require.Zero(t, a1.book.len())

	a2.flushProgress(ctx)
	require.Equal(t, 20.0, b.get("j1").Progress.Percent, "a finished job takes no more progress")
	require.Zero(t, a2.book.len())
	require.Equal(t, 1.0, testutil.ToFloat64(a2.m.Progress.WithLabelValues(metrics.ProgressStale)))
}
