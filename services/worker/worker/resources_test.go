package worker_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/services/worker/internal/limit"
	"github.com/sluicehq/sluice/services/worker/worker"
)

// gates is a handler whose jobs each run until the test opens their gate.
type gates struct {
	mu      sync.Mutex
	open    map[string]chan struct{}
	started chan string
}

func newGates() *gates {
	return &gates{open: map[string]chan struct{}{}, started: make(chan string, 16)}
}

func (g *gates) gate(id string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.open[id]
	if !ok {
		c = make(chan struct{})
		g.open[id] = c
	}
	return c
}

func (g *gates) handle(ctx context.Context, job worker.Job) (worker.Result, error) {
	g.started <- job.ID
	select {
	case <-g.gate(job.ID):
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// finish lets job id end and waits for its result: its resources are
// free again once the result is out.
func (g *gates) finish(b *bundle, id string) {
	b.t.Helper()
	close(g.gate(id))
	require.Equal(b.t, id, b.nextResult().JobID)
}

// withCPU is an offered job that declares cpu cores.
func withCPU(id string, cpu float64) contracts.JobSpec {
	s := spec(id, "gate", 1, "")
	s.Resources = &contracts.Resources{CPU: cpu}
	return s
}

// TestResourcesBoundWhatAWorkerTakes: a 2-cpu worker (whose count of
// slots is no bound) takes two 1-cpu jobs or one 2-cpu job, but never a
// 2-cpu job beside a 1-cpu one; a job larger than the whole worker is
// refused.
func TestResourcesBoundWhatAWorkerTakes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := newGates()
	cfg := testConfig(t, "w-res")
	cfg.MaxConcurrent = 8
	cfg.CPU, cfg.Memory = 2, "1GiB"
	b.start(cfg, map[string]worker.Handler{"gate": g.handle})

	// Two 1-cpu jobs, then no third.
	require.Equal(t, contracts.OfferAccepted, b.offer("w-res", withCPU("a", 1)).Status)
	require.Equal(t, contracts.OfferAccepted, b.offer("w-res", withCPU("b", 1)).Status)
	third := b.offer("w-res", withCPU("c", 1))
	require.Equal(t, contracts.OfferBusy, third.Status)
	require.Contains(t, third.Reason, "needs cpu=1")
	require.Equal(t, &contracts.Resources{Memory: 1 << 30 * 6 / 8}, third.FreeResources, "no cpu left; memory less two slots' shares")
	g.finish(b, "a")
	g.finish(b, "b")

	// One 2-cpu job, then not even a 1-cpu one.
	require.Equal(t, contracts.OfferAccepted, b.offer("w-res", withCPU("d", 2)).Status)
	require.Equal(t, contracts.OfferBusy, b.offer("w-res", withCPU("e", 1)).Status)
	g.finish(b, "d")

	// A 1-cpu job, then no 2-cpu job beside it.
	require.Equal(t, contracts.OfferAccepted, b.offer("w-res", withCPU("f", 1)).Status)
	require.Equal(t, contracts.OfferBusy, b.offer("w-res", withCPU("g", 2)).Status)
	g.finish(b, "f")
	require.Equal(t, contracts.OfferAccepted, b.offer("w-res", withCPU("g", 2)).Status, "it fits once the other left")
	g.finish(b, "g")

	// More than the worker has: refused, it never fits here.
	big := b.offer("w-res", withCPU("h", 3))
	require.Equal(t, contracts.OfferRefused, big.Status)
	require.Contains(t, big.Reason, "never fits here")
}

// TestResourcesInABatchOffer: a batch is taken job by job while they fit.
func TestResourcesInABatchOffer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := newGates()
	cfg := testConfig(t, "w-res-batch")
	cfg.MaxConcurrent = 0
	cfg.CPU, cfg.Memory = 2, "1GiB"
	b.start(cfg, map[string]worker.Handler{"gate": g.handle})
	data, err := json.Marshal(contracts.OfferBatch{Jobs: []contracts.JobSpec{withCPU("a", 1), withCPU("b", 2), withCPU("c", 1)}})
	require.NoError(t, err)
	reply := b.offerRaw("w-res-batch", data)
	var got []contracts.OfferStatus
	for _, r := range reply.Results {
		got = append(got, r.Status)
	}
	require.Equal(t, []contracts.OfferStatus{contracts.OfferAccepted, contracts.OfferBusy, contracts.OfferAccepted}, got)
	g.finish(b, "a")
	g.finish(b, "c")
}

