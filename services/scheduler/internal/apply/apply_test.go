package apply

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/sqlite"
	"github.com/sluicehq/sluice/services/scheduler/internal/consume"
	"github.com/sluicehq/sluice/services/scheduler/internal/metrics"
)

type fakeNotifier struct {
	mu      sync.Mutex
	due     []string
	cancels []contracts.Lease
}

func (n *fakeNotifier) Due(_ context.Context, id string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.due = append(n.due, id)
	return nil
}

func (n *fakeNotifier) Cancel(_ string, l contracts.Lease) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cancels = append(n.cancels, l)
	return nil
}

type bundle struct {
	t     *testing.T
	store store.Store
	n     *fakeNotifier
	a     *Applier
	now   time.Time
}

func setup(t *testing.T) *bundle {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "jobs.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	b := &bundle{t: t, store: st, n: &fakeNotifier{}, now: time.Now().UTC()}
	b.a = New(Config{StaleThreshold: time.Second, MaxRuntime: time.Hour}, st, b.n, nil, func() time.Time { return b.now }, zerolog.Nop(), metrics.New(prometheus.NewRegistry()))
	return b
}

// running admits a job and runs it on worker w at attempt 1.
func (b *bundle) running(id, w string, maxAttempts int) contracts.Job {
	b.t.Helper()
	ctx := context.Background()
	j := contracts.Job{ID: id, Tenant: "t", Kind: "sleep", State: contracts.StatePending, MaxAttempts: maxAttempts,
		CreatedAt: b.now, UpdatedAt: b.now, NextDispatchAt: &b.now, DispatchDeadline: b.now.Add(time.Hour)}
	_, _, err := b.store.Admit(ctx, j, store.Caps{})
	require.NoError(b.t, err)
	claim := b.now.Add(time.Minute)
	_, err = b.store.Transition(ctx, store.Expect{ID: id, State: contracts.StatePending}, store.Change{Now: b.now, State: contracts.StatePending, Claim: 1, ClaimUntil: &claim})
	require.NoError(b.t, err)
	out, err := b.store.Heartbeat(ctx, w, []contracts.Lease{{JobID: id, Claim: 1}}, b.now, 0)
	require.NoError(b.t, err)
	require.Len(b.t, out.Promoted, 1)
	return b.get(id)
}

func (b *bundle) get(id string) contracts.Job {
	j, err := b.store.Get(context.Background(), id)
	require.NoError(b.t, err)
	return j
}

func enc(t *testing.T, v any) []byte {
	data, err := json.Marshal(v)
	require.NoError(t, err)
	return data
}

// requeueSubject is where rq comes from: a shutdown requeue from worker
// w1, the other reasons from the reaper.
func requeueSubject(rq contracts.Requeue) string {
	if rq.Reason == contracts.ReasonShutdown {
		return contracts.WorkerRequeueSubject("w1")
	}
	return contracts.SubjectRequeue
}

func TestResultAppliedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.running("j1", "w1", 3)
	res := contracts.Result{JobID: "j1", Claim: 1, WorkerID: "w1", State: contracts.StateSucceeded, Result: json.RawMessage(`{"ok":true}`)}
	require.Equal(t, consume.Ack(), b.a.Result(context.Background(), contracts.ResultSubject(res.WorkerID), enc(t, res), nil))
	got := b.get("j1")
	require.Equal(t, contracts.StateSucceeded, got.State)
	require.JSONEq(t, `{"ok":true}`, string(got.Result))

	// A duplicate delivery changes nothing.
	res.State, res.Error = contracts.StateFailed, "handler: boom"
	require.Equal(t, consume.Ack(), b.a.Result(context.Background(), contracts.ResultSubject(res.WorkerID), enc(t, res), nil))
	require.Equal(t, contracts.StateSucceeded, b.get("j1").State)
}

// TestResultBatchAppliesEach checks a worker's batch of results: each
// current result applies on its own, a stale one is skipped, a retried
// delivery of the whole batch changes nothing, and a malformed batch is
// dropped whole.
func TestResultBatchAppliesEach(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.running("j1", "w1", 3)
	b.running("j2", "w1", 1)
	b.running("j3", "w1", 3)
	batch := contracts.ResultBatch{Results: []contracts.Result{
		{JobID: "j1", Claim: 1, WorkerID: "w1", State: contracts.StateSucceeded, Result: json.RawMessage(`1`)},
		{JobID: "j2", Claim: 1, WorkerID: "w1", State: contracts.StateFailed, Error: "handler: boom"},
		{JobID: "j3", Claim: 7, WorkerID: "w1", State: contracts.StateSucceeded},
		{JobID: "gone", Claim: 1, WorkerID: "w1", State: contracts.StateSucceeded},
	}}
	require.Equal(t, consume.Ack(), b.a.Result(context.Background(), contracts.ResultSubject("w1"), enc(t, batch), nil))
	require.Equal(t, contracts.StateSucceeded, b.get("j1").State)
	require.Equal(t, contracts.StateFailed, b.get("j2").State, "max_attempts 1: no retry")
	require.Equal(t, contracts.StateRunning, b.get("j3").State, "an old attempt's result is stale")

	require.Equal(t, consume.Ack(), b.a.Result(context.Background(), contracts.ResultSubject("w1"), enc(t, batch), nil), "redelivered whole")
	require.Equal(t, contracts.StateSucceeded, b.get("j1").State)

	batch.Results[3].State = contracts.StateRunning
	require.Equal(t, consume.Poison(), b.a.Result(context.Background(), contracts.ResultSubject("w1"), enc(t, batch), nil))
	require.Equal(t, contracts.StateRunning, b.get("j3").State)
}

