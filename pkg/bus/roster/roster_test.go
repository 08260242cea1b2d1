package roster_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/pkg/observe/clocktest"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sluicehq/sluice/pkg/bus/bustest"
	"github.com/sluicehq/sluice/pkg/bus/roster"
	"github.com/sluicehq/sluice/pkg/contracts"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// clock is a settable time source.
func ids(ws []contracts.WorkerInfo) []string {
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.ID)
	}
	return out
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestNewNilClockUsesTimeNow(t *testing.T) {
	t.Parallel()
	r := roster.New(nil)
	before := time.Now()
	r.Observe(contracts.Announce{WorkerID: "w1"})
	w, ok := r.Get("w1")
	require.True(t, ok)
	assert.False(t, w.SeenAt.Before(before))
	assert.False(t, w.SeenAt.After(time.Now()))
}

func TestObserveAndWorkers(t *testing.T) {
	t.Parallel()
	c := clocktest.New()
	r := roster.New(c.Now)
	assert.Empty(t, r.Workers())

	kinds := []string{"email", "resize"}
	r.Observe(contracts.Announce{WorkerID: "w3", Kinds: kinds, Capacity: 4, InFlight: 1, IntervalMS: 1000})
	r.Observe(contracts.Announce{WorkerID: "w1", Capacity: 0, Draining: true, IntervalMS: 1000})
	r.Observe(contracts.Announce{WorkerID: "w2", Kinds: []string{"email"}, Capacity: 2, InFlight: 2, IntervalMS: 1000})
	kinds[0] = "changed" // the roster keeps its own copy

	ws := r.Workers()
	require.Equal(t, []string{"w1", "w2", "w3"}, ids(ws))
	assert.Equal(t, contracts.WorkerInfo{ID: "w3", Kinds: []string{"email", "resize"}, Capacity: 4, InFlight: 1, SeenAt: c.Now()}, ws[2])
	assert.Equal(t, contracts.WorkerInfo{ID: "w1", Draining: true, SeenAt: c.Now()}, ws[0])

	// A later announcement replaces the figures and the time seen.
	c.Advance(time.Second)
	r.Observe(contracts.Announce{WorkerID: "w3", Kinds: []string{"email"}, Capacity: 8, InFlight: 5, IntervalMS: 1000})
	w, ok := r.Get("w3")
	require.True(t, ok)
	assert.Equal(t, contracts.WorkerInfo{ID: "w3", Kinds: []string{"email"}, Capacity: 8, InFlight: 5, SeenAt: c.Now()}, w)

	_, ok = r.Get("nobody")
	assert.False(t, ok)
}

func TestWorkersSortedByID(t *testing.T) {
	t.Parallel()
	r := roster.New(clocktest.New().Now)
	for _, id := range []string{"m", "b", "z", "a", "B", "a1", "0"} {
		r.Observe(contracts.Announce{WorkerID: id})
	}
	assert.Equal(t, []string{"0", "B", "a", "a1", "b", "m", "z"}, ids(r.Workers()))
}

func TestExpiryAfterThreeIntervals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		intervalMS int64
		life       time.Duration
	}{
		{"announced interval", 2000, 6 * time.Second},
		{"default interval", 0, 15 * time.Second},
		{"negative interval uses the default", -5, 15 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := clocktest.New()
			r := roster.New(c.Now)
			r.Observe(contracts.Announce{WorkerID: "w1", IntervalMS: tt.intervalMS})
			r.Observe(contracts.Announce{WorkerID: "w2", IntervalMS: 1_000_000})

			c.Advance(tt.life) // exactly three intervals: still alive
			_, ok := r.Get("w1")
			assert.True(t, ok)
			assert.Equal(t, []string{"w1", "w2"}, ids(r.Workers()))

			c.Advance(time.Nanosecond)
			_, ok = r.Get("w1")
			assert.False(t, ok)
			assert.Equal(t, []string{"w2"}, ids(r.Workers()))
		})
	}
}

