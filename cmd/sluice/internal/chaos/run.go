package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
	"github.com/sluicehq/sluice/pkg/store"
	"github.com/sluicehq/sluice/pkg/store/sqlite"
)

// Profile is one chaos run.
type Profile struct {
	Load        time.Duration // how long submits go on
	MaxJobs     int           // submit at most this many
	SubmitEvery time.Duration // per gateway
	MinSleep    time.Duration // sleep job duration, uniform in [MinSleep, MaxSleep]
	MaxSleep    time.Duration
	KillEvery   time.Duration // mean time between kill -9s of a service (jittered ±50%)
	KillPause   time.Duration // a killed service is restarted after this
	NATSRestart bool          // kill -9 and restart NATS once, half way through the load
	Seed        uint64
	Logf        func(format string, args ...any)
}

// Report is what a run measured.
type Report struct {
	Submitted, Admitted, Rejected, Errors int
	Final                                 map[string]int // "succeeded", "cancelled", "failed:<class>"
	Lost                                  []string       // admitted ids missing or not final at the end
	Stuck                                 int            // jobs in the store not final at the end (also unacknowledged admissions)
	Kills                                 map[string]int // by service

	Cap, MaxActive, MaxActiveAPI int
	WorkerLimit, MaxPerWorker    int
	MaxInFlight                  int // largest in-flight count a worker announced
	TotalLimit, MaxRunning       int
	Samples                      int
	Drain                        time.Duration // from end of load until every admitted job was final
}

