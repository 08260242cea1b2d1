package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluicehq/sluice/pkg/bus"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
)

// faults injects the profile's faults into a cluster and counts them.
type faults struct {
	c      *Cluster
	p      Profile
	st     store.Store
	client *http.Client
	rng    *lockedRand
	stale  *counterTotal
	// dispatched counts each scheduler's dispatches, to show that they
	// share the work.
	dispatched *counterTotal

	scrapeMu sync.Mutex // a scheduler's scrape and its kill do not interleave

	mu              sync.Mutex
	kills           map[string]int
	pendingAtDelete int
	exits           int
}

func (f *faults) count(name string) {
	f.mu.Lock()
	f.kills[name]++
	f.mu.Unlock()
}

// restart kill -9's p (scraping a scheduler's counters first) and starts
// it again after pause, unless p is a spawned worker: nothing restarts
// those (spawn.go), the schedulers ask for another when they need one.
// The caller holds p.
func (f *faults) restart(ctx context.Context, p *Proc, pause time.Duration) error {
	if p.metricsURL != "" {
		f.scrapeMu.Lock()
		f.scrapeOne(ctx, p)
		p.kill()
		f.stale.restarted(p.Name)
		f.dispatched.restarted(p.Name)
		f.scrapeMu.Unlock()
	} else {
		p.kill()
	}
	f.p.Logf("chaos: kill -9 %s", p.Name)
	f.count(p.Service)
	if p.transient {
		return nil
	}
	time.Sleep(pause)
	return p.start()
}

// randomKills kill -9's a random service (never NATS or the store: they
// have their own schedule) every KillEvery ±50% and restarts it after
// KillPause, until ctx ends.
func (f *faults) randomKills(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(f.rng.dur(f.p.KillEvery/2, f.p.KillEvery*3/2)):
		}
		procs := f.c.procs()
		victim := procs[f.rng.intN(len(procs))]
		if victim.transient && !victim.alive() {
			continue // a spawned worker that left or was killed: gone for good
		}
		if !victim.hold() {
			continue // frozen or being restarted: pick again next time
		}
		if err := f.restart(ctx, victim, f.p.KillPause); err != nil {
			f.p.Logf("chaos: restart %s: %v", victim.Name, err)
		}
		victim.unhold()
	}
}

// plannedFault is one fault of the timeline.
type plannedFault struct {
	at   time.Duration // from the start of the load
	kind string        // a service name (natsd, store) or faultStreamDelete, faultSigstop
}

// timeline spreads the profile's counted faults over the load: n faults of
// a kind at (i + phase) / n of the load, each kind with its own phase so
// they do not coincide.
func (p Profile) timeline(hasStore bool) []plannedFault {
	var out []plannedFault
	spread := func(n int, phase float64, kind string) {
		for i := range n {
			out = append(out, plannedFault{at: time.Duration((float64(i) + phase) / float64(n) * float64(p.Load)), kind: kind})
		}
	}
	spread(p.NATSRestarts, 0.5, "natsd")
	spread(p.StreamDeletes, 0.3, faultStreamDelete)
	spread(p.Sigstops, 0.7, faultSigstop)
	if hasStore {
		spread(p.StoreRestarts, 0.4, "store")
	}
	sort.Slice(out, func(i, k int) bool { return out[i].at < out[k].at })
	return out
}

// runTimeline applies every planned fault at its time (each in its own
// goroutine, so a long freeze delays nothing else) and returns when all
// are done. A fault not begun when loadCtx ends is dropped; one under way
// (a freeze) runs to its end unless ctx ends.
func (f *faults) runTimeline(loadCtx, ctx context.Context, start time.Time) {
	var wg sync.WaitGroup
	for _, pf := range f.p.timeline(f.c.StoreProc != nil) {
		wg.Go(func() {
			select {
			case <-loadCtx.Done():
				return
			case <-time.After(time.Until(start.Add(pf.at))):
			}
			// A fault whose target is busy (or NATS is down) is tried again.
			for try := 0; loadCtx.Err() == nil; try++ {
				err := f.apply(ctx, pf.kind)
				if err == nil {
					return
				}
				f.p.Logf("chaos: %s (try %d): %v", pf.kind, try+1, err)
				select {
				case <-loadCtx.Done():
				case <-time.After(time.Second):
				}
			}
		})
	}
	wg.Wait()
}