func TestAnnouncementRenewsLiveness(t *testing.T) {
	t.Parallel()
	c := clocktest.New()
	r := roster.New(c.Now)
	r.Observe(contracts.Announce{WorkerID: "w1", IntervalMS: 1000})
	c.Advance(2 * time.Second)
	r.Observe(contracts.Announce{WorkerID: "w1", IntervalMS: 1000})
	c.Advance(2 * time.Second) // 4s after the first, 2s after the last
	_, ok := r.Get("w1")
	assert.True(t, ok)
	c.Advance(1*time.Second + time.Nanosecond)
	_, ok = r.Get("w1")
	assert.False(t, ok)

	// An expired worker that announces again is back.
	r.Observe(contracts.Announce{WorkerID: "w1", IntervalMS: 1000})
	assert.Equal(t, []string{"w1"}, ids(r.Workers()))
}

func TestLoadUpdatesWithoutRenewing(t *testing.T) {
	t.Parallel()
	c := clocktest.New()
	r := roster.New(c.Now)
	r.Observe(contracts.Announce{WorkerID: "w1", Capacity: 4, InFlight: 1, IntervalMS: 1000})
	seen := c.Now()

	c.Advance(2 * time.Second)
	r.Load("w1", 3, 5, nil, 0)
	w, ok := r.Get("w1")
	require.True(t, ok)
	assert.Equal(t, 3, w.InFlight)
	assert.Equal(t, 5, w.Capacity)
	assert.Equal(t, seen, w.SeenAt)

	c.Advance(time.Second + time.Nanosecond) // 3 intervals after the announcement
	_, ok = r.Get("w1")
	assert.False(t, ok, "Load must not renew liveness")

	r.Load("ghost", 1, 1, nil, 0) // unknown: nothing happens
	_, ok = r.Get("ghost")
	assert.False(t, ok)
}

// TestLoadReportsKeepTheNewest: an offer reply and an announcement reach
// the roster by different routes, so the older can arrive last. Numbered
// reports (Seq) are taken only when newer than the last one taken, whichever
// route each came by; an older announcement still renews the worker.
func TestLoadReportsKeepTheNewest(t *testing.T) {
	t.Parallel()
	c := clocktest.New()
	r := roster.New(c.Now)
	inFlight := func() int {
		w, ok := r.Get("w1")
		require.True(t, ok)
		return w.InFlight
	}
	r.Observe(contracts.Announce{WorkerID: "w1", Kinds: []string{"k"}, Capacity: 1, InFlight: 0, IntervalMS: 1000, Seq: 10})

	// The job it accepted (seq 11) already ended (12), and the announcement
	// saying so arrived before the reply of the acceptance.
	r.Observe(contracts.Announce{WorkerID: "w1", Kinds: []string{"k"}, Capacity: 1, InFlight: 0, IntervalMS: 1000, Seq: 12})
	r.Load("w1", 1, 1, nil, 11)
	require.Equal(t, 0, inFlight(), "an older reply must not make an idle worker look full")
	count := 0
	r.Open("k", func(contracts.WorkerInfo) bool { count++; return true })
	require.Equal(t, 1, count, "the worker stays open")

	// A newer reply is taken; an older announcement then renews the worker
	// without undoing it.
	r.Load("w1", 1, 1, nil, 13)
	require.Equal(t, 1, inFlight())
	c.Advance(2 * time.Second)
	r.Observe(contracts.Announce{WorkerID: "w1", Kinds: []string{"k"}, Capacity: 1, InFlight: 0, IntervalMS: 1000, Seq: 12})
	require.Equal(t, 1, inFlight())
	c.Advance(2 * time.Second) // 4 s after seq 10's announcement: renewed by the older one
	require.Equal(t, 1, inFlight())

	// A worker restarted after its clock was set back numbers its reports
	// far below the old process's: they are taken, not held for older.
	const before, after = 1 << 40, 1<<40 - 1<<21
	r.Load("w1", 1, 1, nil, before)
	r.Observe(contracts.Announce{WorkerID: "w1", Kinds: []string{"k"}, Capacity: 1, InFlight: 0, IntervalMS: 1000, Seq: after})
	require.Equal(t, 0, inFlight(), "a new process's first announcement is taken")
	r.Load("w1", 1, 1, nil, after+1)
	require.Equal(t, 1, inFlight())
	r.Load("w1", 0, 1, nil, after)
	require.Equal(t, 1, inFlight(), "and its own older reports are older again")

	// Unnumbered reports (workers that send no Seq) are always taken.
	r.Load("w1", 0, 1, nil, 0)
	require.Equal(t, 0, inFlight())
	r.Observe(contracts.Announce{WorkerID: "w1", Kinds: []string{"k"}, Capacity: 1, InFlight: 1, IntervalMS: 1000})
	require.Equal(t, 1, inFlight())
}