// Summary is the one-line result.
func (r Report) Summary() string {
	var fin []string
	for k, v := range r.Final {
		fin = append(fin, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(fin)
	var kills []string
	for k, v := range r.Kills {
		kills = append(kills, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(kills)
	return fmt.Sprintf("chaos: submitted=%d admitted=%d rejected=%d errors=%d | %s lost=%d stuck=%d | kills %s | max running per worker %d/%d (announced %d), total %d/%d | max active %d/%d (api %d) | samples=%d drain=%s",
		r.Submitted, r.Admitted, r.Rejected, r.Errors, strings.Join(fin, " "), len(r.Lost), r.Stuck,
		strings.Join(kills, " "), r.MaxPerWorker, r.WorkerLimit, r.MaxInFlight, r.MaxRunning, r.TotalLimit,
		r.MaxActive, r.Cap, r.MaxActiveAPI, r.Samples, r.Drain.Round(100*time.Millisecond))
}

// Violations lists every broken invariant; empty means the run passed.
func (r Report) Violations() []string {
	var v []string
	if len(r.Lost) > 0 {
		n := min(len(r.Lost), 10)
		v = append(v, fmt.Sprintf("%d admitted jobs lost (not final or missing), e.g. %v", len(r.Lost), r.Lost[:n]))
	}
	if r.Stuck > 0 {
		v = append(v, fmt.Sprintf("%d jobs in the store not final", r.Stuck))
	}
	if r.MaxActive > r.Cap {
		v = append(v, fmt.Sprintf("active %d above cap %d (store)", r.MaxActive, r.Cap))
	}
	if r.MaxActiveAPI > r.Cap {
		v = append(v, fmt.Sprintf("active %d above cap %d (/v1/stats)", r.MaxActiveAPI, r.Cap))
	}
	if r.MaxPerWorker > r.WorkerLimit {
		v = append(v, fmt.Sprintf("a worker ran %d jobs, limit %d", r.MaxPerWorker, r.WorkerLimit))
	}
	if r.MaxInFlight > r.WorkerLimit {
		v = append(v, fmt.Sprintf("a worker announced %d jobs in flight, limit %d", r.MaxInFlight, r.WorkerLimit))
	}
	if r.MaxRunning > r.TotalLimit {
		v = append(v, fmt.Sprintf("%d jobs running, sum of worker limits %d", r.MaxRunning, r.TotalLimit))
	}
	if r.Admitted == 0 {
		v = append(v, "no job admitted: the run measured nothing")
	}
	if r.Samples == 0 {
		v = append(v, "no concurrency sample taken")
	}
	return v
}

// Run waits for the cluster to be ready, drives the profile, waits for
// every admitted job to be final and checks the invariants. The error is
// about the harness itself; broken invariants are in Report.Violations.
func (c *Cluster) Run(ctx context.Context, p Profile) (Report, error) {
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
	rep := Report{Final: map[string]int{}, Kills: map[string]int{},
		Cap: c.cfg.MaxActive, WorkerLimit: c.cfg.WorkerLimit, TotalLimit: c.cfg.WorkerLimit * c.cfg.Workers}

	st, err := sqlite.Open(ctx, c.StorePath)
	if err != nil {
		return rep, err
	}
	defer func() { _ = st.Close() }()
	client := &http.Client{Timeout: 3 * time.Second}

	if err := c.waitReady(ctx, client, 60*time.Second); err != nil {
		return rep, err
	}
	p.Logf("chaos: cluster ready (%d gateways, %d workers)", len(c.Gateways), c.cfg.Workers)

	rng := rand.New(rand.NewPCG(p.Seed, p.Seed^0x5eed))
	var rngMu sync.Mutex
	randDur := func(lo, hi time.Duration) time.Duration {
		rngMu.Lock()
		defer rngMu.Unlock()
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}

	var (
		mu       sync.Mutex
		admitted = map[string]bool{}
	)
	loadCtx, stopLoad := context.WithTimeout(ctx, p.Load)
	defer stopLoad()
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()

	var wg sync.WaitGroup
	// Load: one submitter per gateway.
	for _, gw := range c.Gateways {
		wg.Add(1)
		go func() {
			defer wg.Done()
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
				ms := randDur(p.MinSleep, p.MaxSleep).Milliseconds()
				id, status, err := submit(loadCtx, client, gw, ms)
				mu.Lock()
				switch {
				case err == nil && (status == http.StatusAccepted || status == http.StatusOK || status == http.StatusCreated):
					rep.Admitted++
					admitted[id] = true
				case err == nil && status == http.StatusTooManyRequests:
					rep.Rejected++
				default:
					rep.Errors++
				}
				mu.Unlock()
			}
		}()
	}

	// Chaos: kill -9 a random service and restart it; NATS once, half way.
	var chaosWG sync.WaitGroup
	chaosWG.Add(1)
	go func() {
		defer chaosWG.Done()
		natsAt := time.Now().Add(p.Load / 2)
		natsDone := !p.NATSRestart
		for {
			select {
			case <-loadCtx.Done():
				return
			case <-time.After(randDur(p.KillEvery/2, p.KillEvery*3/2)):
			}
			var victim *Proc
			if !natsDone && time.Now().After(natsAt) {
				victim, natsDone = c.NATS, true
			} else {
				rngMu.Lock()
				victim = c.Procs[rng.IntN(len(c.Procs))]
				rngMu.Unlock()
			}
			p.Logf("chaos: kill -9 %s", victim.Name)
			if err := c.Restart(victim, p.KillPause); err != nil {
				p.Logf("chaos: restart %s: %v", victim.Name, err)
			}
			mu.Lock()
			rep.Kills[victim.Service]++
			mu.Unlock()
		}
	}()

	// Samplers: the store (the truth) and /v1/stats on every gateway.
	var sampleWG sync.WaitGroup
	sampleWG.Add(1)
	go func() {
		defer sampleWG.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sampleCtx.Done():
				return
			case <-t.C:
			}
			active, perWorker, total, detail, err := sampleStore(sampleCtx, st, c.workerStarts(), c.cfg.WorkerLimit)
			if err != nil {
				continue
			}
			var api, inFlight int
			for _, gw := range c.Gateways {
				var s contracts.Stats
				if getJSON(sampleCtx, client, gw+"/v1/stats", &s) == nil {
					api = max(api, s.Active)
					for _, w := range s.Workers {
						inFlight = max(inFlight, w.InFlight)
					}
				}
			}
			if detail != "" {
				p.Logf("chaos: over the worker limit: %s", detail)
			}
			mu.Lock()
			rep.Samples++
			rep.MaxActive = max(rep.MaxActive, active)
			rep.MaxPerWorker = max(rep.MaxPerWorker, perWorker)
			rep.MaxRunning = max(rep.MaxRunning, total)
			rep.MaxActiveAPI = max(rep.MaxActiveAPI, api)
			rep.MaxInFlight = max(rep.MaxInFlight, inFlight)
			mu.Unlock()
		}
	}()

	defer func() { // also on an early return: no sampler outlives Run
		stopSampling()
		sampleWG.Wait()
	}()

	wg.Wait()
	<-loadCtx.Done()
	chaosWG.Wait()
	// Every process must be up for the drain (a service may have exited by itself).
	for _, pr := range append([]*Proc{c.NATS}, c.Procs...) {
		if !pr.alive() {
			p.Logf("chaos: %s was down after the load; restarting", pr.Name)
			if err := pr.start(); err != nil {
				return rep, err
			}
		}
	}
	mu.Lock()
	ids := make([]string, 0, len(admitted))
	for id := range admitted {
		ids = append(ids, id)
	}
	mu.Unlock()
	p.Logf("chaos: load over: %d submitted, %d admitted; draining", rep.Submitted, len(ids))

	// Drain: wait until every admitted job and every job in the store is
	// final, up to dispatch deadline + stale threshold (+ reaper slack).
	drainStart := time.Now()
	limit := c.cfg.DispatchDeadline + c.cfg.StaleThreshold + 10*time.Second
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

	// Check: every admitted job, then every job in the store.
	for _, id := range ids {
		j, err := st.Get(ctx, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			rep.Lost = append(rep.Lost, id+"(missing)")
		case err != nil:
			return rep, fmt.Errorf("chaos: read %s: %w", id, err)
		case !j.State.Final():
			rep.Lost = append(rep.Lost, fmt.Sprintf("%s(%s attempt %d)", id, j.State, j.Attempt))
		case j.State == contracts.StateFailed:
			rep.Final["failed:"+string(contracts.ClassOf(j.Error))]++
		default:
			rep.Final[string(j.State)]++
		}
	}
	counts, err := st.Stats(ctx)
	if err != nil {
		return rep, err
	}
	rep.Stuck = counts.Active()
	return rep, nil
}

func (c *Cluster) waitReady(ctx context.Context, client *http.Client, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ready := true
		for _, gw := range c.Gateways {
			var s contracts.Stats
			if err := getJSON(ctx, client, gw+"/v1/stats", &s); err != nil || len(s.Workers) < c.cfg.Workers {
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

// sampleStore reads active jobs, and how many jobs each worker ran at
// once among the rows the store shows running.
//
// The store's "running" is an over-approximation of what a worker runs: a
// worker frees its slot when the handler returns, before the result reaches
// the store (seconds later while NATS is down), and the rows of a kill -9'd
// incarnation stay running until the reaper declares them stale. So the
// check is on run windows instead: a row counts only if it started during
// its worker id's current incarnation, and its window is
// [started_at, started_at + payload ms). The store records a job running
// before its handler starts, and the worker takes a new job only after a
// handler returned, so windows of jobs that ran one after the other on the
// same slot never overlap, while a worker that accepts past its limit makes
// limit+1 windows overlap.
func sampleStore(ctx context.Context, st store.Store, starts map[string]time.Time, limit int) (active, perWorker, total int, detail string, err error) {
	counts, err := st.Stats(ctx)
	if err != nil {
		return 0, 0, 0, "", err
	}
	active = counts.Active()
	byWorker := map[string][]contracts.Job{}
	var all []window
	cursor := ""
	for {
		jobs, next, err := st.List(ctx, store.Query{State: contracts.StateRunning, Limit: 500, Cursor: cursor})
		if err != nil {
			return 0, 0, 0, "", err
		}
		for _, j := range jobs {
			if j.StartedAt == nil || j.StartedAt.Before(starts[j.Worker]) {
				continue // not started, or an earlier incarnation's job, dead with it
			}
			byWorker[j.Worker] = append(byWorker[j.Worker], j)
			all = append(all, windowOf(j))
		}
		if next == "" {
			break
		}
		cursor = next
	}
	total = maxOverlap(all)
	for w, jobs := range byWorker {
		ws := make([]window, len(jobs))
		for i, j := range jobs {
			ws[i] = windowOf(j)
		}
		n := maxOverlap(ws)
		perWorker = max(perWorker, n)
		if n > limit {
			var b strings.Builder
			fmt.Fprintf(&b, "%s ran %d at once:", w, n)
			for _, j := range jobs {
				fmt.Fprintf(&b, " [%s attempt %d started %s payload %s]", j.ID, j.Attempt, fmtTime(j.StartedAt), j.Payload)
			}
			detail = b.String()
		}
	}
	return active, perWorker, total, detail, nil
}

// window is the span a sleep job's handler ran at least.
type window struct{ from, to time.Time }

func windowOf(j contracts.Job) window {
	var p struct {
		MS int64 `json:"ms"`
	}
	_ = json.Unmarshal(j.Payload, &p)
	return window{from: *j.StartedAt, to: j.StartedAt.Add(time.Duration(p.MS) * time.Millisecond)}
}

// maxOverlap is the largest number of half-open windows covering one instant.
func maxOverlap(ws []window) int {
	type event struct {
		at    time.Time
		delta int
	}
	ev := make([]event, 0, 2*len(ws))
	for _, w := range ws {
		ev = append(ev, event{w.from, +1}, event{w.to, -1})
	}
	sort.Slice(ev, func(i, k int) bool {
		if ev[i].at.Equal(ev[k].at) {
			return ev[i].delta < ev[k].delta // an end before a start at the same instant
		}
		return ev[i].at.Before(ev[k].at)
	})
	cur, best := 0, 0
	for _, e := range ev {
		cur += e.delta
		best = max(best, cur)
	}
	return best
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format("15:04:05.000")
}
func submit(ctx context.Context, client *http.Client, gw string, ms int64) (id string, status int, err error) {
	body, _ := json.Marshal(map[string]any{"kind": "sleep", "payload": map[string]int64{"ms": ms}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw+"/v1/jobs", bytes.NewReader(body))
	if err != nil {
		return "", 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", resp.StatusCode, err
	}
	if resp.StatusCode/100 == 2 {
		var j contracts.Job
		if err := json.Unmarshal(data, &j); err != nil || j.ID == "" {
			return "", resp.StatusCode, fmt.Errorf("submit: bad body %q", data)
		}
		return j.ID, resp.StatusCode, nil
	}
	return "", resp.StatusCode, nil
}

func getJSON(ctx context.Context, client *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
