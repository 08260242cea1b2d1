package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/bus/bustest"
	"github.com/sluicehq/sluice/pkg/bus/roster"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/observe/clocktest"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/sqlite"
	"github.com/sluicehq/sluice/services/scheduler/internal/consume"
	"github.com/sluicehq/sluice/services/scheduler/internal/metrics"
	"github.com/sluicehq/sluice/services/scheduler/internal/picker"
)

type bundle struct {
	t      *testing.T
	nc     *nats.Conn
	store  store.Store
	roster *roster.Roster
	picker *picker.Picker
	d      *Dispatcher
	now    func() time.Time
	seq    int // jobs admitted

	mu       sync.Mutex
	offers   []string              // worker ids in the order they were offered a job
	accepted []string              // worker ids in the order they accepted a job
	batches  map[string][][]string // per worker, the job ids of each request
	payloads map[string]string     // per job id, the payload bytes of its last offer
}

const retry = 200 * time.Millisecond

func setup(t *testing.T) *bundle {
	t.Helper()
	return setupWith(t, Config{RetryInterval: retry, OfferTimeout: 200 * time.Millisecond})
}

func setupWith(t *testing.T, cfg Config) *bundle {
	t.Helper()
	return setupClock(t, cfg, time.Now)
}

// setupClock is setupWith on the clock now, which the dispatcher, the
// roster and the jobs the bundle admits read. Timers (the poll ticker,
// offer timeouts) still run on the real clock.
func setupClock(t *testing.T, cfg Config, now func() time.Time) *bundle {
	t.Helper()
	nc, _ := bustest.Start(t).Connect("scheduler")
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "jobs.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	r := roster.New(now)
	p := picker.New(r, 3)
	b := &bundle{t: t, nc: nc, store: st, roster: r, picker: p, now: now}
	b.d = New(cfg, st, nc, p, nil, now, func() float64 { return 0.5 }, zerolog.Nop(), metrics.New(prometheus.NewRegistry()))
	return b
}

// round runs one dispatch round in the test's goroutine: claim what the
// workers have room for, offer each job in ready order. It returns the
// jobs claimed.
func (b *bundle) round() []contracts.Job {
	b.t.Helper()
	jobs, _, err := b.d.claimRound(context.Background())
	require.NoError(b.t, err)
	b.d.dispatchAll(context.Background(), jobs)
	return jobs
}

// run runs the dispatcher until the test ends.
func (b *bundle) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.d.Run(ctx) }()
	b.t.Cleanup(func() {
		cancel()
		require.NoError(b.t, <-done)
	})
}

// worker announces a fake worker that answers offers with status, or
// never subscribes when status is "".
func (b *bundle) worker(id string, capacity int, status contracts.OfferStatus) {
	b.t.Helper()
	b.workerLoaded(id, capacity, 0, status)
}

