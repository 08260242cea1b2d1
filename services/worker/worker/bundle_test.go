package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/bus/bustest"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/worker"
)

// waitFor bounds every wait for something the worker should do soon.
const waitFor = 10 * time.Second

// bundle is one test's world: an embedded NATS server, a connection for
// the fake scheduler and one for the worker.
type bundle struct {
	t     *testing.T
	nc    *nats.Conn // the fake scheduler's
	js    jetstream.JetStream
	wnc   *nats.Conn // the worker's
	wjs   jetstream.JetStream
	sched *fakeScheduler
	reg   *prometheus.Registry

	consMu    sync.Mutex
	consumers map[string]jetstream.Consumer
	// results holds the results of a batch message not handed out yet.
	results []contracts.Result
}

func setup(t *testing.T) *bundle {
	t.Helper()
	connect := bustest.Start(t).Connect
	b := &bundle{t: t, reg: prometheus.NewRegistry(), consumers: map[string]jetstream.Consumer{}}
	b.nc, b.js = connect("fake-scheduler")
	b.wnc, b.wjs = connect("worker")
	b.sched = newFakeScheduler(t, b.nc)
	return b
}

// testConfig is a worker configuration with fast timings, no built-ins
// and a scratch root of the test's own.
func testConfig(t testing.TB, id string) worker.Config {
	c := worker.DefaultConfig()
	c.ScratchDir, c.CacheDir = t.TempDir(), t.TempDir()
	c.WorkerID = id
	c.Kinds = nil
	c.HeartbeatInterval = 50 * time.Millisecond
	c.StaleThreshold = 10 * time.Second // self-fencing has its own tests
	c.ShutdownTimeout = 5 * time.Second
	return c
}

// running is a worker whose Run goroutine the test owns.
type running struct {
	w      *worker.Worker
	cancel context.CancelFunc
	done   chan error
}

// newWorker builds a worker on the bundle's worker connection; now, when
// given, is its clock.
func (b *bundle) newWorker(cfg worker.Config, now ...func() time.Time) *worker.Worker {
	b.t.Helper()
	return b.newWorkerWith(cfg, func(d *worker.Deps) {
		if len(now) > 0 {
			d.Now = now[0]
		}
	})
}

// newWorkerWith builds a worker on the bundle's worker connection with
// the dependencies edit changes.
func (b *bundle) newWorkerWith(cfg worker.Config, edit func(*worker.Deps)) *worker.Worker {
	b.t.Helper()
	log := zerolog.New(zerolog.NewTestWriter(b.t)).Level(zerolog.InfoLevel).Hook(zerolog.HookFunc(func(e *zerolog.Event, _ zerolog.Level, _ string) {
		e.Str("t", time.Now().Format("15:04:05.000"))
	}))
	d := worker.Deps{NC: b.wnc, JS: b.wjs, Log: log, Registry: b.reg}
	edit(&d)
	w, err := worker.New(cfg, d)
	require.NoError(b.t, err)
	return w
}

// run starts w and waits for its first announcement. Cleanup stops it
// and requires Run to return nil.
func (b *bundle) run(w *worker.Worker) *running {
	b.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{w: w, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx) }()
	b.t.Cleanup(func() {
		cancel()
		select {
		case err := <-r.done:
			require.NoError(b.t, err)
			r.done <- err // let later readers see it too
		case <-time.After(30 * time.Second):
			b.t.Error("worker did not stop")
		}
	})
	b.sched.waitAnnounce(func(a contracts.Announce) bool { return a.WorkerID == w.ID() })
	return r
}

// start is newWorker plus run.
func (b *bundle) start(cfg worker.Config, handlers map[string]worker.Handler, now ...func() time.Time) *running {
	b.t.Helper()
	w := b.newWorker(cfg, now...)
	for kind, h := range handlers {
		require.NoError(b.t, w.Handle(kind, h))
	}
	return b.run(w)
}

// wait waits for Run to return and gives its error.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(waitFor):
		t.Fatal("Run did not return")
		return nil
	}
}

// spec is an offered job.
func spec(id, kind string, attempt int64, payload string) contracts.JobSpec {
	s := contracts.JobSpec{ID: id, Tenant: "t1", Kind: kind, Claim: attempt}
	if payload != "" {
		s.Payload = json.RawMessage(payload)
	}
	return s
}

// offerRaw sends raw bytes as an offer and decodes the answer.
func (b *bundle) offerRaw(workerID string, data []byte) contracts.OfferReply {
	b.t.Helper()
	msg, err := b.nc.Request(contracts.WorkerOfferSubject(workerID), data, waitFor)
	require.NoError(b.t, err)
	reply, err := contracts.DecodeOfferReply(msg.Data)
	require.NoError(b.t, err)
	require.Equal(b.t, workerID, reply.WorkerID)
	return reply
}