func TestLeavingAnnouncementRemoves(t *testing.T) {
	t.Parallel()
	r := roster.New(clocktest.New().Now)
	r.Observe(contracts.Announce{WorkerID: "w1"})
	r.Observe(contracts.Announce{WorkerID: "w2"})
	r.Observe(contracts.Announce{WorkerID: "w1", Leaving: true, Capacity: 4})
	_, ok := r.Get("w1")
	assert.False(t, ok)
	assert.Equal(t, []string{"w2"}, ids(r.Workers()))

	r.Observe(contracts.Announce{WorkerID: "w9", Leaving: true}) // never known
	assert.Equal(t, []string{"w2"}, ids(r.Workers()))
}

func TestRemove(t *testing.T) {
	t.Parallel()
	r := roster.New(clocktest.New().Now)
	r.Observe(contracts.Announce{WorkerID: "w1"})
	r.Observe(contracts.Announce{WorkerID: "w2"})
	r.Remove("w1")
	_, ok := r.Get("w1")
	assert.False(t, ok)
	assert.Equal(t, []string{"w2"}, ids(r.Workers()))
	r.Remove("w1")
	r.Remove("nobody")
	assert.Equal(t, []string{"w2"}, ids(r.Workers()))

	// A removed worker is back on its next announcement.
	r.Observe(contracts.Announce{WorkerID: "w1"})
	assert.Equal(t, []string{"w1", "w2"}, ids(r.Workers()))
}

func TestChanged(t *testing.T) {
	t.Parallel()
	c := clocktest.New()
	r := roster.New(c.Now)
	steps := []struct {
		name    string
		do      func()
		changes bool
	}{
		{"worker appears", func() { r.Observe(contracts.Announce{WorkerID: "w1", Capacity: 2, IntervalMS: 1000}) }, true},
		{"second worker appears", func() { r.Observe(contracts.Announce{WorkerID: "w2", IntervalMS: 1000}) }, true},
		{"re-announcement with a new load", func() { r.Observe(contracts.Announce{WorkerID: "w1", Capacity: 2, InFlight: 1, IntervalMS: 1000}) }, true},
		{"re-announcement of the same state", func() {
			c.Advance(500 * time.Millisecond)
			r.Observe(contracts.Announce{WorkerID: "w1", Capacity: 2, InFlight: 1, IntervalMS: 1000})
		}, false},
		{"new kinds", func() {
			r.Observe(contracts.Announce{WorkerID: "w1", Kinds: []string{"k"}, Capacity: 2, InFlight: 1, IntervalMS: 1000})
		}, true},
		{"draining", func() {
			r.Observe(contracts.Announce{WorkerID: "w1", Kinds: []string{"k"}, Capacity: 2, InFlight: 1, Draining: true, IntervalMS: 1000})
		}, true},
		{"undrained", func() {
			r.Observe(contracts.Announce{WorkerID: "w1", Kinds: []string{"k"}, Capacity: 2, InFlight: 1, IntervalMS: 1000})
		}, true},
		{"load changes", func() { r.Load("w1", 2, 2, nil, 0) }, true},
		{"capacity changes", func() { r.Load("w1", 2, 3, nil, 0) }, true},
		{"same load", func() { r.Load("w1", 2, 3, nil, 0) }, false},
		{"load of an unknown worker", func() { r.Load("ghost", 1, 1, nil, 0) }, false},
		{"reads", func() { r.Workers(); r.Get("w1"); r.Get("ghost") }, false},
		{"remove", func() { r.Remove("w2") }, true},
		{"remove an unknown worker", func() { r.Remove("w2") }, false},
		{"leaving", func() { r.Observe(contracts.Announce{WorkerID: "w1", Leaving: true}) }, true},
		{"leaving an unknown worker", func() { r.Observe(contracts.Announce{WorkerID: "w1", Leaving: true}) }, false},
		{"comes back", func() { r.Observe(contracts.Announce{WorkerID: "w1"}) }, true},
		{"expires and comes back the same", func() {
			c.Advance(time.Minute)
			r.Observe(contracts.Announce{WorkerID: "w1"})
		}, true},
	}
	for _, s := range steps {
		ch := r.Changed()
		require.False(t, closed(ch), "%s: channel closed before the step", s.name)
		s.do()
		assert.Equal(t, s.changes, closed(ch), "%s: channel closed", s.name)
		if s.changes {
			assert.False(t, closed(r.Changed()), "%s: the next channel is already closed", s.name)
		}
	}
}

