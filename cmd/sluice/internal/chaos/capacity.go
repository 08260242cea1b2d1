package chaos

import (
	"fmt"
	"sort"
	"time"

	"github.com/sluicehq/sluice/pkg/contracts"
)

// The sum of the worker limits, as measured here.
//
// Guarantee 1 bounds the jobs running at once by the sum of the limits of
// the workers. The workers are not a fixed set: a killed worker is gone
// until the harness starts it again, and spawned workers come and go on
// the schedulers' scale requests. So the bound is a function of time: at
// each instant, the worker limit times the worker processes alive then
// (from the start of an incarnation to its death, as the harness saw it by
// pid). A run of a process ends at the latest with that process's death
// (overlap.go), so every counted run lies within a life that is counted
// too, and the check never credits a dead process with slots.
//
// The spawned workers have a bound of their own, which is measured here
// but is not a guarantee: each scheduler asks for one only while fewer
// than its SLUICE_SCHEDULER_MAX_SPAWNED spawned workers are live or asked for, "live"
// meaning announced in its roster. A spawned worker frozen past the
// roster's expiry is forgotten like a dead one (and its jobs are requeued
// once the stale threshold passes), so the schedulers rightly ask for a
// replacement; when it resumes there is one spawned worker more than the
// bound until one of them leaves when idle (a NATS outage longer than the
// expiry makes the rosters forget every worker alike). The report shows
// the most spawned workers alive at once not counting those back from
// such a freeze. Their jobs count in the total above, and so do their
// slots.

// rosterExpiryIntervals is how many announce intervals (the heartbeat
// interval) a worker may stay silent before the schedulers' roster forgets
// it (pkg/bus/roster).
const rosterExpiryIntervals = 3

// workerLife is one incarnation of a worker process.
type workerLife struct {
	Worker  string
	PID     int
	Spawned bool
	Start   time.Time
	End     time.Time // zero: alive at the end of the run
	// Forgotten is, for a spawned worker, the start of its first freeze
	// longer than the roster's expiry (zero: never).
	Forgotten time.Time
}

// workerLives lists every incarnation of every worker process, with the
// freezes longer than expiry marked on spawned ones.
func (c *Cluster) workerLives(expiry time.Duration) []workerLife {
	var out []workerLife
	for _, w := range c.workers() {
		lives, freezes := w.history()
		for _, l := range lives {
			wl := workerLife{Worker: w.workerID, PID: l.PID, Spawned: w.transient, Start: l.Start, End: l.End}
			for _, f := range freezes {
				in := !f.From.Before(l.Start) && (l.End.IsZero() || f.From.Before(l.End))
				if wl.Spawned && in && f.To.Sub(f.From) > expiry && (wl.Forgotten.IsZero() || f.From.Before(wl.Forgotten)) {
					wl.Forgotten = f.From
				}
			}
			out = append(out, wl)
		}
	}
	return out
}

// totalCheck is the most jobs running at once against the sum of the
// worker limits then.
type totalCheck struct {
	// Running jobs at the instant At, when the workers alive had Limit
	// slots in all; the instant with the most running jobs.
	Running, Limit, Workers int
	At                      time.Time
	// Over is the instant where running jobs passed the sum of the limits
	// by the most, if any did: a broken guarantee.
	Over *totalCheck
}

// merge keeps the larger of two measures.
func (t totalCheck) merge(o totalCheck) totalCheck {
	out := t
	if o.Running > t.Running {
		out.Running, out.Limit, out.Workers, out.At = o.Running, o.Limit, o.Workers, o.At
	}
	switch {
	case o.Over == nil:
	case t.Over == nil || o.Over.Running-o.Over.Limit > t.Over.Running-t.Over.Limit:
		out.Over = o.Over
	}
	return out
}

// String describes an instant of the check.
func (t totalCheck) String() string {
	return fmt.Sprintf("%d jobs running at %s, sum of the limits of the %d workers alive then %d",
		t.Running, clock(t.At), t.Workers, t.Limit)
}