// offer offers a job and returns the answer.
func (b *bundle) offer(workerID string, s contracts.JobSpec) contracts.OfferReply {
	b.t.Helper()
	data, err := json.Marshal(contracts.Offer{Job: s})
	require.NoError(b.t, err)
	return b.offerRaw(workerID, data)
}

// consumer returns the durable consumer of subject, creating the stream
// and the consumer when needed.
func (b *bundle) consumer(name, subject string) jetstream.Consumer {
	b.t.Helper()
	b.consMu.Lock()
	defer b.consMu.Unlock()
	if c, ok := b.consumers[name]; ok {
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	c, err := bus.EnsureConsumer(ctx, b.js, bus.ConsumerConfig(name, 30*time.Second, subject))
	require.NoError(b.t, err)
	b.consumers[name] = c
	return c
}

// next fetches one message from a consumer, waiting up to wait.
func (b *bundle) next(c jetstream.Consumer, wait time.Duration) (jetstream.Msg, bool) {
	b.t.Helper()
	msg, err := c.Next(jetstream.FetchMaxWait(wait))
	if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return nil, false
	}
	require.NoError(b.t, err)
	require.NoError(b.t, msg.Ack())
	return msg, true
}

// nextResult waits for the next result on the stream (one message may
// carry several).
func (b *bundle) nextResult() contracts.Result {
	b.t.Helper()
	if len(b.results) == 0 {
		msg, ok := b.next(b.consumer(contracts.ConsumerResult, contracts.ResultSubjects), waitFor)
		require.True(b.t, ok, "no result arrived")
		var err error
		b.results, err = contracts.DecodeResults(msg.Data())
		require.NoError(b.t, err)
		for _, r := range b.results {
			require.Equal(b.t, contracts.ResultSubject(r.WorkerID), msg.Subject(), "a worker reports on its own subject")
		}
	}
	res := b.results[0]
	b.results = b.results[1:]
	return res
}

// noResult asserts that no result arrives within wait.
func (b *bundle) noResult(wait time.Duration) {
	b.t.Helper()
	require.Empty(b.t, b.results, "unexpected results")
	msg, ok := b.next(b.consumer(contracts.ConsumerResult, contracts.ResultSubjects), wait)
	if ok {
		b.t.Fatalf("unexpected result: %s", msg.Data())
	}
}

// nextRequeue waits for the next requeue on the stream.
func (b *bundle) nextRequeue() contracts.Requeue {
	b.t.Helper()
	msg, ok := b.next(b.consumer(contracts.ConsumerRequeue, contracts.WorkerRequeueSubjects), waitFor)
	require.True(b.t, ok, "no requeue arrived")
	_, own := contracts.ReportingWorker(msg.Subject())
	require.True(b.t, own, "a worker requeues on its own subject: %s", msg.Subject())
	rq, err := contracts.DecodeRequeue(msg.Data())
	require.NoError(b.t, err)
	return rq
}

// find finds one series of a family in the bundle's registry: the first
// whose labels agree with labels; nil when absent.
func (b *bundle) find(name string, labels map[string]string) *dto.Metric {
	b.t.Helper()
	families, err := b.reg.Gather()
	require.NoError(b.t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue series
				}
			}
			return m
		}
	}
	return nil
}

// metric reads one counter or gauge series; 0 when absent.
func (b *bundle) metric(name string, labels map[string]string) float64 {
	b.t.Helper()
	m := b.find(name, labels)
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	}
	return 0
}

// fakeScheduler answers heartbeats the way the test says and records what
// the worker sends.
type fakeScheduler struct {
	t          *testing.T
	mu         sync.Mutex
	heartbeats []contracts.Heartbeat
	acked      map[contracts.Lease]int // leases acknowledged (not lost), how often
	announces  []contracts.Announce
	// answer decides the ack for a heartbeat; false means no reply at all.
	answer func(hb contracts.Heartbeat) (contracts.HeartbeatAck, bool)
}