// TestResultBatchComesBackWhenTheStoreIsDown checks that a batch the
// store cannot take comes back whole, after a pause.
func TestResultBatchComesBackWhenTheStoreIsDown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.running("j1", "w1", 3)
	batch := contracts.ResultBatch{Results: []contracts.Result{
		{JobID: "j1", Claim: 1, WorkerID: "w1", State: contracts.StateSucceeded},
	}}
	require.NoError(t, b.store.Close())
	got := b.a.Result(context.Background(), contracts.ResultSubject("w1"), enc(t, batch), nil)
	require.True(t, got.Retry)
	require.Positive(t, got.Delay)
}

func TestResultFromWrongAttemptOrWorkerIgnored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.running("j1", "w1", 3)
	for _, res := range []contracts.Result{
		{JobID: "j1", Claim: 2, WorkerID: "w1", State: contracts.StateSucceeded},
		{JobID: "j1", Claim: 1, WorkerID: "w2", State: contracts.StateSucceeded},
		{JobID: "missing", Claim: 1, WorkerID: "w1", State: contracts.StateSucceeded},
	} {
		require.Equal(t, consume.Ack(), b.a.Result(context.Background(), contracts.ResultSubject(res.WorkerID), enc(t, res), nil))
	}
	require.Equal(t, contracts.StateRunning, b.get("j1").State)
	require.Equal(t, consume.Poison(), b.a.Result(context.Background(), contracts.ResultSubject("w1"), []byte(`{"job_id":"j1"}`), nil))
}

func TestRequeueStaleRunning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.running("j1", "w1", 3)
	rq := contracts.Requeue{JobID: "j1", Claim: 1, State: contracts.StateRunning, Reason: contracts.ReasonStale}

	// Not stale yet: the event is checked again and ignored.
	require.Equal(t, consume.Ack(), b.a.Requeue(context.Background(), requeueSubject(rq), enc(t, rq), nil))
	require.Equal(t, contracts.StateRunning, b.get("j1").State)

	b.now = b.now.Add(2 * time.Second)
	require.Equal(t, consume.Ack(), b.a.Requeue(context.Background(), requeueSubject(rq), enc(t, rq), nil))
	got := b.get("j1")
	require.Equal(t, contracts.StatePending, got.State)
	require.Equal(t, int64(2), got.Claim)
	require.Empty(t, got.Worker)
	require.Equal(t, []string{"j1"}, b.n.due)

	// The old worker's heartbeat is now told its lease is lost.
	out, err := b.store.Heartbeat(context.Background(), "w1", []contracts.Lease{{JobID: "j1", Claim: 1}}, b.now, 0)
	require.NoError(t, err)
	require.Len(t, out.Lost, 1)

	// Applying the same event again does nothing.
	require.Equal(t, consume.Ack(), b.a.Requeue(context.Background(), requeueSubject(rq), enc(t, rq), nil))
	require.Equal(t, int64(2), b.get("j1").Claim)
}

func TestRequeueStaleAtMaxAttemptsFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.running("j1", "w1", 1)
	b.now = b.now.Add(2 * time.Second)
	rq := contracts.Requeue{JobID: "j1", Claim: 1, State: contracts.StateRunning, Reason: contracts.ReasonStale}
	require.Equal(t, consume.Ack(), b.a.Requeue(context.Background(), requeueSubject(rq), enc(t, rq), nil))
	got := b.get("j1")
	require.Equal(t, contracts.StateFailed, got.State)
	require.Equal(t, contracts.ClassStale, contracts.ClassOf(got.Error))
}

func TestRequeueTimeoutFailsAndCancels(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.running("j1", "w1", 3)
	rq := contracts.Requeue{JobID: "j1", Claim: 1, State: contracts.StateRunning, Reason: contracts.ReasonTimeout}
	b.now = b.now.Add(2 * time.Hour)
	require.Equal(t, consume.Ack(), b.a.Requeue(context.Background(), requeueSubject(rq), enc(t, rq), nil))
	got := b.get("j1")
	require.Equal(t, contracts.StateFailed, got.State)
	require.Equal(t, contracts.ClassTimeout, contracts.ClassOf(got.Error))
	require.Equal(t, []contracts.Lease{{JobID: "j1", Claim: 1}}, b.n.cancels)
}