func TestChangedWakesEveryWaiter(t *testing.T) {
	t.Parallel()
	r := roster.New(clocktest.New().Now)
	ch := r.Changed()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { <-ch })
	}
	r.Observe(contracts.Announce{WorkerID: "w1"})
	wg.Wait()
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	r := roster.New(clocktest.New().Now)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			id := string(rune('a' + i))
			for j := range 100 {
				r.Observe(contracts.Announce{WorkerID: id, InFlight: j})
				r.Load(id, j+1, 10, nil, 0)
				r.Workers()
				r.Get(id)
				_ = r.Changed()
				if j%10 == 0 {
					r.Remove(id)
				}
			}
		})
	}
	wg.Wait()
}

// startNATS runs an in-process NATS server for one test.
func startNATS(t *testing.T) *server.Server {
	t.Helper()
	return bustest.Start(t).NS
}

func connect(t *testing.T, ns *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// publish publishes v (encoded unless it is []byte) on worker's announce
// subject.
func publish(t *testing.T, nc *nats.Conn, worker string, v any) {
	t.Helper()
	data, ok := v.([]byte)
	if !ok {
		var err error
		data, err = json.Marshal(v)
		require.NoError(t, err)
	}
	require.NoError(t, nc.Publish(contracts.AnnounceSubject(worker), data))
	require.NoError(t, nc.Flush())
}

// waitChanged waits for the roster to change, failing after a while.
func waitChanged(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("the roster did not change")
	}
}