// workerLoaded is worker with an announced in-flight count.
func (b *bundle) workerLoaded(id string, capacity, inFlight int, status contracts.OfferStatus) {
	b.t.Helper()
	b.roster.Observe(contracts.Announce{WorkerID: id, Kinds: []string{"sleep"}, Capacity: capacity, InFlight: inFlight, IntervalMS: 60000})
	if status == "" {
		return
	}
	running := inFlight
	sub, err := b.nc.Subscribe(contracts.WorkerOfferSubject(id), func(m *nats.Msg) {
		specs, batch, err := contracts.DecodeOffers(m.Data)
		if err != nil {
			return
		}
		out := contracts.OfferReply{Status: contracts.OfferRefused, WorkerID: id, Capacity: capacity}
		var sent []string
		b.mu.Lock()
		if b.payloads == nil {
			b.payloads = map[string]string{}
		}
		for _, spec := range specs {
			sent = append(sent, spec.ID)
			b.payloads[spec.ID] = string(spec.Payload)
		}
		if b.batches == nil {
			b.batches = map[string][][]string{}
		}
		b.batches[id] = append(b.batches[id], sent)
		b.mu.Unlock()
		for _, spec := range specs {
			answer := status
			if answer == contracts.OfferAccepted && capacity > 0 && running >= capacity {
				answer = contracts.OfferBusy // a real worker never takes more than its slots
			}
			b.mu.Lock()
			b.offers = append(b.offers, id)
			if answer == contracts.OfferAccepted {
				b.accepted = append(b.accepted, id)
			}
			b.mu.Unlock()
			if answer == contracts.OfferAccepted {
				running++
			}
			out.Results = append(out.Results, contracts.OfferResult{JobID: spec.ID, Claim: spec.Claim, Status: answer})
			if answer == contracts.OfferAccepted || out.Status == contracts.OfferRefused {
				out.Status = answer
			}
		}
		out.InFlight = capacity // a fake that answers busy or refused reports itself full
		if out.Status == contracts.OfferAccepted {
			out.InFlight = running
		}
		if !batch {
			out.Results = nil
		}
		reply, _ := json.Marshal(out)
		_ = m.Respond(reply)
	})
	require.NoError(b.t, err)
	b.t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(b.t, b.nc.Flush())
}

func (b *bundle) acceptedBy() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.accepted...)
}

func (b *bundle) offered() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.offers...)
}

func (b *bundle) admit(deadline time.Duration) contracts.Job {
	b.t.Helper()
	return b.admitWith(deadline, nil)
}

// admitWith admits a job of kind sleep, changed by edit first.
func (b *bundle) admitWith(deadline time.Duration, edit func(*contracts.Job)) contracts.Job {
	b.t.Helper()
	b.seq++
	now := b.now().UTC()
	j := contracts.Job{ID: fmt.Sprintf("job-%03d", b.seq), Tenant: "t", Kind: "sleep", State: contracts.StatePending,
		MaxAttempts: 3, CreatedAt: now, UpdatedAt: now, NextDispatchAt: &now, DispatchDeadline: now.Add(deadline)}
	if edit != nil {
		edit(&j)
	}
	got, outcome, err := b.store.Admit(context.Background(), j, store.Caps{})
	require.NoError(b.t, err)
	require.Equal(b.t, store.Admitted, outcome)
	return got
}

func (b *bundle) handle(j contracts.Job) consume.Settle {
	data, err := json.Marshal(contracts.Due{JobID: j.ID})
	require.NoError(b.t, err)
	return b.d.Handle(context.Background(), contracts.SubjectDue, data, func() {})
}

func (b *bundle) get(id string) contracts.Job {
	j, err := b.store.Get(context.Background(), id)
	require.NoError(b.t, err)
	return j
}

// TestClaimStartsTheJobOnTheNextFreeSlot: a claim starts the job running
// on the first free slot in stable order, and offers it to that worker
// alone; a worker that does not take it sends the job back to pending (its
// run undone), and the next claim gives it the next slot: past a busy
// worker (the view now knows it is full) and a silent one (last, until it
// answers again).
func TestClaimStartsTheJobOnTheNextFreeSlot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.worker("w1", 1, contracts.OfferBusy)
	b.worker("w2", 1, "") // announced, but nobody answers its subject
	b.worker("w3", 1, contracts.OfferAccepted)
	b.worker("w4", 1, contracts.OfferAccepted)
	j := b.admit(time.Minute)

	require.Len(t, b.round(), 1)
	require.Equal(t, []string{"w1"}, b.offered(), "one offer: to the slot's worker")
	got := b.get(j.ID)
	require.Equal(t, contracts.StatePending, got.State, "w1 was busy: back to pending")
	require.Equal(t, int64(1), got.Claim)
	require.Zero(t, got.Attempt, "the run it was given is undone")
	require.Empty(t, got.Worker)
	require.Nil(t, got.StartedAt)

	claimed := b.round()
	require.Len(t, claimed, 1)
	require.Equal(t, "w2", claimed[0].Worker, "w1 is full as far as the view knows")
	require.Equal(t, contracts.StateRunning, claimed[0].State, "running from the claim")
	require.Equal(t, 1, b.picker.Failures("w2"))
	require.Equal(t, contracts.StatePending, b.get(j.ID).State, "no answer: back to pending, ready at once")

	claimed = b.round()
	require.Len(t, claimed, 1)
	require.Equal(t, []string{"w1", "w3"}, b.offered(), "w2 did not answer (no fake sees its offer): it comes last now")
	got = b.get(j.ID)
	require.Equal(t, contracts.StateRunning, got.State, "w3 accepted: running, nothing more written")
	require.Equal(t, "w3", got.Worker)
	require.Equal(t, int64(3), got.Claim, "three claims")
	require.Equal(t, 1, got.Attempt, "one run")
	require.Equal(t, claimed[0].UpdatedAt, got.UpdatedAt, "the accept wrote nothing")
}