func newFakeScheduler(t *testing.T, nc *nats.Conn) *fakeScheduler {
	t.Helper()
	f := &fakeScheduler{t: t, acked: map[contracts.Lease]int{}}
	_, err := nc.QueueSubscribe(contracts.HeartbeatSubjects, contracts.QueueScheduler, f.onHeartbeat)
	require.NoError(t, err)
	_, err = nc.Subscribe(contracts.AnnounceSubjects, func(m *nats.Msg) {
		a, err := contracts.DecodeAnnounce(m.Data)
		if err != nil {
			t.Errorf("bad announce %s: %v", m.Data, err)
			return
		}
		if m.Subject != contracts.AnnounceSubject(a.WorkerID) {
			t.Errorf("worker %s announced on %s", a.WorkerID, m.Subject)
		}
		f.mu.Lock()
		f.announces = append(f.announces, a)
		f.mu.Unlock()
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	return f
}

func (f *fakeScheduler) onHeartbeat(m *nats.Msg) {
	hb, err := contracts.DecodeHeartbeat(m.Data)
	if err != nil {
		f.t.Errorf("bad heartbeat %s: %v", m.Data, err)
		return
	}
	if m.Subject != contracts.HeartbeatSubject(hb.WorkerID) {
		f.t.Errorf("worker %s sent a heartbeat on %s", hb.WorkerID, m.Subject)
	}
	f.mu.Lock()
	answer := f.answer
	f.mu.Unlock()
	ack, reply := contracts.HeartbeatAck{}, true
	if answer != nil {
		ack, reply = answer(hb)
	}
	f.mu.Lock()
	f.heartbeats = append(f.heartbeats, hb)
	if reply {
		for _, l := range hb.Leases {
			if !slices.Contains(ack.Lost, l) {
				f.acked[l]++
			}
		}
	}
	f.mu.Unlock()
	if !reply {
		return
	}
	data, err := json.Marshal(ack)
	if err != nil {
		f.t.Errorf("encode ack: %v", err)
		return
	}
	_ = m.Respond(data)
}

// setAnswer replaces how heartbeats are answered.
func (f *fakeScheduler) setAnswer(fn func(hb contracts.Heartbeat) (contracts.HeartbeatAck, bool)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer = fn
}

// ackedCount says how often a lease was acknowledged.
func (f *fakeScheduler) ackedCount(l contracts.Lease) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.acked[l]
}

// heartbeatsFor counts the heartbeats that carried a lease.
func (f *fakeScheduler) heartbeatsFor(l contracts.Lease) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, hb := range f.heartbeats {
		if slices.Contains(hb.Leases, l) {
			n++
		}
	}
	return n
}

// heartbeatsSoFar returns a copy of every heartbeat received so far, in
// order.
func (f *fakeScheduler) heartbeatsSoFar() []contracts.Heartbeat {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.heartbeats)
}

// announcements returns a copy of every announcement so far.
func (f *fakeScheduler) announcements() []contracts.Announce {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.announces)
}

// waitAnnounce waits for an announcement matching pred and returns it.
func (f *fakeScheduler) waitAnnounce(pred func(contracts.Announce) bool) contracts.Announce {
	f.t.Helper()
	var found contracts.Announce
	require.Eventually(f.t, func() bool {
		for _, a := range f.announcements() {
			if pred(a) {
				found = a
				return true
			}
		}
		return false
	}, waitFor, 5*time.Millisecond, "announcement never seen")
	return found
}

// lostFor answers every heartbeat, reporting lease l lost.
func lostFor(l contracts.Lease) func(contracts.Heartbeat) (contracts.HeartbeatAck, bool) {
	return func(hb contracts.Heartbeat) (contracts.HeartbeatAck, bool) {
		if slices.Contains(hb.Leases, l) {
			return contracts.HeartbeatAck{Lost: []contracts.Lease{l}}, true
		}
		return contracts.HeartbeatAck{}, true
	}
}

// blocking is a handler that signals when it starts and returns when
// released (with its result) or when its ctx ends (with ctx's error).
type blocking struct {
	started chan worker.Job
	release chan struct{}
	ended   chan error // the cause the handler's ctx ended with, or nil when released
}

func newBlocking() *blocking {
	return &blocking{started: make(chan worker.Job, 16), release: make(chan struct{}), ended: make(chan error, 16)}
}

func (h *blocking) handle(ctx context.Context, job worker.Job) (worker.Result, error) {
	h.started <- job
	select {
	case <-h.release:
		h.ended <- nil
		return worker.JSON(map[string]string{"job": job.ID})
	case <-ctx.Done():
		h.ended <- context.Cause(ctx)
		return nil, fmt.Errorf("stopped: %w", ctx.Err())
	}
}

// waitStarted waits for the handler to start a job.
func (h *blocking) waitStarted(t *testing.T) worker.Job {
	t.Helper()
	select {
	case j := <-h.started:
		return j
	case <-time.After(waitFor):
		t.Fatal("handler did not start")
		return worker.Job{}
	}
}

// waitEnded waits for the handler to return and gives the cause.
func (h *blocking) waitEnded(t *testing.T) error {
	t.Helper()
	select {
	case err := <-h.ended:
		return err
	case <-time.After(waitFor):
		t.Fatal("handler did not return")
		return nil
	}
}

func zerologNop() zerolog.Logger { return zerolog.Nop() }
