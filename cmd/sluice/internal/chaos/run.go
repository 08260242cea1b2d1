package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/cmd/sluice/internal/chaos/journal"
	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/dial"
)

// Profile is one chaos run.
type Profile struct {
	Load        time.Duration // how long submits go on
	MaxJobs     int           // submit at most this many
	SubmitEvery time.Duration // per gateway
	MinSleep    time.Duration // job duration, uniform in [MinSleep, MaxSleep] …
	MaxSleep    time.Duration
	LongShare   float64       // … except this share of jobs, uniform in [LongMin, LongMax]
	LongMin     time.Duration // (long jobs are still running when their worker is frozen)
	LongMax     time.Duration
	KillEvery   time.Duration // mean time between kill -9s of a random service (jittered ±50%)
	KillPause   time.Duration // a killed service (and NATS) is restarted after this

	NATSRestarts  int           // kill -9 and restart NATS this many times
	StreamDeletes int           // delete the job stream this many times
	StreamGap     time.Duration // how long the stream stays deleted before the harness declares it again
	// Overtime is how long the load may go on past Load while a planned
	// fault of the timeline is not done yet (a loaded NATS cluster can
	// refuse a stream delete for many seconds after a node's restart).
	// Default: Load/2.
	Overtime      time.Duration
	Sigstops      int           // freeze a worker this many times …
	FreezeFor     time.Duration // … for this long (default: stale threshold + 2 reaper intervals + 1s)
	StoreRestarts int           // kill -9 and restart the store process this many times (MongoDB profile)
	StorePause    time.Duration // the store process is restarted after this

	SampleEvery time.Duration // store and /v1/stats sampling period
	Seed        uint64
	Logf        func(format string, args ...any)
}

func (p *Profile) defaults(c *Cluster) {
	if p.Logf == nil {
		p.Logf = func(string, ...any) {}
	}
	if p.SubmitEvery <= 0 {
		p.SubmitEvery = 25 * time.Millisecond
	}
	if p.KillEvery <= 0 {
		p.KillEvery = 3 * time.Second
	}
	if p.MaxJobs <= 0 {
		p.MaxJobs = int(p.Load/p.SubmitEvery)*len(c.Gateways) + 1
	}
	if p.FreezeFor <= 0 {
		p.FreezeFor = c.cfg.StaleThreshold + 2*c.cfg.ReaperInterval + time.Second
	}
	if p.Overtime <= 0 {
		p.Overtime = p.Load / 2
	}
	if p.StreamGap <= 0 {
		p.StreamGap = 300 * time.Millisecond
	}
	if p.StorePause <= 0 {
		p.StorePause = p.KillPause
	}
	if p.SampleEvery <= 0 {
		p.SampleEvery = 100 * time.Millisecond
	}
}

