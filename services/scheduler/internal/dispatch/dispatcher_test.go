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

	mu     sync.Mutex
	offers []string // worker ids in the order they were offered a job
}

const retry = 200 * time.Millisecond

func setup(t *testing.T) *bundle {
	t.Helper()
	return setupWith(t, Config{RetryInterval: retry, ClaimTTL: 5 * time.Second, OfferTimeout: 200 * time.Millisecond})
}

func setupWith(t *testing.T, cfg Config) *bundle {
	t.Helper()
	return setupClock(t, cfg, time.Now)
}

// setupClock is setupWith on the clock now, which the dispatcher, the
// roster and the jobs the bundle admits read. Timers (the hold for room,
// offer timeouts) still run on the real clock, so a test with a fake clock
// must not hold.
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
		_, err := contracts.DecodeOffer(m.Data)
		if err != nil {
			return
		}
		b.mu.Lock()
		b.offers = append(b.offers, id)
		b.mu.Unlock()
		load := capacity
		if status == contracts.OfferAccepted {
			running++
			load = running
		}
		reply, _ := json.Marshal(contracts.OfferReply{Status: status, WorkerID: id, InFlight: load, Capacity: capacity})
		_ = m.Respond(reply)
	})
	require.NoError(b.t, err)
	b.t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(b.t, b.nc.Flush())
}

func (b *bundle) offered() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.offers...)
}

func (b *bundle) admit(deadline time.Duration) contracts.Job {
	b.t.Helper()
	b.seq++
	now := b.now().UTC()
	j := contracts.Job{ID: fmt.Sprintf("job-%d", b.seq), Tenant: "t", Kind: "sleep", State: contracts.StatePending,
		MaxAttempts: 3, CreatedAt: now, UpdatedAt: now, NextDispatchAt: &now, DispatchDeadline: now.Add(deadline)}
	got, outcome, err := b.store.Admit(context.Background(), j, store.Caps{})
	require.NoError(b.t, err)
	require.Equal(b.t, store.Admitted, outcome)
	return got
}

func (b *bundle) handle(j contracts.Job) consume.Settle {
	data, err := json.Marshal(contracts.Due{JobID: j.ID})
	require.NoError(b.t, err)
	return b.d.Handle(context.Background(), data, func() {})
}

func (b *bundle) get(id string) contracts.Job {
	j, err := b.store.Get(context.Background(), id)
	require.NoError(b.t, err)
	return j
}

func TestOfferRotatesPastBusyAndNoResponders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.worker("w1", 1, contracts.OfferBusy)
	b.worker("w2", 1, "") // announced, but nobody answers its subject
	b.worker("w3", 1, contracts.OfferAccepted)
	b.worker("w4", 1, contracts.OfferAccepted)
	j := b.admit(time.Minute)

	s := b.handle(j)
	require.Equal(t, consume.Ack(), s)
	require.Equal(t, []string{"w1", "w3"}, b.offered(), "w1 busy, w2 no responders, w3 accepts, w4 never asked")
	got := b.get(j.ID)
	require.Equal(t, contracts.StatePending, got.State, "running is recorded by the worker's start heartbeat")
	require.Equal(t, int64(1), got.Attempt)
	require.NotNil(t, got.ClaimUntil, "the claim keeps other schedulers off until the heartbeat lands")
	require.Equal(t, 1, b.picker.Failures("w2"))

	// The busy answer told the view w1 is full: the next job skips it.
	ids, full := b.picker.Candidates("sleep")
	require.NotContains(t, ids, "w1")
	require.GreaterOrEqual(t, full, 1)
}

func TestRepeatedFailuresEvict(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.worker("w1", 1, "")
	b.worker("w2", 0, contracts.OfferAccepted)
	for range 3 {
		require.Equal(t, consume.Ack(), b.handle(b.admit(time.Minute)))
	}
	ids, _ := b.picker.Candidates("sleep")
	require.Equal(t, []string{"w2"}, ids, "w1 is evicted after three failed offers")
	require.Len(t, b.offered(), 3)
}

func TestNoWorkerOverflowsWithoutAClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.admit(time.Minute)
	before := time.Now()
	s := b.handle(j)
	require.True(t, s.Retry)
	require.InDelta(t, float64(retry+retry/8), float64(s.Delay), float64(20*time.Millisecond), "retry interval plus jitter")
	got := b.get(j.ID)
	require.Equal(t, contracts.StatePending, got.State)
	require.Equal(t, int64(0), got.Attempt, "no claim was spent")
	require.Nil(t, got.ClaimUntil)
	require.True(t, got.NextDispatchAt.After(before.Add(retry)))

	// Redelivered early, the message waits for next_dispatch_at.
	s = b.handle(j)
	require.True(t, s.Retry)
	require.Greater(t, s.Delay, retry/2)
}

func TestAllBusyReleasesTheClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.worker("w1", 0, contracts.OfferBusy) // unlimited in the view, busy in fact
	j := b.admit(time.Minute)
	s := b.handle(j)
	require.True(t, s.Retry)
	got := b.get(j.ID)
	require.Equal(t, int64(1), got.Attempt)
	require.Nil(t, got.ClaimUntil, "overflow releases the claim")
	require.Equal(t, contracts.StatePending, got.State)
}

func TestDeadlineFailsWithCapacity(t *testing.T) {
	t.Parallel()
	clock := clocktest.New()
	b := setupClock(t, Config{RetryInterval: retry, ClaimTTL: 5 * time.Second, OfferTimeout: 200 * time.Millisecond}, clock.Now)
	j := b.admit(50 * time.Millisecond)
	s := b.handle(j)
	require.True(t, s.Retry)
	require.Equal(t, 50*time.Millisecond, s.Delay, "the retry is capped at the deadline")
	clock.Advance(s.Delay)
	require.Equal(t, consume.Ack(), b.handle(j))
	got := b.get(j.ID)
	require.Equal(t, contracts.StateFailed, got.State)
	require.Equal(t, contracts.ClassCapacity, contracts.ClassOf(got.Error))
}

func TestLiveClaimWaitsAndFinishedDrops(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.worker("w1", 1, contracts.OfferAccepted)
	j := b.admit(time.Minute)
	require.Equal(t, consume.Ack(), b.handle(j))
	// A duplicate due message while the claim is live waits for it.
	s := b.handle(j)
	require.True(t, s.Retry)
	require.Greater(t, s.Delay, time.Second)
	require.Len(t, b.offered(), 1, "no second offer for a claimed job")

	// Once the worker's heartbeat records it running, the message is dropped.
	out, err := b.store.Heartbeat(context.Background(), "w1", []contracts.Lease{{JobID: j.ID, Attempt: 1}}, time.Now())
	require.NoError(t, err)
	require.Len(t, out.Promoted, 1)
	require.Equal(t, consume.Ack(), b.handle(j))
	require.Len(t, b.offered(), 1)
}

func TestMalformedDueIsPoison(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, data := range []string{``, `{`, `{"job_id":"../x"}`, `{"job_id":"a","extra":1}`} {
		require.Equal(t, consume.Poison(), b.d.Handle(context.Background(), []byte(data), func() {}), data)
	}
	// An unknown job is simply acknowledged.
	require.Equal(t, consume.Ack(), b.d.Handle(context.Background(), []byte(`{"job_id":"nope"}`), func() {}))
}

func TestHoldsForAFreedSlotInsteadOfPolling(t *testing.T) {
	t.Parallel()
	b := setupWith(t, Config{RetryInterval: retry, ClaimTTL: 5 * time.Second, OfferTimeout: 200 * time.Millisecond, HoldForRoom: 10 * time.Second, MaxHolding: 4})
	b.workerLoaded("w1", 1, 1, contracts.OfferAccepted) // full as far as the view knows
	j := b.admit(time.Minute)
	settled := make(chan consume.Settle, 1)
	go func() { settled <- b.handle(j) }()

	// Nothing is offered while the only worker is full.
	require.Never(t, func() bool { return len(b.offered()) > 0 }, 100*time.Millisecond, 5*time.Millisecond)
	require.Equal(t, int64(0), b.get(j.ID).Attempt, "no claim spent while holding")

	// The worker frees its slot: the held job is offered at once.
	start := time.Now()
	b.roster.Observe(contracts.Announce{WorkerID: "w1", Kinds: []string{"sleep"}, Capacity: 1, InFlight: 0, IntervalMS: 60000})
	select {
	case s := <-settled:
		require.Equal(t, consume.Ack(), s)
		require.Less(t, time.Since(start), 5*time.Second)
	case <-time.After(10 * time.Second):
		t.Fatal("held job never offered")
	}
	require.Equal(t, []string{"w1"}, b.offered())
	require.Equal(t, int64(1), b.get(j.ID).Attempt)
}