// TestRepeatedFailuresEvict: a worker that never answers is offered one
// job at a time and evicted after three failures; the job is back to
// pending each time, ready at once.
func TestRepeatedFailuresEvict(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.worker("w1", 4, "")
	j := b.admit(time.Minute)
	b.admit(time.Minute)
	require.Len(t, b.round(), 2, "both go to w1's slots while nothing failed")
	for range 2 {
		require.Len(t, b.round(), 1, "then one job at a time")
	}
	require.Empty(t, b.picker.Candidates("sleep", 10), "w1 is evicted after three failed offers")
	require.Empty(t, b.round())
	require.Len(t, b.offered(), 0, "no answer, so no offer recorded by the fake")
	got := b.get(j.ID)
	require.Equal(t, contracts.StatePending, got.State)
	require.Zero(t, got.Attempt)
	require.False(t, got.NextDispatchAt.After(time.Now()), "no answer is no refusal: ready at once")
}

func TestNoRoomNoClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.admit(time.Minute)
	require.Empty(t, b.round(), "no worker: nothing claimed")
	b.workerLoaded("w1", 1, 1, contracts.OfferAccepted) // full as far as the view knows
	require.Empty(t, b.round(), "no room: nothing claimed")
	got := b.get(j.ID)
	require.Equal(t, contracts.StatePending, got.State)
	require.Equal(t, int64(0), got.Claim, "no claim was spent")
	require.Nil(t, got.ClaimUntil)
	require.Empty(t, b.offered())

	// The due message is acknowledged: the job waits in the store.
	require.Equal(t, consume.Ack(), b.handle(j))
}

func TestAllBusyReleasesTheClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.worker("w1", 0, contracts.OfferBusy) // unlimited in the view, busy in fact
	j := b.admit(time.Minute)
	require.Len(t, b.round(), 1)
	got := b.get(j.ID)
	require.Equal(t, int64(1), got.Claim)
	require.Nil(t, got.ClaimUntil, "overflow releases the claim")
	require.Equal(t, contracts.StatePending, got.State)
	require.False(t, got.NextDispatchAt.After(time.Now()), "a busy worker is no failure: ready again at once")
}

func TestFailedOffersDelayTheJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.worker("w1", 1, contracts.OfferRefused)
	j := b.admit(time.Minute)
	before := time.Now()
	require.Len(t, b.round(), 1)
	got := b.get(j.ID)
	require.Nil(t, got.ClaimUntil)
	require.True(t, got.NextDispatchAt.After(before.Add(retry)), "after a failed offer the job waits the retry interval")
	require.Empty(t, b.round(), "not ready again before then")
}