// apply performs one planned fault.
func (f *faults) apply(ctx context.Context, kind string) error {
	switch kind {
	case faultStreamDelete:
		return f.deleteStream(ctx)
	case faultSigstop:
		return f.sigstop(ctx)
	case "natsd":
		// One node at a time: a cluster keeps its quorum.
		return f.restartHeld(ctx, f.c.NATS[f.rng.intN(len(f.c.NATS))], f.p.KillPause)
	case "store":
		return f.restartHeld(ctx, f.c.StoreProc, f.p.StorePause)
	}
	return fmt.Errorf("chaos: unknown fault %q", kind)
}

// restartHeld holds p, then restarts it.
func (f *faults) restartHeld(ctx context.Context, p *Proc, pause time.Duration) error {
	if !p.hold() {
		return fmt.Errorf("chaos: %s is busy", p.Name)
	}
	defer p.unhold()
	if err := f.restart(ctx, p, pause); err != nil {
		return fmt.Errorf("chaos: restart %s: %w", p.Name, err)
	}
	return nil
}

// deleteStream deletes the job stream while jobs are pending (it waits up
// to 5 s for some), leaves it gone for StreamGap, then declares it again
// (unless a service already did: every publish re-creates a missing
// stream). Every message in it is lost; the reaper must find the jobs in
// the store.
func (f *faults) deleteStream(ctx context.Context) error {
	pending := -1
	for wait := time.Now().Add(5 * time.Second); ctx.Err() == nil; time.Sleep(50 * time.Millisecond) {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if counts, err := f.st.Stats(sctx); err == nil {
			pending = counts.ByState[contracts.StatePending]
		}
		cancel()
		if pending > 0 || time.Now().After(wait) {
			break
		}
	}
	// No NATS node is killed while the stream is deleted: a request to a
	// node that dies under it, or to a cluster electing a meta leader
	// because of it, times out and the fault would have to start over.
	held, err := f.holdNATS()
	if err != nil {
		return err
	}
	defer func() {
		for _, p := range held {
			p.unhold()
		}
	}()
	nc, err := nats.Connect(f.c.NATSURL, nats.Name("sluice-chaos"), nats.Timeout(2*time.Second), nats.NoReconnect())
	if err != nil {
		return fmt.Errorf("chaos: connect to nats: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("chaos: jetstream: %w", err)
	}
	// A cluster still electing a meta leader after an earlier NATS fault
	// (the machine is loaded) can take longer than a few seconds to answer;
	// the timeline tries again after a second, and the load goes on until
	// every planned fault is done (Profile.Overtime).
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var msgs uint64
	if s, err := js.Stream(dctx, contracts.StreamName); err == nil {
		if info, err := s.Info(dctx); err == nil {
			msgs = info.State.Msgs
		}
	}
	if err := js.DeleteStream(dctx, contracts.StreamName); err != nil {
		return fmt.Errorf("chaos: delete stream %s: %w", contracts.StreamName, err)
	}
	f.p.Logf("chaos: stream %s deleted (%d messages; %d jobs pending in the store)", contracts.StreamName, msgs, pending)
	f.mu.Lock()
	f.kills[faultStreamDelete]++
	f.pendingAtDelete += max(pending, 0)
	f.mu.Unlock()
	time.Sleep(f.p.StreamGap)
	if _, err := bus.EnsureStream(dctx, js); err != nil {
		f.p.Logf("chaos: re-create stream (the services will): %v", err)
	}
	return nil
}

// holdNATS holds every NATS node, or none when one is busy with another
// fault (a restart): the caller unholds the ones returned.
func (f *faults) holdNATS() ([]*Proc, error) {
	held := make([]*Proc, 0, len(f.c.NATS))
	for _, p := range f.c.NATS {
		if !p.hold() {
			for _, h := range held {
				h.unhold()
			}
			return nil, fmt.Errorf("chaos: %s is busy", p.Name)
		}
		held = append(held, p)
	}
	return held, nil
}

// sigstop freezes the worker running the most jobs with SIGSTOP for
// FreezeFor (past the stale threshold, so the reaper requeues its jobs and
// other workers take them), then resumes it with SIGCONT.
func (f *faults) sigstop(ctx context.Context) error {
	victim := f.busiestWorker(ctx)
	if victim == nil {
		return errors.New("chaos: sigstop: every worker is busy with another fault")
	}
	defer victim.unhold()
	if err := victim.freeze(); err != nil {
		return err
	}
	f.count(faultSigstop)
	f.p.Logf("chaos: SIGSTOP %s for %s", victim.Name, f.p.FreezeFor)
	t := time.NewTimer(f.p.FreezeFor)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	if err := victim.thaw(); err != nil {
		return err
	}
	f.p.Logf("chaos: SIGCONT %s", victim.Name)
	return nil
}

// busiestWorker holds and returns the worker with the most running jobs
// in the store (a random free one when none runs any), or nil.
func (f *faults) busiestWorker(ctx context.Context) *Proc {
	running := map[string]int{}
	if jobs, _, err := f.st.List(ctx, store.Query{State: contracts.StateRunning, Limit: 500}); err == nil {
		starts := f.c.workerStarts()
		for _, j := range jobs {
			if j.StartedAt != nil && !j.StartedAt.Before(starts[j.Worker]) {
				running[j.Worker]++
			}
		}
	}
	ws := f.c.workers()
	f.rng.shuffle(len(ws), func(i, k int) { ws[i], ws[k] = ws[k], ws[i] })
	sort.SliceStable(ws, func(i, k int) bool { return running[ws[i].workerID] > running[ws[k].workerID] })
	for _, w := range ws {
		if w.transient && !w.alive() {
			continue // a spawned worker that left
		}
		if w.hold() {
			return w
		}
	}
	return nil
}

// supervise restarts, like a process manager, any process that exited by
// itself, until ctx ends.
func (f *faults) supervise(ctx context.Context) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, p := range f.c.all() {
			if p.transient || p.alive() || !p.hold() {
				continue
			}
			if !p.alive() {
				f.p.Logf("chaos: %s exited by itself; restarting it", p.Name)
				if err := p.start(); err != nil {
					f.p.Logf("chaos: restart %s: %v", p.Name, err)
				}
				f.mu.Lock()
				f.exits++
				f.mu.Unlock()
			}
			p.unhold()
		}
	}
}