func TestHoldEndsInOverflow(t *testing.T) {
	t.Parallel()
	b := setupWith(t, Config{RetryInterval: retry, ClaimTTL: 5 * time.Second, OfferTimeout: 200 * time.Millisecond, HoldForRoom: 150 * time.Millisecond, MaxHolding: 1})
	b.workerLoaded("w1", 1, 1, contracts.OfferAccepted)
	j := b.admit(time.Minute)
	s := b.handle(j)
	require.True(t, s.Retry, "after the hold the job overflows")
	got := b.get(j.ID)
	require.Equal(t, contracts.StatePending, got.State)
	require.Equal(t, int64(0), got.Attempt)
	require.Empty(t, b.offered())
}

func TestConcurrentDispatchesReserveDistinctSlots(t *testing.T) {
	t.Parallel()
	b := setupWith(t, Config{RetryInterval: retry, ClaimTTL: 5 * time.Second, OfferTimeout: 200 * time.Millisecond, HoldForRoom: 0})
	b.worker("w1", 2, contracts.OfferAccepted)
	b.worker("w2", 2, contracts.OfferAccepted)
	jobs := []contracts.Job{b.admit(time.Minute), b.admit(time.Minute), b.admit(time.Minute), b.admit(time.Minute)}
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			require.Equal(t, consume.Ack(), b.handle(j))
		}()
	}
	wg.Wait()
	got := b.offered()
	require.Len(t, got, 4, "one offer per job: no two dispatches raced for the same slot")
	n := map[string]int{}
	for _, id := range got {
		n[id]++
	}
	require.Equal(t, map[string]int{"w1": 2, "w2": 2}, n)
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

	for range 5 { // redelivered as often as eviction would need
		require.Equal(t, consume.Ack(), b.handle(big))
	}
	got := b.get(big.ID)
	require.Equal(t, contracts.StateFailed, got.State)
	require.Equal(t, contracts.ClassInput, contracts.ClassOf(got.Error))
	require.Zero(t, got.Attempt, "no dispatch attempt spent")
	require.Empty(t, b.offered(), "no offer was attempted")
	require.Zero(t, b.picker.Failures("w1"))
	require.Zero(t, b.picker.Failures("w2"))

	small := b.admit(time.Minute)
	require.Equal(t, consume.Ack(), b.handle(small))
	require.Equal(t, int64(1), b.get(small.ID).Attempt, "claimed and accepted")
	require.Equal(t, []string{"w1"}, b.offered())
}

// TestJobOfAKindNoWorkerRunsFailsAfterTheGrace checks SLUICE_NO_WORKER_GRACE:
// a job of a kind no live worker announces fails "capacity: no worker runs
// kind" once the grace has passed since the scheduler started, not before;
// a kind whose worker is live keeps waiting; a worker that goes away starts
// the grace for its kind.
func TestJobOfAKindNoWorkerRunsFailsAfterTheGrace(t *testing.T) {
	t.Parallel()
	const grace = time.Minute
	clock := clocktest.New()
	b := setupClock(t, Config{RetryInterval: retry, ClaimTTL: 5 * time.Second, OfferTimeout: 200 * time.Millisecond, NoWorkerGrace: grace}, clock.Now)

	nobody := b.admit(time.Hour) // kind "sleep": nobody announces it yet
	s := b.handle(nobody)
	require.True(t, s.Retry, "within the grace the job overflows as usual")
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
	require.True(t, b.handle(waiting).Retry)
	require.Equal(t, contracts.StatePending, b.get(waiting.ID).State)

	// It leaves: the grace starts then.
	b.roster.Observe(contracts.Announce{WorkerID: "w1", Kinds: []string{"sleep"}, Leaving: true})
	clock.Advance(grace / 2)
	require.True(t, b.handle(waiting).Retry, "half the grace after the worker left")
	clock.Advance(grace / 2)
	require.Equal(t, consume.Ack(), b.handle(waiting))
	require.Equal(t, contracts.StateFailed, b.get(waiting.ID).State)
}