func TestDeadlineSweepFailsWithCapacity(t *testing.T) {
	t.Parallel()
	clock := clocktest.New()
	b := setupClock(t, Config{RetryInterval: retry, OfferTimeout: 200 * time.Millisecond}, clock.Now)
	j := b.admit(50 * time.Millisecond)
	keep := b.admit(time.Hour)
	n, err := b.d.Sweep(context.Background())
	require.NoError(t, err)
	require.Zero(t, n)
	clock.Advance(50 * time.Millisecond)
	n, err = b.d.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got := b.get(j.ID)
	require.Equal(t, contracts.StateFailed, got.State)
	require.Equal(t, contracts.ClassCapacity, contracts.ClassOf(got.Error))
	require.Equal(t, contracts.StatePending, b.get(keep.ID).State)

	// A due message for a job past its deadline fails it too.
	late := b.admit(time.Millisecond)
	clock.Advance(time.Millisecond)
	require.Equal(t, consume.Ack(), b.handle(late))
	require.Equal(t, contracts.StateFailed, b.get(late.ID).State)
}

func TestDueMessages(t *testing.T) {
	t.Parallel()
	clock := clocktest.New()
	b := setupClock(t, Config{RetryInterval: retry, OfferTimeout: 200 * time.Millisecond}, clock.Now)
	b.worker("w1", 2, contracts.OfferAccepted)

	// Not due yet (run_at): the message comes back when it is.
	later := b.admitWith(time.Hour, func(j *contracts.Job) {
		at := j.CreatedAt.Add(10 * time.Minute)
		j.RunAt, j.NextDispatchAt = &at, &at
	})
	s := b.handle(later)
	require.True(t, s.Retry)
	require.Equal(t, 10*time.Minute, s.Delay)
	require.Empty(t, b.round(), "a job is not claimed before run_at")

	// Ready: the dispatcher is woken and the message is done.
	ready := b.admit(time.Hour)
	require.Equal(t, consume.Ack(), b.handle(ready))
	select {
	case <-b.d.wake:
	default:
		t.Fatal("a ready job's due message wakes the dispatcher")
	}
	require.Len(t, b.round(), 1)

	// Claimed, running or finished: dropped.
	require.Equal(t, consume.Ack(), b.handle(ready))
	require.Len(t, b.offered(), 1, "no second offer for a claimed job")
	clock.Advance(10 * time.Minute)
	b.roster.Observe(contracts.Announce{WorkerID: "w1", Kinds: []string{"sleep"}, Capacity: 2, InFlight: 1, IntervalMS: 60000}) // still live
	require.Equal(t, []string{later.ID}, jobIDs(b.round()), "claimed once run_at has come")
}

func jobIDs(jobs []contracts.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

func TestMalformedDueIsPoison(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, data := range []string{``, `{`, `{"job_id":"../x"}`, `{"job_id":"a","extra":1}`} {
		require.Equal(t, consume.Poison(), b.d.Handle(context.Background(), contracts.SubjectDue, []byte(data), func() {}), data)
	}
	// An unknown job is simply acknowledged.
	require.Equal(t, consume.Ack(), b.d.Handle(context.Background(), contracts.SubjectDue, []byte(`{"job_id":"nope"}`), func() {}))
}

func TestDispatchesByPriorityWhenWorkersAreScarce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	low := b.admitWith(time.Minute, func(j *contracts.Job) { j.Priority = 1 })
	high := b.admitWith(time.Minute, func(j *contracts.Job) { j.Priority = 8 })
	b.worker("w1", 1, contracts.OfferAccepted)
	got := b.round()
	require.Equal(t, []string{high.ID}, jobIDs(got), "one slot: the higher priority goes first")
	require.Equal(t, int64(0), b.get(low.ID).Claim)
}