// Run waits for the cluster to be ready, drives the profile, waits for
// every admitted job to be final and checks the invariants. The error is
// about the harness itself; broken invariants are in Report.Violations.
func (c *Cluster) Run(ctx context.Context, p Profile) (Report, error) {
	p.defaults(c)
	rep := Report{Store: c.cfg.Store, Final: map[string]int{}, RejectedBy: map[string]int{}, Kills: map[string]int{},
		Planned: map[string]int{}, MaxTenantActive: map[string]int{}, PeakRSS: map[string]int64{},
		Cap: c.cfg.MaxActive, TenantCap: c.cfg.TenantMaxActive,
		WorkerLimit: c.cfg.WorkerLimit, SpawnMax: c.cfg.spawnedLimit()}
	for _, pf := range p.timeline(c.StoreProc != nil) {
		rep.Planned[pf.kind]++
	}
	for _, t := range c.Tenants {
		rep.MaxTenantActive[t.Name] = 0
	}

	st, err := dial.OpenRetry(ctx, dial.Env{Store: c.StoreURI, DataDir: c.DataDir}, nil)
	if err != nil {
		return rep, fmt.Errorf("chaos: open store: %w", err)
	}
	defer func() { _ = st.Close() }()
	client := &http.Client{Timeout: 3 * time.Second}

	if err := c.waitReady(ctx, client, 60*time.Second); err != nil {
		return rep, err
	}
	p.Logf("chaos: cluster ready (%s store, %d gateways, %d workers, %d tenants)", c.cfg.Store, len(c.Gateways), c.cfg.Workers, len(c.Tenants))

	rng := newLockedRand(p.Seed)
	f := &faults{c: c, p: p, st: st, client: client, rng: rng, stale: newCounterTotal(), dispatched: newCounterTotal(), kills: map[string]int{}}
	var (
		mu       sync.Mutex
		admitted = map[string]bool{}
		stalling []string      // admitted jobs whose probe stalls
		over     []storeSample // samples over a limit as the store showed it
		highest  storeSample   // the sample with the most jobs running
	)
	loadStart := time.Now()
	loadCtx, stopLoad := context.WithCancel(ctx)
	var loadWG sync.WaitGroup // the goroutine that ends the load
	defer func() {
		stopLoad()
		loadWG.Wait()
	}()
	timelineDone := make(chan struct{})
	loadWG.Go(func() {
		defer stopLoad()
		select {
		case <-loadCtx.Done():
			return
		case <-time.After(p.Load):
		}
		select {
		case <-timelineDone:
			return
		default:
		}
		p.Logf("chaos: load goes on (up to %s) until the planned faults are done", p.Overtime)
		select {
		case <-loadCtx.Done():
		case <-timelineDone:
		case <-time.After(p.Overtime):
		}
	})
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()

	// Load: one submitter per gateway, each submit as a tenant picked with
	// weights n, n-1, …, 1, so the first tenants meet their cap first.
	var wg sync.WaitGroup
	for _, gw := range c.Gateways {
		wg.Go(func() {
			t := time.NewTicker(p.SubmitEvery)
			defer t.Stop()
			for {
				select {
				case <-loadCtx.Done():
					return
				case <-t.C:
				}
				mu.Lock()
				if rep.Submitted >= p.MaxJobs {
					mu.Unlock()
					return
				}
				rep.Submitted++
				mu.Unlock()
				d := rng.dur(p.MinSleep, p.MaxSleep)
				if p.LongShare > 0 && rng.float() < p.LongShare {
					d = rng.dur(p.LongMin, p.LongMax)
				}
				shape := randomShape(rng)
				out, err := submit(loadCtx, client, gw, c.pickTenant(rng), d.Milliseconds(), shape,
					func(int) int64 { return rng.dur(p.MinSleep, p.MaxSleep).Milliseconds() })
				mu.Lock()
				switch {
				case err == nil && out.ID != "":
					rep.Admitted++
					admitted[out.ID] = true
					if shape.Stall && shape.Items == 0 && out.Status == http.StatusAccepted {
						stalling = append(stalling, out.ID)
					}
				case err == nil && out.Status == http.StatusTooManyRequests:
					rep.Rejected++
					rep.RejectedBy[out.Limit]++
				default:
					rep.Errors++
				}
				mu.Unlock()
			}
		})
	}

	// Faults: random kills, the timeline, the supervisor and the scrapes.
	faultCtx, stopFaults := context.WithCancel(ctx)
	defer stopFaults()
	var faultWG sync.WaitGroup
	faultWG.Go(func() { f.randomKills(loadCtx) })
	faultWG.Go(func() {
		defer close(timelineDone)
		f.runTimeline(loadCtx, faultCtx, loadStart)
	})
	faultWG.Go(func() { f.supervise(faultCtx) })
	faultWG.Go(func() { f.scrape(faultCtx) })
	faultWG.Go(func() { c.spawnLoop(faultCtx, p.Logf) })

	// Sampler: the store (the truth) and /v1/stats on every gateway.
	var sampleWG sync.WaitGroup
	sampleWG.Go(func() {
		t := time.NewTicker(p.SampleEvery)
		defer t.Stop()
		for {
			select {
			case <-sampleCtx.Done():
				return
			case <-t.C:
			}
			s, err := sampleStore(sampleCtx, st, c.workerStarts(), c.cfg.WorkerLimit)
			if err != nil {
				continue
			}
			// Every row counted started in its worker's live incarnation,
			// so without a worker over its limit the total is within the
			// limits of the workers alive; measured again at the end anyway.
			overTotal := s.Total > c.cfg.WorkerLimit*c.aliveWorkers()
			var api, inFlight int
			for _, gw := range c.Gateways {
				var stats contracts.Stats
				if getJSON(sampleCtx, client, gw+"/v1/stats", c.Tenants[0], &stats) == nil {
					api = max(api, stats.Active)
					for _, w := range stats.Workers {
						inFlight = max(inFlight, w.InFlight)
					}
				}
			}
			if s.Detail != "" {
				p.Logf("chaos: a store sample shows %s (windows of started_at + payload ms; measured against the journals at the end)", s.Detail)
			}
			mu.Lock()
			rep.Samples++
			rep.MaxActive = max(rep.MaxActive, s.Active)
			for t, n := range s.TenantActive {
				rep.MaxTenantActive[t] = max(rep.MaxTenantActive[t], n)
			}
			switch {
			case s.Detail != "" || overTotal:
				// Over a limit as the store shows it: measured again
				// against the journals once the run is over.
				over = append(over, s)
			default:
				rep.MaxPerWorker = max(rep.MaxPerWorker, s.PerWorker)
				if s.Total > highest.Total {
					highest = s
				}
			}
			rep.MaxActiveAPI = max(rep.MaxActiveAPI, api)
			rep.MaxInFlight = max(rep.MaxInFlight, inFlight)
			for _, pr := range c.procs() {
				if kb := pr.peakRSS(); kb > 0 {
					rep.PeakRSS[pr.Service] = max(rep.PeakRSS[pr.Service], kb)
				}
			}
			mu.Unlock()
		}
	})
	defer func() { // also on an early return: no goroutine outlives Run
		stopSampling()
		sampleWG.Wait()
		stopFaults()
		faultWG.Wait()
	}()

	wg.Wait()
	<-loadCtx.Done()
	mu.Lock()
	ids := make([]string, 0, len(admitted))
	for id := range admitted {
		ids = append(ids, id)
	}
	mu.Unlock()
	p.Logf("chaos: load over: %d submitted, %d admitted; draining", rep.Submitted, len(ids))

	// Drain: wait until every admitted job and every job in the store is
	// final, up to dispatch deadline + stale threshold (+ reaper slack).
	// The supervisor keeps restarting processes that exit by themselves.
	drainStart := time.Now()
	limit := c.cfg.DispatchDeadline + c.cfg.StaleThreshold + 10*time.Second
	if c.StoreProc != nil {
		limit += 30 * time.Second
	}
	for {
		open := 0
		for _, id := range ids {
			j, err := st.Get(ctx, id)
			if err != nil || !j.State.Final() {
				open++
			}
		}
		if open == 0 {
			// Also jobs admitted behind a gateway killed before it answered.
			if counts, err := st.Stats(ctx); err == nil && counts.Active() == 0 {
				break
			}
		}
		if time.Since(drainStart) > limit {
			break
		}
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	rep.Drain = time.Since(drainStart)
	stopSampling()
	sampleWG.Wait()
	f.scrapeAll(ctx)
	stopFaults()
	faultWG.Wait()

	f.mu.Lock()
	for k, v := range f.kills {
		rep.Kills[k] = v
	}
	rep.PendingAtDelete, rep.Exits = f.pendingAtDelete, f.exits
	f.mu.Unlock()
	rep.StaleResults = int(f.stale.total())
	rep.Dispatched = map[string]int{}
	for name, v := range f.dispatched.byName() {
		rep.Dispatched[name] = int(v)
	}
	for _, p := range c.procs() {
		if p.metricsURL != "" {
			rep.Dispatched[p.Name] += 0 // listed also when it never dispatched
		}
	}

	// Check: every admitted job, then every job in the store, then the journals.
	var parents []contracts.Job
	for _, id := range ids {
		j, err := st.Get(ctx, id)
		if err == nil && j.IsParent() {
			parents = append(parents, j)
		}
		switch {
		case errors.Is(err, store.ErrNotFound):
			rep.Lost = append(rep.Lost, id+"(missing)")
		case err != nil:
			return rep, fmt.Errorf("chaos: read %s: %w", id, err)
		case !j.State.Final():
			rep.Lost = append(rep.Lost, fmt.Sprintf("%s(%s attempt %d)", id, j.State, j.Claim))
		case j.State == contracts.StateFailed:
			rep.Final["failed:"+string(contracts.ClassOf(j.Error))]++
		default:
			rep.Final[string(j.State)]++
		}
	}
	if rep.Stuck, err = countActive(ctx, st, parents); err != nil {
		return rep, err
	}
	runs, err := c.checkJournals(ctx, st, &rep, p.Logf)
	if err != nil {
		return rep, err
	}
	fr, err := checkFanouts(ctx, st, parents, runs)
	if err != nil {
		return rep, err
	}
	rep.Fanouts, rep.FanoutChildren = fr.Parents, fr.Children
	rep.MaxPerWindow, rep.MaxPerWindowOf = fr.MaxLive, fr.MaxWindow
	rep.WindowOverLimit, rep.FanoutMiscounted = fr.OverWindow, fr.Miscounted
	mu.Lock()
	stalled := append([]string(nil), stalling...)
	mu.Unlock()
	sr, err := checkStalls(ctx, st, stalled)
	if err != nil {
		return rep, err
	}
	rep.Stalled, rep.StallsCaught, rep.StallsMissed = sr.Stalled, sr.Caught, sr.Missed
	rep.Spawned = c.Spawned()
	lives := c.workerLives(rosterExpiryIntervals * c.cfg.HeartbeatInterval)
	mu.Lock()
	var total totalCheck
	for _, s := range append(over, highest) {
		perWorker, ws := correctSample(s.Rows, runs)
		tc := checkTotal(ws, lives, c.cfg.WorkerLimit)
		if s.Detail != "" || s.Total > tc.Limit {
			p.Logf("chaos: a sample over a limit as the store showed it (per worker %d, total %d) is %d and %d by the journals (%d workers alive then)",
				s.PerWorker, s.Total, perWorker, tc.Running, tc.Workers)
		}
		rep.MaxPerWorker = max(rep.MaxPerWorker, perWorker)
		total = total.merge(tc)
	}
	mu.Unlock()
	rep.MaxRunning, rep.TotalLimit, rep.TotalWorkers = total.Running, total.Limit, total.Workers
	if total.Over != nil {
		rep.OverTotal = total.Over.String()
	}
	rep.MaxSpawnedCounted, _ = maxSpawnedCounted(lives)
	rep.ExpiryFenced = c.countInWorkerLogs(expiryFenceMessage)
	return rep, nil
}

// expiryFenceMessage is what a worker logs when its job goroutine, not the
// heartbeat tick, finds a lease expired (typically right after SIGCONT).
const expiryFenceMessage = "lease expired; fencing the attempt"

// countInWorkerLogs counts the worker log lines containing s.
func (c *Cluster) countInWorkerLogs(s string) int {
	n := 0
	for _, w := range c.workers() {
		data, err := os.ReadFile(w.log)
		if err == nil {
			n += strings.Count(string(data), s)
		}
	}
	return n
}

// pickTenant picks a tenant with weights n, n-1, …, 1.
func (c *Cluster) pickTenant(rng *lockedRand) Tenant {
	n := len(c.Tenants)
	r := rng.intN(n * (n + 1) / 2)
	for i := range c.Tenants {
		w := n - i
		if r < w {
			return c.Tenants[i]
		}
		r -= w
	}
	return c.Tenants[0]
}

// checkJournals reads the probe workers' journals and fills the overlap
// part of rep; st tells whether a late result was accepted.
func (c *Cluster) checkJournals(ctx context.Context, st store.Store, rep *Report, logf func(string, ...any)) ([]attemptRun, error) {
	entries, bad, err := journal.ReadDir(c.JournalDir)
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	procs := map[int]procLife{}
	for _, w := range c.workers() {
		lives, freezes := w.history()
		for _, l := range lives {
			pl := procLife{Worker: w.workerID, End: l.End}
			for _, f := range freezes {
				if !f.From.Before(l.Start) && (l.End.IsZero() || f.From.Before(l.End)) {
					pl.Freezes = append(pl.Freezes, f)
				}
			}
			procs[l.PID] = pl
		}
	}
	jr := analyzeJournal(entries, procs, c.cfg.FenceAfter(), time.Now())
	rep.Runs, rep.Resumed, rep.ResumedUnfenced = len(jr.Runs), jr.Resumed, jr.Unfenced
	rep.JournalPerWorker = jr.MaxPerWorker
	rep.MaxTail, rep.TailOverlaps = jr.MaxTail, jr.TailOverlaps
	rep.BadJournal = bad + jr.Unpaired
	for _, o := range jr.Overlaps {
		rep.Overlaps = append(rep.Overlaps, o.String())
	}
	jobs := map[string]contracts.Job{}
	for _, r := range jr.Runs {
		if _, ok := jobs[r.JobID]; ok {
			continue
		}
		j, err := st.Get(ctx, r.JobID)
		if err != nil {
			return nil, fmt.Errorf("chaos: read job %s: %w", r.JobID, err)
		}
		jobs[r.JobID] = j
	}
	rc := checkResources(jr.Runs)
	rep.ResourceRuns, rep.OverResources = rc.Declared, rc.Over
	rep.MaxCPU, rep.MaxMemory = rc.CPU, rc.Memory
	for _, r := range jr.Runs {
		if j := jobs[r.JobID]; j.Resources != nil && !j.Resources.IsZero() {
			rep.ExplicitRuns++
		}
	}
	or := checkOrder(jr.Runs, jobs)
	rep.MaxPerKey, rep.KeyOverLimit = or.MaxPerKey, or.KeyOverLimit
	rep.Inversions, rep.FirstRuns = or.Inversions, or.FirstRuns
	for _, r := range jr.Runs {
		if r.Unfenced {
			// Its handler returned normally after SIGCONT: was its result taken?
			j, err := st.Get(ctx, r.JobID)
			if err == nil && j.State == contracts.StateSucceeded && j.Claim == r.Attempt && j.Worker == r.Worker {
				rep.LateAccepted++
			}
		}
		if r.Resumed {
			logf("chaos: run frozen past the fence: job %s attempt %d on %s started %s, live until %s, resumed %s, ended %s (%s), unfenced=%v",
				r.JobID, r.Attempt, r.Worker, clock(r.Start), clock(r.LiveEnd), clock(r.Tail.from), clock(r.End), r.CtxErr, r.Unfenced)
		}
	}
	return jr.Runs, nil
}

func (c *Cluster) waitReady(ctx context.Context, client *http.Client, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ready := true
		for _, gw := range c.Gateways {
			var s contracts.Stats
			if err := getJSON(ctx, client, gw+"/v1/stats", c.Tenants[0], &s); err != nil || len(s.Workers) < c.cfg.Workers {
				ready = false
				break
			}
		}
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: cluster not ready after %s (see logs under %s)", within, c.cfg.WorkDir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// countActive counts the jobs in the store that are not final, fan-outs'
// children included, from the jobs themselves: Stats reads counters that a
// process killed between a job's write and its counter's may leave off by
// one until Reconcile repairs them (MongoDB's counters are written after
// the job).
func countActive(ctx context.Context, st store.Store, parents []contracts.Job) (int, error) {
	n := 0
	count := func(q store.Query) error {
		q.Limit = store.MaxListLimit
		for {
			page, next, err := st.List(ctx, q)
			if err != nil {
				return fmt.Errorf("chaos: count %s jobs: %w", q.State, err)
			}
			n += len(page)
			if next == "" {
				return nil
			}
			q.Cursor = next
		}
	}
	for _, state := range []contracts.JobState{contracts.StatePending, contracts.StateRunning} {
		if err := count(store.Query{State: state}); err != nil {
			return 0, err
		}
		for _, p := range parents {
			if err := count(store.Query{State: state, Parent: p.ID}); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}