func TestSubscribe(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	nc := connect(t, ns)     // the roster's connection
	worker := connect(t, ns) // a worker's connection

	discover, err := worker.SubscribeSync(contracts.SubjectDiscover)
	require.NoError(t, err)
	require.NoError(t, worker.Flush())

	r := roster.New(nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	require.NoError(t, r.Subscribe(ctx, nc))

	// Subscribing asks every worker to announce itself.
	msg, err := discover.NextMsg(5 * time.Second)
	require.NoError(t, err)
	assert.Equal(t, contracts.SubjectDiscover, msg.Subject)

	// A valid announcement appears in the roster.
	ch := r.Changed()
	publish(t, worker, "w1", contracts.Announce{WorkerID: "w1", Kinds: []string{"email"}, Capacity: 4, InFlight: 1, IntervalMS: 60_000})
	waitChanged(t, ch)
	got, ok := r.Get("w1")
	require.True(t, ok)
	assert.Equal(t, []string{"email"}, got.Kinds)
	assert.Equal(t, 4, got.Capacity)
	assert.Equal(t, 1, got.InFlight)

	// Malformed announcements are ignored. Messages from one connection
	// arrive in order, so once w2 is in, the bad ones were handled.
	ch = r.Changed()
	publish(t, worker, "w1", []byte(`not json`))
	publish(t, worker, "w1", []byte(`{"worker_id":"bad id","capacity":1}`))
	publish(t, worker, "w9", []byte(`{"worker_id":"w9","capacity":-1}`))
	publish(t, worker, "w8", []byte(`{"worker_id":"w8","surprise":true}`))
	// Announcements on another worker's subject, or on the shared subject
	// of earlier releases, name nobody: ignored.
	publish(t, worker, "w2", contracts.Announce{WorkerID: "w1", Leaving: true})
	publish(t, worker, "w2", contracts.Announce{WorkerID: "w7", IntervalMS: 60_000})
	shared, err := json.Marshal(contracts.Announce{WorkerID: "w6", IntervalMS: 60_000})
	require.NoError(t, err)
	require.NoError(t, worker.Publish("sluice.worker.announce", shared))
	publish(t, worker, "w1", []byte(`{"worker_id":"w1","leaving":true}]`))
	publish(t, worker, "w2", contracts.Announce{WorkerID: "w2", IntervalMS: 60_000})
	waitChanged(t, ch)
	require.Eventually(t, func() bool { _, ok := r.Get("w2"); return ok }, 5*time.Second, time.Millisecond)
	assert.Equal(t, []string{"w1", "w2"}, ids(r.Workers()))

	// A leaving announcement removes the worker.
	ch = r.Changed()
	publish(t, worker, "w1", contracts.Announce{WorkerID: "w1", Leaving: true})
	waitChanged(t, ch)
	assert.Equal(t, []string{"w2"}, ids(r.Workers()))

	// Cancelling ctx ends the subscription.
	cancel()
	require.Eventually(t, func() bool { return nc.NumSubscriptions() == 0 }, 5*time.Second, time.Millisecond)
	publish(t, worker, "w3", contracts.Announce{WorkerID: "w3", IntervalMS: 60_000})
	require.NoError(t, nc.Flush())
	_, ok = r.Get("w3")
	assert.False(t, ok)
	assert.Equal(t, []string{"w2"}, ids(r.Workers()))
}

func TestSubscribeOnClosedConnection(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	nc := connect(t, ns)
	nc.Close()
	err := roster.New(nil).Subscribe(t.Context(), nc)
	require.Error(t, err)
	assert.ErrorIs(t, err, nats.ErrConnectionClosed)
}

// TestResourcesFromLoadReports: the roster keeps a worker's capacity,
// free resources and kind defaults from its announcements, and its free
// resources from its offer replies, the newest report's.
func TestResourcesFromLoadReports(t *testing.T) {
	t.Parallel()
	r := roster.New(clocktest.New().Now)
	capacity, free := contracts.Resources{CPU: 2, Memory: 4 << 30}, contracts.Resources{CPU: 1, Memory: 3 << 30}
	kinds := map[string]contracts.Resources{"enc": {CPU: 2}}
	changed := r.Changed()
	r.Observe(contracts.Announce{WorkerID: "w1", Capacity: 2, IntervalMS: 1000, Resources: &capacity, FreeResources: &capacity,
		KindResources: kinds, Seq: 10})
	<-changed
	changed = r.Changed()
	r.Observe(contracts.Announce{WorkerID: "w1", Capacity: 2, IntervalMS: 1000, Resources: &capacity, FreeResources: &free,
		KindResources: kinds, Seq: 11})
	select {
	case <-changed:
	default:
		t.Fatal("a change of free resources wakes the dispatchers")
	}
	w, ok := r.Get("w1")
	require.True(t, ok)
	assert.Equal(t, &capacity, w.Resources)
	assert.Equal(t, &free, w.FreeResources)
	assert.Equal(t, kinds, w.KindResources)

	none := contracts.Resources{}
	r.Load("w1", 2, 2, &none, 12)
	w, _ = r.Get("w1")
	assert.Equal(t, &none, w.FreeResources, "an offer reply's free resources")
	r.Observe(contracts.Announce{WorkerID: "w1", Capacity: 2, IntervalMS: 1000, Resources: &capacity, FreeResources: &free, Seq: 11})
	w, _ = r.Get("w1")
	assert.Equal(t, &none, w.FreeResources, "an older announcement does not undo the newer reply")
	r.Load("w1", 2, 2, nil, 13)
	w, _ = r.Get("w1")
	assert.Equal(t, &none, w.FreeResources, "a reply without resources keeps them")
}