func TestFreedSlotWakesTheDispatcher(t *testing.T) {
	t.Parallel()
	b := setupWith(t, Config{RetryInterval: time.Hour, OfferTimeout: 200 * time.Millisecond})
	b.workerLoaded("w1", 1, 1, contracts.OfferAccepted) // full as far as the view knows
	j := b.admit(time.Minute)
	b.run()
	require.Never(t, func() bool { return len(b.offered()) > 0 }, 100*time.Millisecond, 5*time.Millisecond)

	// The worker frees its slot: the waiting job is offered at once (the
	// poll interval is an hour).
	b.roster.Observe(contracts.Announce{WorkerID: "w1", Kinds: []string{"sleep"}, Capacity: 1, InFlight: 0, IntervalMS: 60000})
	require.Eventually(t, func() bool { return len(b.offered()) == 1 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, int64(1), b.get(j.ID).Claim)
}

func TestConcurrentOffersReserveDistinctSlots(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.worker("w1", 2, contracts.OfferAccepted)
	b.worker("w2", 2, contracts.OfferAccepted)
	for range 6 {
		b.admit(time.Minute)
	}
	b.run()
	require.Eventually(t, func() bool { return len(b.acceptedBy()) >= 4 }, 10*time.Second, 5*time.Millisecond)
	require.Never(t, func() bool { return len(b.acceptedBy()) > 4 }, 200*time.Millisecond, 10*time.Millisecond)
	n := map[string]int{}
	for _, id := range b.acceptedBy() {
		n[id]++
	}
	require.Equal(t, map[string]int{"w1": 2, "w2": 2}, n)
	// Room, claims and reservations agree: at most a stray offer beyond
	// one per slot (two answers of one worker may land out of order).
	require.LessOrEqual(t, len(b.offered()), 6)
}

// TestJobTooLargeForTheBusFailsWithoutBlamingWorkers puts a job whose
// offer could not be sent straight into the store (as if admitted under a
// larger max payload): it fails "input:" at once, no offer is attempted,
// no worker is counted a failure or evicted, and the next job is
// dispatched as usual.
func TestJobTooLargeForTheBusFailsWithoutBlamingWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.worker("w1", 4, contracts.OfferAccepted)
	b.worker("w2", 4, contracts.OfferAccepted)
	payload, err := json.Marshal(strings.Repeat("a", int(b.nc.MaxPayload())))
	require.NoError(t, err)
	now := time.Now().UTC()
	big, outcome, err := b.store.Admit(context.Background(), contracts.Job{ID: "job-big", Tenant: "t", Kind: "sleep",
		State: contracts.StatePending, Payload: payload, MaxAttempts: 3, CreatedAt: now, UpdatedAt: now,
		NextDispatchAt: &now, DispatchDeadline: now.Add(time.Minute)}, store.Caps{})
	require.NoError(t, err)
	require.Equal(t, store.Admitted, outcome)

	require.Equal(t, consume.Ack(), b.handle(big))
	got := b.get(big.ID)
	require.Equal(t, contracts.StateFailed, got.State)
	require.Equal(t, contracts.ClassInput, contracts.ClassOf(got.Error))
	require.Zero(t, got.Claim, "no dispatch attempt spent")
	require.Empty(t, b.offered(), "no offer was attempted")
	require.Zero(t, b.picker.Failures("w1"))
	require.Zero(t, b.picker.Failures("w2"))

	// Claimed before the check (admitted behind the gateway's back), it
	// still fails without an offer.
	big2, _, err := b.store.Admit(context.Background(), contracts.Job{ID: "job-big2", Tenant: "t", Kind: "sleep",
		State: contracts.StatePending, Payload: payload, MaxAttempts: 3, CreatedAt: now, UpdatedAt: now,
		NextDispatchAt: &now, DispatchDeadline: now.Add(time.Minute)}, store.Caps{})
	require.NoError(t, err)
	small := b.admit(time.Minute)
	require.Len(t, b.round(), 2)
	require.Equal(t, contracts.StateFailed, b.get(big2.ID).State)
	require.Equal(t, int64(1), b.get(small.ID).Claim, "claimed and accepted")
	require.Equal(t, []string{"w1"}, b.offered())
	require.Zero(t, b.picker.Failures("w1"))
}