// TestKindResourcesAreTheDefault: a job with no declaration takes its
// kind's default from SLUICE_WORKER_KIND_RESOURCES.
func TestKindResourcesAreTheDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := newGates()
	cfg := testConfig(t, "w-res-kind")
	cfg.MaxConcurrent = 0
	cfg.CPU, cfg.Memory = 2, "1GiB"
	cfg.KindResources = "gate:cpu=2,memory=100MiB"
	b.start(cfg, map[string]worker.Handler{"gate": g.handle})
	first := b.offer("w-res-kind", spec("a", "gate", 1, ""))
	require.Equal(t, contracts.OfferAccepted, first.Status)
	require.Equal(t, &contracts.Resources{Memory: 924 << 20}, first.FreeResources)
	require.Equal(t, "a", <-g.started)
	require.Equal(t, contracts.OfferBusy, b.offer("w-res-kind", spec("b", "gate", 1, "")).Status)
	g.finish(b, "a")
}

// fakeSampler is a Sampler the test sets; every Sample is signalled, so a
// test knows a reading was applied once the next one was taken.
type fakeSampler struct {
	mu    sync.Mutex
	m     limit.Measure
	cpu   float64 // added to CPUSeconds at every sample
	calls chan struct{}
}

func (f *fakeSampler) Sample() (limit.Measure, error) {
	f.mu.Lock()
	f.m.CPUSeconds += f.cpu
	m := f.m
	f.mu.Unlock()
	select {
	case f.calls <- struct{}{}: // a test is waiting (see settle)
	default:
	}
	return m, nil
}

func (f *fakeSampler) set(memory int64, cpuPerSample float64) {
	f.mu.Lock()
	f.m.Memory, f.cpu = memory, cpuPerSample
	f.mu.Unlock()
}

// settle waits until a reading taken after the last set was applied: the
// loop applies a reading before it takes the next, so the second call
// seen after set comes after the first one's reading was applied.
func (f *fakeSampler) settle(t *testing.T) {
	t.Helper()
	for range 3 {
		select {
		case <-f.calls:
		case <-time.After(waitFor):
			t.Fatal("the worker did not sample")
		}
	}
}

// TestMeasuredBackpressure: above its memory or CPU target, as its
// sampler measures, a worker answers busy whatever jobs declared; back
// under, it takes jobs again.
func TestMeasuredBackpressure(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := newGates()
	cfg := testConfig(t, "w-pressure")
	cfg.MaxConcurrent = 0
	cfg.CPU, cfg.Memory = 2, "1GiB"
	cfg.TargetMemory, cfg.TargetCPU = 0.8, 0.5
	cfg.SampleInterval = time.Millisecond
	s := &fakeSampler{calls: make(chan struct{})}
	w := b.newWorkerWith(cfg, func(d *worker.Deps) { d.Sampler = s })
	require.NoError(t, w.Handle("gate", g.handle))
	b.run(w)

	s.settle(t)
	require.Equal(t, contracts.OfferAccepted, b.offer("w-pressure", withCPU("a", 0.1)).Status)

	s.set(900<<20, 0) // 88 % of 1 GiB
	s.settle(t)
	busy := b.offer("w-pressure", withCPU("b", 0.1))
	require.Equal(t, contracts.OfferBusy, busy.Status)
	require.Contains(t, busy.Reason, "memory in use 88% is above its target 80%")
	require.Equal(t, 1.0, b.metric("sluice_worker_over_target", map[string]string{"worker_id": "w-pressure"}))

	s.set(100<<20, 1e6) // a million CPU seconds between two samples
	s.settle(t)
	busy = b.offer("w-pressure", withCPU("b", 0.1))
	require.Equal(t, contracts.OfferBusy, busy.Status)
	require.Contains(t, busy.Reason, "CPU in use")

	s.set(100<<20, 0)
	s.settle(t)
	require.Equal(t, contracts.OfferAccepted, b.offer("w-pressure", withCPU("b", 0.1)).Status)
	g.finish(b, "a")
	g.finish(b, "b")
}