// checkTotal sweeps the run windows ws against the worker lives: at every
// instant where either changes it compares the jobs running with the
// limit times the processes alive.
func checkTotal(ws []window, lives []workerLife, limit int) totalCheck {
	type event struct {
		at             time.Time
		running, alive int
	}
	ev := make([]event, 0, 2*len(ws)+2*len(lives))
	for _, w := range ws {
		if w.to.After(w.from) {
			ev = append(ev, event{w.from, +1, 0}, event{w.to, -1, 0})
		}
	}
	for _, l := range lives {
		ev = append(ev, event{at: l.Start, alive: +1})
		if !l.End.IsZero() {
			ev = append(ev, event{at: l.End, alive: -1})
		}
	}
	sort.Slice(ev, func(i, k int) bool { return ev[i].at.Before(ev[k].at) })
	var (
		out            totalCheck
		running, alive int
	)
	for i := 0; i < len(ev); {
		at := ev[i].at
		for ; i < len(ev) && ev[i].at.Equal(at); i++ { // windows are half-open: look after every change at one instant
			running += ev[i].running
			alive += ev[i].alive
		}
		now := totalCheck{Running: running, Limit: alive * limit, Workers: alive, At: at}
		if running > out.Running {
			out.Running, out.Limit, out.Workers, out.At = now.Running, now.Limit, now.Workers, now.At
		}
		if running > now.Limit && (out.Over == nil || running-now.Limit > out.Over.Running-out.Over.Limit) {
			over := now
			out.Over = &over
		}
	}
	return out
}

// maxSpawnedCounted is the most spawned workers alive at once that the
// schedulers count against their bound (see the top of this file), and
// when.
func maxSpawnedCounted(lives []workerLife) (int, time.Time) {
	var ws []window
	for _, l := range lives {
		if !l.Spawned {
			continue
		}
		end := l.End
		if !l.Forgotten.IsZero() && (end.IsZero() || l.Forgotten.Before(end)) {
			end = l.Forgotten
		}
		if end.IsZero() {
			end = time.Unix(1<<40, 0) // alive at the end
		}
		ws = append(ws, window{from: l.Start, to: end})
	}
	return peak(ws)
}

// peak is the largest number of half-open windows covering one instant,
// and the first such instant.
func peak(ws []window) (int, time.Time) {
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
	var at time.Time
	for _, e := range ev {
		cur += e.delta
		if cur > best {
			best, at = cur, e.at
		}
	}
	return best, at
}

// The declared resources of a worker's running jobs, as measured here.
//
// A worker takes a job only while what the job needs fits in what its
// running jobs leave free of its capacity (SLUICE_WORKER_CPU,
// SLUICE_WORKER_MEMORY), the need counted by contracts.ResourceDefaults.Need:
// the job's declaration, with the worker's defaults for what it leaves
// out. The probe journals each run's need and the worker's capacity on its
// start line; a run holds its need from its start to its end (or its
// process's death), a span within the one in which the worker counts it.
// So at every instant the needs of one process's runs must add up to at
// most its capacity. Frozen spans count in full: the jobs still hold
// their resources.

// The declared load: resourceShare of the jobs declare one of
// chaosResources against the probe workers' capacity of workerCPU cores
// and workerMemory (with the default limit of 2 slots, a job that declares
// nothing takes one slot's share, cpu=1,memory=512MiB), so a worker runs
// two small jobs, or one that takes it whole, never a 1.5-core job beside
// a default one.
const (
	resourceShare = 0.3
	workerCPU     = "2"
	workerMemory  = "1GiB"
)

// chaosResources are the declarations the load draws from.
var chaosResources = []string{
	`{"cpu":1.5}`,
	`{"memory":"768MiB"}`,
	`{"cpu":0.5,"memory":"256MiB"}`,
	`{"cpu":2,"memory":"1GiB"}`,
}