// TestJobOfAKindNoWorkerRunsFailsAfterTheGrace checks SLUICE_SCHEDULER_NO_WORKER_GRACE:
// a job of a kind no live worker announces fails "capacity: no worker runs
// kind" once the grace has passed since the scheduler started, not before;
// a kind whose worker is live keeps waiting; a worker that goes away starts
// the grace for its kind.
func TestJobOfAKindNoWorkerRunsFailsAfterTheGrace(t *testing.T) {
	t.Parallel()
	const grace = time.Minute
	clock := clocktest.New()
	b := setupClock(t, Config{RetryInterval: retry, OfferTimeout: 200 * time.Millisecond, NoWorkerGrace: grace}, clock.Now)

	nobody := b.admit(time.Hour) // kind "sleep": nobody announces it yet
	s := b.handle(nobody)
	require.True(t, s.Retry, "within the grace the message comes back")
	require.Equal(t, grace, s.Delay, "when the grace ends")
	require.Equal(t, contracts.StatePending, b.get(nobody.ID).State)

	clock.Advance(grace - time.Second)
	require.True(t, b.handle(nobody).Retry, "a restarted scheduler does not fail jobs at once")

	clock.Advance(time.Second)
	require.Equal(t, consume.Ack(), b.handle(nobody))
	got := b.get(nobody.ID)
	require.Equal(t, contracts.StateFailed, got.State)
	require.Equal(t, `capacity: no worker runs kind "sleep" (none has announced it for 1m0s)`, got.Error)

	// A live but full worker keeps its kind's jobs waiting past the grace.
	b.workerLoaded("w1", 1, 1, contracts.OfferBusy)
	waiting := b.admit(time.Hour)
	clock.Advance(2 * grace)
	b.workerLoaded("w1", 1, 1, contracts.OfferBusy) // announces again: still live
	require.Equal(t, consume.Ack(), b.handle(waiting), "a live worker runs the kind: the job waits in the store")
	require.Equal(t, contracts.StatePending, b.get(waiting.ID).State)

	// It leaves: the grace starts then (for the message the reaper
	// republishes, or a redelivery).
	b.roster.Observe(contracts.Announce{WorkerID: "w1", Kinds: []string{"sleep"}, Leaving: true})
	clock.Advance(grace / 2)
	require.True(t, b.handle(waiting).Retry, "half the grace after the worker left")
	clock.Advance(grace / 2)
	require.Equal(t, consume.Ack(), b.handle(waiting))
	require.Equal(t, contracts.StateFailed, b.get(waiting.ID).State)
}

// TestSweepFailsJobsOfAKindNoWorkerRuns checks the grace without any due
// message (a ready job has none): the sweep fails the waiting jobs of a
// kind no live worker has announced for the grace, and only those.
func TestSweepFailsJobsOfAKindNoWorkerRuns(t *testing.T) {
	t.Parallel()
	const grace = time.Minute
	clock := clocktest.New()
	b := setupClock(t, Config{RetryInterval: retry, OfferTimeout: 200 * time.Millisecond, NoWorkerGrace: grace}, clock.Now)

	nobody := b.admit(time.Hour) // kind "sleep": nobody announces it yet
	n, err := b.d.Sweep(context.Background())
	require.NoError(t, err)
	require.Zero(t, n, "within the grace")

	clock.Advance(grace)
	b.workerLoaded("w1", 1, 1, contracts.OfferBusy) // a live worker runs "sleep" from now on
	n, err = b.d.Sweep(context.Background())
	require.NoError(t, err)
	require.Zero(t, n, "a live worker runs the kind: its jobs wait")
	require.Equal(t, contracts.StatePending, b.get(nobody.ID).State)

	b.roster.Observe(contracts.Announce{WorkerID: "w1", Kinds: []string{"sleep"}, Leaving: true})
	clock.Advance(grace - time.Second)
	n, err = b.d.Sweep(context.Background())
	require.NoError(t, err)
	require.Zero(t, n, "the grace restarts when the last worker leaves")
	clock.Advance(time.Second)
	n, err = b.d.Sweep(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got := b.get(nobody.ID)
	require.Equal(t, contracts.StateFailed, got.State)
	require.Equal(t, `capacity: no worker runs kind "sleep" (none has announced it for 1m0s)`, got.Error)
}

// TestOfferBatchPerWorker checks that one round sends each worker its jobs
// in one request: the best jobs to the first worker in stable order, as
// many as its free slots, the rest to the next.
func TestOfferBatchPerWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.worker("w1", 3, contracts.OfferAccepted)
	b.worker("w2", 3, contracts.OfferAccepted)
	var ids []string
	for range 5 {
		ids = append(ids, b.admit(time.Minute).ID)
	}
	require.Len(t, b.round(), 5)
	b.mu.Lock()
	batches := b.batches
	b.mu.Unlock()
	require.Equal(t, map[string][][]string{"w1": {ids[:3]}, "w2": {ids[3:]}}, batches)
	for i, id := range ids {
		got := b.get(id)
		require.Equal(t, contracts.StateRunning, got.State, "running from the claim")
		require.Equal(t, map[bool]string{true: "w1", false: "w2"}[i < 3], got.Worker)
	}
	require.Len(t, b.acceptedBy(), 5)
}