// scrape reads the schedulers' stale-result counters every second until
// ctx ends.
func (f *faults) scrape(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.scrapeAll(ctx)
	}
}

// scrapeAll reads every scheduler's counter once.
func (f *faults) scrapeAll(ctx context.Context) {
	for _, p := range f.c.procs() {
		if p.metricsURL == "" {
			continue
		}
		f.scrapeMu.Lock()
		f.scrapeOne(ctx, p)
		f.scrapeMu.Unlock()
	}
}

// scrapeOne reads p's counter; the caller holds scrapeMu.
func (f *faults) scrapeOne(ctx context.Context, p *Proc) {
	if !p.alive() {
		return
	}
	v, err := scrapeCounter(ctx, f.client, p.metricsURL, staleResultsSeries)
	if err == nil {
		f.stale.observe(p.Name, v)
	}
	if v, err := scrapeCounter(ctx, f.client, p.metricsURL, dispatchedSeries); err == nil {
		f.dispatched.observe(p.Name, v)
	}
}

// lockedRand is a seeded random source safe for concurrent use.
type lockedRand struct {
	mu  sync.Mutex
	rng *rand.Rand
}

func newLockedRand(seed uint64) *lockedRand {
	return &lockedRand{rng: rand.New(rand.NewPCG(seed, seed^0x5eed))}
}

// dur is uniform in [lo, hi).
func (r *lockedRand) dur(lo, hi time.Duration) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(r.rng.Int64N(int64(hi-lo)))
}

func (r *lockedRand) intN(n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rng.IntN(n)
}

func (r *lockedRand) float() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rng.Float64()
}

func (r *lockedRand) shuffle(n int, swap func(i, k int)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rng.Shuffle(n, swap)
}