// TestRequeueOfACancelRequestedJobCancels: a running job a user asked to
// cancel whose run then stops another way (its worker went quiet, it ran
// past the maximum runtime, its worker shut down) ends cancelled: it does
// not run again and does not fail, with runs left or not.
func TestRequeueOfACancelRequestedJobCancels(t *testing.T) {
	t.Parallel()
	for _, reason := range []contracts.RequeueReason{contracts.ReasonStale, contracts.ReasonTimeout, contracts.ReasonShutdown} {
		for _, maxAttempts := range []int{1, 3} {
			t.Run(fmt.Sprintf("%s, max_attempts %d", reason, maxAttempts), func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				b.running("j1", "w1", maxAttempts)
				yes := true
				_, err := b.store.Transition(context.Background(), store.Expect{ID: "j1", State: contracts.StateRunning, Claim: 1},
					store.Change{Now: b.now, State: contracts.StateRunning, CancelRequested: &yes})
				require.NoError(t, err)
				b.now = b.now.Add(2 * time.Hour) // stale and past the maximum runtime
				rq := contracts.Requeue{JobID: "j1", Claim: 1, State: contracts.StateRunning, Reason: reason}
				require.Equal(t, consume.Ack(), b.a.Requeue(context.Background(), requeueSubject(rq), enc(t, rq), nil))
				got := b.get("j1")
				require.Equal(t, contracts.StateCancelled, got.State)
				require.Equal(t, contracts.CancelledByRequest, got.Error)
				require.Equal(t, int64(1), got.Claim, "not dispatched again")
				require.Empty(t, b.n.due)
				require.Equal(t, []contracts.Lease{{JobID: "j1", Claim: 1}}, b.n.cancels, "its worker is told to stop")
			})
		}
	}
}

func TestRequeueLostPendingRedelivers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := contracts.Job{ID: "p1", Tenant: "t", Kind: "sleep", State: contracts.StatePending, MaxAttempts: 1,
		CreatedAt: b.now, UpdatedAt: b.now, NextDispatchAt: &b.now, DispatchDeadline: b.now.Add(time.Hour)}
	_, _, err := b.store.Admit(context.Background(), j, store.Caps{})
	require.NoError(t, err)
	rq := contracts.Requeue{JobID: "p1", Claim: 0, State: contracts.StatePending, Reason: contracts.ReasonLost}
	require.Equal(t, consume.Ack(), b.a.Requeue(context.Background(), requeueSubject(rq), enc(t, rq), nil))
	require.Equal(t, []string{"p1"}, b.n.due)
	// A stale event (the job moved on) is dropped.
	rq.Claim = 7
	require.Equal(t, consume.Ack(), b.a.Requeue(context.Background(), requeueSubject(rq), enc(t, rq), nil))
	require.Len(t, b.n.due, 1)
}

func TestHeartbeatReplies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.running("j1", "w1", 3)
	ack, err := contracts.DecodeHeartbeatAck(b.a.Heartbeat(context.Background(), contracts.HeartbeatSubject("w1"), enc(t, contracts.Heartbeat{WorkerID: "w1", Leases: []contracts.Lease{{JobID: "j1", Claim: 1}, {JobID: "gone", Claim: 1}}})))
	require.NoError(t, err)
	require.Equal(t, []contracts.Lease{{JobID: "gone", Claim: 1}}, ack.Lost)
	require.Empty(t, ack.Error)

	ack, err = contracts.DecodeHeartbeatAck(b.a.Heartbeat(context.Background(), contracts.HeartbeatSubject("w1"), []byte(`{"worker_id":"bad id"}`)))
	require.NoError(t, err)
	require.Contains(t, ack.Error, "malformed heartbeat")
}

// TestResultStoresUsage: what a run used, as its worker reports it with
// the result, is stored with the run's end and shown by the job.
func TestResultStoresUsage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.running("j1", "w1", 3)
	used := &contracts.Usage{Mechanism: contracts.LimitCgroupV1, PeakMemory: 64 << 20, CPUSeconds: 0.25}
	res := contracts.Result{JobID: "j1", Claim: 1, WorkerID: "w1", State: contracts.StateFailed,
		Error: "resources: memory went past its limit of 64MiB", Usage: used}
	require.Equal(t, consume.Ack(), b.a.Result(context.Background(), contracts.ResultSubject(res.WorkerID), enc(t, res), nil))
	got := b.get("j1")
	require.Equal(t, contracts.StatePending, got.State, "retried")
	require.Equal(t, used, got.Usage)
}