// TestStopLeavesSentOffersWithTheirWorkers checks that a dispatcher
// stopping while an offer is unanswered leaves the job running on its
// worker: the worker may have taken it, and only its heartbeats (or, when
// none come, the reaper at the stale threshold) can say.
func TestStopLeavesSentOffersWithTheirWorkers(t *testing.T) {
	t.Parallel()
	b := setupWith(t, Config{RetryInterval: retry, OfferTimeout: time.Minute})
	b.roster.Observe(contracts.Announce{WorkerID: "mute", Kinds: []string{"sleep"}, Capacity: 1, IntervalMS: 60000})
	offered := make(chan struct{}, 1)
	sub, err := b.nc.Subscribe(contracts.WorkerOfferSubject("mute"), func(*nats.Msg) {
		select {
		case offered <- struct{}{}:
		default:
		}
	}) // never answers
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, b.nc.Flush())
	j := b.admit(time.Hour)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.d.Run(ctx) }()
	select {
	case <-offered:
	case <-time.After(10 * time.Second):
		t.Fatal("the job was not offered")
	}
	require.Equal(t, contracts.StateRunning, b.get(j.ID).State, "running on its slot while its offer waits")
	cancel()
	require.NoError(t, <-done)
	got := b.get(j.ID)
	require.Equal(t, contracts.StateRunning, got.State, "not given back: the worker may have it")
	require.Equal(t, "mute", got.Worker)
	require.Equal(t, int64(1), got.Claim)
}

// TestUnansweredOfferLeavesTheJobWithItsWorker: an offer that times out
// leaves its job running on the worker, with the lease its claim wrote, so
// that a worker that took it runs it alone; the stale query finds it once
// that lease is old, and the worker comes last in the next claim's slots.
func TestUnansweredOfferLeavesTheJobWithItsWorker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.roster.Observe(contracts.Announce{WorkerID: "mute", Kinds: []string{"sleep"}, Capacity: 2, IntervalMS: 60000})
	sub, err := b.nc.Subscribe(contracts.WorkerOfferSubject("mute"), func(*nats.Msg) {}) // never answers
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, b.nc.Flush())
	b.worker("w2", 1, contracts.OfferAccepted)
	j := b.admit(time.Hour)

	claimed := b.round()
	require.Len(t, claimed, 1)
	require.Equal(t, "mute", claimed[0].Worker)
	got := b.get(j.ID)
	require.Equal(t, contracts.StateRunning, got.State, "no answer: it stays with the worker")
	require.Equal(t, int64(1), got.Claim)
	require.Equal(t, 1, b.picker.Failures("mute"))

	stale, err := b.store.Stale(context.Background(), store.StaleQuery{Now: time.Now(), HeartbeatBefore: got.HeartbeatAt.Add(time.Nanosecond), Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []string{j.ID}, jobIDs(stale), "the reaper finds it by the lease the claim wrote")

	next := b.admit(time.Hour)
	require.Equal(t, []string{next.ID}, jobIDs(b.round()))
	require.Equal(t, "w2", b.get(next.ID).Worker, "the silent worker comes last")
}