// workerResourceEnv is the capacity every worker of the harness runs with.
func workerResourceEnv() []string {
	return []string{"SLUICE_WORKER_CPU=" + workerCPU, "SLUICE_WORKER_MEMORY=" + workerMemory}
}

// resourceCheck is the most that the runs of one worker process declared at
// once, against that worker's capacity.
type resourceCheck struct {
	// Declared counts the runs whose start line carries their need.
	Declared int
	// CPU and Memory are the instants at which one process's runs held
	// the largest share of its CPU and of its memory.
	CPU, Memory resourceInstant
	// Over lists instants at which a process's runs needed more than its
	// capacity: a broken guarantee.
	Over []string
}

// resourceInstant is what one process's runs held at one instant.
type resourceInstant struct {
	Worker   string
	PID      int
	At       time.Time
	Held     contracts.Resources
	Capacity contracts.Resources
	Runs     int
}

// cpuShare and memoryShare are the fractions of the capacity held (0
// without a capacity).
func (r resourceInstant) cpuShare() float64 {
	if r.Capacity.CPU <= 0 {
		return 0
	}
	return r.Held.CPU / r.Capacity.CPU
}

func (r resourceInstant) memoryShare() float64 {
	if r.Capacity.Memory <= 0 {
		return 0
	}
	return float64(r.Held.Memory) / float64(r.Capacity.Memory)
}

// String describes the instant for a report.
func (r resourceInstant) String() string {
	return fmt.Sprintf("%s (pid %d) at %s ran %d jobs needing %s, capacity %s",
		r.Worker, r.PID, clock(r.At), r.Runs, r.Held, r.Capacity)
}

// checkResources sweeps each process's runs: at every start or end it adds
// up the needs of the runs going and compares them with the capacity.
func checkResources(runs []attemptRun) resourceCheck {
	type event struct {
		at    time.Time
		need  contracts.Resources
		delta int
	}
	var out resourceCheck
	byPID := map[int][]event{}
	capacity := map[int]contracts.Resources{}
	worker := map[int]string{}
	for _, r := range runs {
		if r.Need == nil || r.Capacity == nil {
			continue
		}
		out.Declared++
		worker[r.PID] = r.Worker
		if c, ok := capacity[r.PID]; !ok || !c.Fits(*r.Capacity) {
			capacity[r.PID] = *r.Capacity // the smallest the process said
		}
		if r.Until.After(r.Start) {
			byPID[r.PID] = append(byPID[r.PID], event{r.Start, *r.Need, +1}, event{r.Until, *r.Need, -1})
		}
	}
	pids := make([]int, 0, len(byPID))
	for pid := range byPID {
		pids = append(pids, pid)
	}
	sort.Ints(pids)
	for _, pid := range pids {
		ev := byPID[pid]
		sort.Slice(ev, func(i, k int) bool { return ev[i].at.Before(ev[k].at) })
		var (
			held  contracts.Resources
			going int
			over  int
		)
		for i := 0; i < len(ev); {
			at := ev[i].at
			for ; i < len(ev) && ev[i].at.Equal(at); i++ { // half-open spans: look after every change at one instant
				if ev[i].delta > 0 {
					held = held.Add(ev[i].need)
				} else {
					held = held.Sub(ev[i].need)
				}
				going += ev[i].delta
			}
			now := resourceInstant{Worker: worker[pid], PID: pid, At: at, Held: held, Capacity: capacity[pid], Runs: going}
			if now.cpuShare() > out.CPU.cpuShare() || out.CPU.Capacity.IsZero() {
				out.CPU = now
			}
			if now.memoryShare() > out.Memory.memoryShare() || out.Memory.Capacity.IsZero() {
				out.Memory = now
			}
			if !held.Fits(now.Capacity) {
				if over < 3 { // a few instants per process say enough
					out.Over = append(out.Over, now.String())
				}
				over++
			}
		}
	}
	return out
}