// TestOfferCarriesThePayloadAsStored: a worker is offered the payload's
// bytes as the store keeps them (as submitted, compacted): no number
// re-encoded, no character of a string escaped.
func TestOfferCarriesThePayloadAsStored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.worker("w1", 10, contracts.OfferAccepted)
	payloads := []string{`12345678901234567890`, `-0`, `1e400`, `{"html":"<a href=\"x\">&amp;</a>","ls":"\u2028    "}`}
	ids := map[string]string{}
	for _, p := range payloads {
		ids[b.admitWith(time.Minute, func(j *contracts.Job) { j.Payload = json.RawMessage(p) }).ID] = p
	}
	require.Len(t, b.round(), len(payloads))
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, p := range ids {
		require.Equal(t, p, b.payloads[id], "job %s", id)
	}
}

// TestOneSlotSharedByKinds: a worker with one slot that runs two kinds
// gets the ready job of either, whichever kind comes first in the claim:
// a slot reserved for a kind with no ready job does not keep the other's
// job waiting.
func TestOneSlotSharedByKinds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.roster.Observe(contracts.Announce{WorkerID: "w1", Kinds: []string{"exec", "sleep"}, Capacity: 1, IntervalMS: 60000})
	sub, err := b.nc.Subscribe(contracts.WorkerOfferSubject("w1"), func(m *nats.Msg) {
		reply, _ := json.Marshal(contracts.OfferReply{Status: contracts.OfferAccepted, WorkerID: "w1", Capacity: 1, InFlight: 1})
		_ = m.Respond(reply)
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, b.nc.Flush())
	for range 20 { // whatever order the kinds come in
		j := b.admit(time.Minute) // kind sleep
		claimed := b.round()
		require.Equal(t, []string{j.ID}, jobIDs(claimed))
		_, err := b.store.Transition(context.Background(), store.Expect{ID: j.ID, State: contracts.StateRunning, Claim: claimed[0].Claim},
			store.Change{Now: time.Now(), State: contracts.StateSucceeded})
		require.NoError(t, err)
		b.roster.Observe(contracts.Announce{WorkerID: "w1", Kinds: []string{"exec", "sleep"}, Capacity: 1, IntervalMS: 60000})
	}
}

// TestCancelAskedDuringAGiveBackEndsTheJob: a cancel asked while a claimed
// job is being given back (both compare-and-set on its state and claim,
// which the cancel leaves alone) leaves it pending with the cancel asked;
// the next claim ends it cancelled instead of offering it to run again.
func TestCancelAskedDuringAGiveBackEndsTheJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	j := b.admit(time.Hour)
	claimed, err := b.store.Claim(ctx, store.ClaimRequest{Now: time.Now(), Slots: map[string][]string{j.Kind: {"w0"}}})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	exp := store.Expect{ID: j.ID, State: contracts.StateRunning, Claim: claimed[0].Claim}
	yes := true
	_, err = b.store.Transition(ctx, exp, store.Change{Now: time.Now(), State: contracts.StateRunning, CancelRequested: &yes})
	require.NoError(t, err, "the cancel")
	back, err := b.store.Transition(ctx, exp, store.ReleaseChange(time.Now(), nil))
	require.NoError(t, err, "the give-back")
	require.Equal(t, contracts.StatePending, back.State)
	require.True(t, back.CancelRequested)

	b.worker("w1", 2, contracts.OfferAccepted)
	require.Len(t, b.round(), 1)
	require.Empty(t, b.offered(), "a job whose cancel was asked is not offered")
	got := b.get(j.ID)
	require.Equal(t, contracts.StateCancelled, got.State)
	require.Equal(t, contracts.CancelledByRequest, got.Error)
	require.Equal(t, 2, b.picker.Room()[j.Kind], "its slot is free again")
}
